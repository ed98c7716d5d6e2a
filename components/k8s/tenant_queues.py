"""``TenantQueues``: Kueue ``v1beta2`` admission for every tenant, gated by parkbrake's budget check.

- a ``ResourceFlavor`` per tenant pool, named after its NodePool (``research-training``), whose
  ``nodeLabels`` name that NodePool (``karpenter.sh/nodepool``) and its instance type, tolerating the GPU
  taint. Kueue copies a flavor's ``nodeLabels`` into the admitted pods' ``nodeSelector``
  (kueue v0.19.2 ``pkg/podset/podset.go``) and Karpenter labels every node it launches with its NodePool
  (karpenter v1.14.1 ``pkg/apis/v1/labels.go`` ``NodePoolLabelKey``, set in
  ``pkg/controllers/provisioning/scheduling/nodeclaimtemplate.go``): a tenant's Job lands only on its
  tenant's nodes, even where two tenants run the same GPU type (a flavor per type would let one
  tenant's Job take, and be billed against, the other's NodePool);
- per tenant: its namespaces (labelled ``parkbrake.dev/tenant``), a ``ClusterQueue`` named after the
  tenant that admits only those namespaces, with a GPU ``nominalQuota`` per GPU type (the tenant's
  ``gpu_quota``, never more than the type's NodePool can hold), its admission gated by the
  ``parkbrake-budget`` AdmissionCheck; and a ``LocalQueue`` of the same name in each namespace;
- the ``AdmissionCheck`` whose controller is ``parkbrake.dev/budget`` (``parkbrake k8s controller``);
- ``WorkloadPriorityClass``es for jobs to pick.

Parked, every ClusterQueue has ``stopPolicy: Hold``: nothing new is admitted, admitted work finishes.

Quota here is GPUs only (``coveredResources: [nvidia.com/gpu]``): the cluster's Kueue configuration leaves
CPU and memory out of quota (docs/kubernetes.md). A job's runtime is its ``kueue.x-k8s.io/max-exec-time-seconds``
label; without it the budget check reserves for the pool's cap, which Karpenter's ``expireAfter`` enforces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.apiextensions import CustomResource

from components.common import child_of
from components.k8s.common import (
    BUDGET_CHECK,
    BUDGET_CONTROLLER_NAME,
    GPU_RESOURCE,
    GPU_TOLERATION,
    KUEUE_API,
    NODE_POOL_LABEL,
    TENANT_LABEL,
    KubernetesObject,
    labels,
    type_token,
)

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# name → (value, what it is for); higher is admitted, and preempts, first.
PRIORITY_CLASSES: Mapping[str, tuple[int, str]] = {
    "parkbrake-serving": (1000, "online inference and anything a user waits on"),
    "parkbrake-normal": (100, "training runs"),
    "parkbrake-batch": (10, "sweeps and backfills that may wait"),
}


@dataclass(frozen=True)
class GpuType:
    """One of the tenant's GPU pools, as its ClusterQueue offers it: a flavor of its own."""

    node_pool: str  # the pool's NodePool (``<tenant>-<pool>``): also the flavor's name
    instance_type: str
    gpu_limit: int  # the GPUs the NodePool may hold (max nodes × GPUs per node)

    @property
    def flavor(self) -> str:
        """The ResourceFlavor's name: the NodePool's (stacks/kubernetes_config.py ``flavor_name``)."""
        return self.node_pool

    @property
    def node_labels(self) -> dict[str, str]:
        """What the flavor selects: its NodePool's nodes (Karpenter's label), of its instance type."""
        return {NODE_POOL_LABEL: self.node_pool, INSTANCE_TYPE_LABEL: self.instance_type}


@dataclass(frozen=True)
class QueueTenant:
    name: str
    namespaces: tuple[str, ...]
    gpu_quota: int
    gpu_types: tuple[GpuType, ...]  # the tenant's pools' types, in the order Kueue tries them


