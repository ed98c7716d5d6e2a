"""``GpuNodePool``: one tenant's GPU pool on EKS — a Karpenter ``NodePool`` and its ``EC2NodeClass``.

The Kubernetes counterpart of ``components.gpu_pool.GpuPool``:
- ``limits`` in GPUs (the pool's ``max`` hosts × the type's GPUs), ``"0"`` parked: Karpenter launches no
  node past the limit, so parked it launches none;
- ``template.spec.expireAfter`` is the pool's cap: Karpenter forcefully expires every node at that age,
  the per-host deadline of the EC2 pools; ``terminationGracePeriod`` bounds the drain after it;
- consolidation ``WhenEmpty`` after the agent's idle window: on Kubernetes the agent reports and Karpenter
  reclaims the empty node (the host does not shut itself down);
- the ``nvidia.com/gpu`` taint, so only pods that tolerate it (GPU jobs, the agent) land there;
- the EC2NodeClass tags every instance with parkbrake's host tags (``parkbrake:managed``, stack, pool,
  tenant, max-runtime, revision), so the meter, the ledger, the sweep and the guard policy see a node as
  a managed, attributed GPU host, exactly as they see an Auto Scaling group's host — plus
  ``parkbrake:reclaim-grace`` (terminationGracePeriod + one sweep interval): the sweep leaves a node past
  its cap to Karpenter and the budget controller that long before it stops it (guardrails/karpenter.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

import pulumi
from pulumi_kubernetes.apiextensions import CustomResource

from components.common import child_of
from components.k8s.common import (
    EC2_NODE_CLASS_API,
    GPU_RESOURCE,
    GPU_TAINT,
    KARPENTER_API,
    POOL_LABEL,
    TENANT_LABEL,
    go_duration,
    labels,
    type_token,
)
from guardrails import tags
from guardrails.durations import format_duration
from guardrails.settings_table import SWEEP_EVERY

# EKS-optimised Amazon Linux 2023: Karpenter picks its NVIDIA variant for GPU instance types.
AMI_ALIAS = "al2023@latest"
KARPENTER_CAPACITY_TYPE = "karpenter.sh/capacity-type"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


@dataclass
class GpuNodePoolArgs:
    stack: str
    tenant: str
    pool: str
    instance_type: str
    gpus_per_node: int
    max_nodes: int
    max_runtime: timedelta  # the pool's cap: every node expires at this age
    cluster_name: str
    node_role: pulumi.Input[str]  # the IAM role the nodes' instance profile carries
    revision: str
    parked: bool = False
    capacity_type: Literal["on-demand", "spot"] = "on-demand"
    termination_grace_period: timedelta = timedelta(minutes=30)
    sweep_every: timedelta = SWEEP_EVERY  # the guardrails' sweep: one interval more of grace
    consolidate_after: timedelta = timedelta(minutes=15)
    role: Literal["training", "inference"] = "training"
    owner: str | None = None
    # The nightly pool, unparked: its window (``parkbrake k8s window``) sets the GPU limit, and the program
    # leaves it as the window set it (``ignore_changes``); parked, the program sets "0" again.
    window_owns_limit: bool = False
    # Searched by tag: the cluster's subnets and node security group carry karpenter.sh/discovery.
    discovery_tag: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise ValueError(
                f"{self.instance_type} carries no GPU; a GPU node pool needs a GPU instance type"
            )
        if self.max_runtime <= timedelta(0):
            raise ValueError("max_runtime must be positive: it is every node's forceful expiry")

    @property
    def name(self) -> str:
        """``<tenant>-<pool>``: the NodePool's and the EC2NodeClass's name."""
        return f"{self.tenant}-{self.pool}"

    @property
    def gpu_limit(self) -> int:
        return 0 if self.parked else self.max_nodes * self.gpus_per_node


def instance_tags(args: GpuNodePoolArgs) -> dict[str, str]:
    """The tags every node's instance carries: the EC2 pools' host tags (components.gpu_pool.host_tags)."""
    return {
        tags.MANAGED: "true",
        tags.STACK: args.stack,
        tags.POOL: args.pool,
        tags.TENANT: args.tenant,
        tags.MAX_RUNTIME: format_duration(args.max_runtime),
        tags.REVISION: args.revision,
        tags.RECLAIM_GRACE: format_duration(args.termination_grace_period + args.sweep_every),
        **({tags.SERVING: "true"} if args.role == "inference" else {}),
        **({tags.OWNER: args.owner} if args.owner else {}),
    }


class GpuNodePool(pulumi.ComponentResource):
    node_pool_name: pulumi.Output[str]
    gpu_limit: pulumi.Output[int]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(type_token("GpuNodePool"), name, None, opts)
        pool_labels = {TENANT_LABEL: args.tenant, POOL_LABEL: args.pool}
        node_class = CustomResource(
            f"{name}-node-class",
            api_version=EC2_NODE_CLASS_API,
            kind="EC2NodeClass",
            metadata={"name": args.name, "labels": labels(args.stack, pool_labels)},
            spec=_node_class_spec(args),
            opts=child_of(self),
        )
        node_pool = CustomResource(
            f"{name}-node-pool",
            api_version=KARPENTER_API,
            kind="NodePool",
            metadata={"name": args.name, "labels": labels(args.stack, pool_labels)},
            spec={
                "template": {
                    "metadata": {"labels": pool_labels},
                    "spec": {
                        "nodeClassRef": {
                            "group": "karpenter.k8s.aws",
                            "kind": "EC2NodeClass",
                            "name": args.name,
                        },
                        "requirements": _requirements(args),
                        "taints": [GPU_TAINT],
                        "expireAfter": go_duration(args.max_runtime),
                        "terminationGracePeriod": go_duration(args.termination_grace_period),
                    },
                },
                "limits": {GPU_RESOURCE: str(args.gpu_limit)},
                "disruption": {
                    "consolidationPolicy": "WhenEmpty",
                    "consolidateAfter": go_duration(args.consolidate_after),
                },
            },
            opts=child_of(
                self,
                depends_on=[node_class],
                **({"ignore_changes": ["spec.limits"]} if args.window_owns_limit else {}),
            ),
        )
        self.node_pool_name = pulumi.Output.from_input(args.name)
        self.gpu_limit = pulumi.Output.from_input(args.gpu_limit)
        self.register_outputs(
            {"nodePoolName": self.node_pool_name, "gpuLimit": self.gpu_limit, "nodePool": node_pool.id}
        )


def _node_class_spec(args: GpuNodePoolArgs) -> dict[str, Any]:
    """The EC2NodeClass: the AMI, the cluster's subnets and security groups, the hosts' tags, IMDSv2."""
    discovery = dict(args.discovery_tag) or {"karpenter.sh/discovery": args.cluster_name}
    return {
        "role": args.node_role,
        "amiSelectorTerms": [{"alias": AMI_ALIAS}],
        "subnetSelectorTerms": [{"tags": discovery}],
        "securityGroupSelectorTerms": [{"tags": discovery}],
        "tags": instance_tags(args),
        # IMDSv2 only, one hop: pods cannot borrow the node's role through the metadata service.
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        },
    }


def _requirements(args: GpuNodePoolArgs) -> Sequence[Mapping[str, object]]:
    return [
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [args.instance_type]},
        {"key": KARPENTER_CAPACITY_TYPE, "operator": "In", "values": [args.capacity_type]},
    ]