@dataclass
class TenantQueuesArgs:
    stack: str
    tenants: Sequence[QueueTenant]
    parked: bool = False

    def __post_init__(self) -> None:
        names = [tenant.name for tenant in self.tenants]
        if len(set(names)) != len(names):
            raise ValueError(f"tenant names repeat: {names}")
        flavors = [gpu_type.flavor for tenant in self.tenants for gpu_type in tenant.gpu_types]
        if len(set(flavors)) != len(flavors):
            raise ValueError(f"flavor names repeat: {flavors}; a flavor selects one tenant's NodePool")

    @property
    def stop_policy(self) -> str:
        return "Hold" if self.parked else "None"


class TenantQueues(pulumi.ComponentResource):
    cluster_queues: pulumi.Output[list[str]]

    def __init__(self, name: str, args: TenantQueuesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(type_token("TenantQueues"), name, None, opts)
        check = CustomResource(
            f"{name}-budget-check",
            api_version=KUEUE_API,
            kind="AdmissionCheck",
            metadata={"name": BUDGET_CHECK, "labels": labels(args.stack)},
            spec={"controllerName": BUDGET_CONTROLLER_NAME},
            opts=child_of(self),
        )
        flavors = {
            gpu_type.flavor: CustomResource(
                f"{name}-flavor-{gpu_type.flavor}",
                api_version=KUEUE_API,
                kind="ResourceFlavor",
                metadata={"name": gpu_type.flavor, "labels": labels(args.stack, {TENANT_LABEL: tenant.name})},
                spec={"nodeLabels": gpu_type.node_labels, "tolerations": [GPU_TOLERATION]},
                opts=child_of(self),
            )
            for tenant in args.tenants
            for gpu_type in tenant.gpu_types
        }
        for priority, (value, purpose) in PRIORITY_CLASSES.items():
            KubernetesObject(
                f"{name}-priority-{priority}",
                {
                    "apiVersion": KUEUE_API,
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": priority, "labels": labels(args.stack)},
                    "value": value,
                    "description": purpose,
                },
                opts=child_of(self),
            )
        for tenant in args.tenants:
            self._tenant(name, args, tenant, depends_on=[check, *flavors.values()])
        self.cluster_queues = pulumi.Output.from_input([tenant.name for tenant in args.tenants])
        self.register_outputs({"clusterQueues": self.cluster_queues, "admissionCheck": BUDGET_CHECK})

    def _tenant(
        self, name: str, args: TenantQueuesArgs, tenant: QueueTenant, depends_on: list[pulumi.Resource]
    ) -> None:
        tenant_labels = labels(args.stack, {TENANT_LABEL: tenant.name})
        namespaces = [
            k8s.core.v1.Namespace(
                f"{name}-namespace-{namespace}",
                metadata={"name": namespace, "labels": tenant_labels},
                opts=child_of(self),
            )
            for namespace in tenant.namespaces
        ]
        queue = CustomResource(
            f"{name}-cluster-queue-{tenant.name}",
            api_version=KUEUE_API,
            kind="ClusterQueue",
            metadata={"name": tenant.name, "labels": tenant_labels},
            spec={
                "namespaceSelector": {"matchLabels": {TENANT_LABEL: tenant.name}},
                "queueingStrategy": "BestEffortFIFO",
                "resourceGroups": [
                    {
                        "coveredResources": [GPU_RESOURCE],
                        "flavors": [
                            {
                                "name": gpu_type.flavor,
                                "resources": [
                                    {
                                        "name": GPU_RESOURCE,
                                        "nominalQuota": min(tenant.gpu_quota, gpu_type.gpu_limit),
                                    }
                                ],
                            }
                            for gpu_type in tenant.gpu_types
                        ],
                    }
                ]
                if tenant.gpu_types
                else [],
                "admissionChecksStrategy": {"admissionChecks": [{"name": BUDGET_CHECK}]},
                "stopPolicy": args.stop_policy,
            },
            opts=child_of(self, depends_on=depends_on),
        )
        for namespace, namespace_object in zip(tenant.namespaces, namespaces, strict=True):
            CustomResource(
                f"{name}-local-queue-{namespace}",
                api_version=KUEUE_API,
                kind="LocalQueue",
                metadata={"name": tenant.name, "namespace": namespace, "labels": tenant_labels},
                spec={"clusterQueue": tenant.name},
                opts=child_of(self, depends_on=[queue, namespace_object]),
            )
