"""The ``kubernetes`` section of a stack's config: the EKS cluster the stack declares its objects in.

A stack with this section is a Kubernetes stack (``Pulumi.eks.yaml``): its GPU pools become Karpenter
NodePools, its tenants Kueue ClusterQueues, its services Deployments (docs/kubernetes.md). The pools,
tenants, services and data stores are the AWS stacks' own keys; this section adds only what Kubernetes
needs on top:

    parkbrake:kubernetes:
      cluster_name: parkbrake-eks
      kubernetes_version: "1.33"
      tenants:
        research: {namespaces: [research], gpu_quota: 16}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from guardrails.errors import InputError
from guardrails.settings_table import AGENT_IDLE_AFTER
from stacks.validation import Section


class _TenantPool(Protocol):
    """What this section reads of a pool (stacks.config's GpuPoolConfig): whose it is."""

    @property
    def tenant(self) -> str: ...


class _Stack(Protocol):
    """What this section reads of a stack (stacks.config's StackConfig, which imports this module)."""

    @property
    def stack(self) -> str: ...

    @property
    def kubernetes(self) -> KubernetesConfig | None: ...


KUBERNETES_KEYS = {
    "cluster_name", "kubernetes_version", "namespace", "node_role", "prometheus_operator",
    "termination_grace_period", "consolidate_after", "tenants", "controller_image", "agent_image",
    "node_security_group_id",
}  # fmt: skip
TENANT_KEYS = {"namespaces", "gpu_quota"}
# The versions kubernetes-validate carries schemas for that EKS still supports (standard or extended).
# From 1.30: the execution-time policy is a ValidatingAdmissionPolicy of admissionregistration.k8s.io/v1.
SUPPORTED_VERSIONS = ("1.30", "1.31", "1.32", "1.33", "1.34")
# A DNS-1123 label: what a namespace name must be.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
IAM_ROLE_NAME = re.compile(r"[\w+=,.@-]{1,64}")
SECURITY_GROUP = re.compile(r"sg-[0-9a-f]+")
IMAGE = re.compile(r"[\w.\-/:]+(@sha256:[0-9a-f]{64})?")


@dataclass(frozen=True)
class KubernetesTenant:
    name: str
    namespaces: tuple[str, ...]
    gpu_quota: int  # GPUs the tenant's ClusterQueue admits at once (its nominalQuota, across GPU types)


@dataclass(frozen=True)
class KubernetesConfig:
    cluster_name: str
    kubernetes_version: str
    tenants: dict[str, KubernetesTenant]
    namespace: str = "parkbrake"  # where the controller, the agent and the services run
    # The IAM role Karpenter's nodes assume (None: the stack creates one, KarpenterNodeRole-<cluster>).
    node_role: str | None = None
    prometheus_operator: bool = False  # the cluster has the Prometheus operator's CRDs: declare monitors
    termination_grace_period: timedelta = timedelta(minutes=30)
    # The agent's idle window (its default --idle-after): a node empty this long is consolidated away.
    consolidate_after: timedelta = AGENT_IDLE_AFTER.default
    controller_image: str = "public.ecr.aws/parkbrake/control-plane:0.1.0"
    agent_image: str = "public.ecr.aws/parkbrake/agent:0.1.0"
    # The cluster's node security group: admitted to the database and the cache, so pods reach them.
    node_security_group_id: str | None = None


def parse_kubernetes(
    root: Section, tenants: Mapping[str, object], pools: Mapping[str, _TenantPool]
) -> KubernetesConfig | None:
    """The section, or None when the stack has none (an AWS stack); problems go to ``root.problems``."""
    if not root.has("kubernetes"):
        return None
    section = root.section("kubernetes", KUBERNETES_KEYS)
    version = section.string("kubernetes_version", hint='a Kubernetes minor version such as "1.33"')
    if version and version not in SUPPORTED_VERSIONS:
        section.problems.add(
            section.at("kubernetes_version"),
            f'"{version}" is not a supported version; use one of {", ".join(SUPPORTED_VERSIONS)} (quoted)',
        )
    kubernetes_tenants = {
        name: _tenant(name, tenant_section, tenants)
        for name, tenant_section in section.named_sections("tenants", TENANT_KEYS, required=True)
    }
    for name in sorted(set(tenants) - set(kubernetes_tenants)):
        if any(pool.tenant == name for pool in pools.values()):
            section.problems.add(
                section.at(f"tenants.{name}"),
                "is required: the tenant has GPU pools; give its namespaces and gpu_quota",
            )
    _check_namespaces_unique(section, kubernetes_tenants)
    return KubernetesConfig(
        cluster_name=section.string("cluster_name", pattern=CLUSTER_NAME, hint="an EKS cluster name"),
        kubernetes_version=version,
        tenants=kubernetes_tenants,
        namespace=section.string("namespace", "parkbrake", pattern=DNS_LABEL, hint="a namespace name"),
        node_role=section.string("node_role", None, pattern=IAM_ROLE_NAME, hint="an IAM role name") or None,
        prometheus_operator=section.boolean("prometheus_operator", False),
        termination_grace_period=section.duration(
            "termination_grace_period", timedelta(minutes=30), floor=timedelta(seconds=1)
        ),
        consolidate_after=section.duration(
            "consolidate_after", AGENT_IDLE_AFTER.default, floor=timedelta(seconds=1)
        ),
        controller_image=section.string(
            "controller_image", KubernetesConfig.controller_image, pattern=IMAGE, hint="a container image"
        ),
        agent_image=section.string(
            "agent_image", KubernetesConfig.agent_image, pattern=IMAGE, hint="a container image"
        ),
        node_security_group_id=section.string(
            "node_security_group_id", None, pattern=SECURITY_GROUP, hint="a security group id such as sg-0abc"
        )
        or None,
    )


def _tenant(name: str, section: Section, tenants: Mapping[str, object]) -> KubernetesTenant:
    if tenants and name not in tenants:
        section.problems.add(
            section.path, f'"{name}" is not a tenant; define it under tenants ({", ".join(sorted(tenants))})'
        )
    namespaces = section.matching_list("namespaces", DNS_LABEL, what="a namespace name (DNS label)")
    if not namespaces and not section.problems.has(section.at("namespaces")):
        section.problems.add(section.at("namespaces"), "is required: list the tenant's namespaces")
    return KubernetesTenant(
        name=name,
        namespaces=tuple(namespaces),
        gpu_quota=section.integer("gpu_quota", minimum=0, maximum=10000),
    )


def _check_namespaces_unique(section: Section, tenants: dict[str, KubernetesTenant]) -> None:
    """A namespace belongs to one tenant: its label names the one ClusterQueue that admits its jobs."""
    owner: dict[str, str] = {}
    for tenant in tenants.values():
        for namespace in tenant.namespaces:
            if namespace in owner:
                section.problems.add(
                    section.at(f"tenants.{tenant.name}.namespaces"),
                    f'"{namespace}" is already tenant {owner[namespace]}\'s; a namespace has one tenant',
                )
            owner[namespace] = tenant.name


def kubernetes_config(config: _Stack) -> KubernetesConfig:
    """The stack's Kubernetes section; an InputError (exit 2) for a stack without one."""
    if config.kubernetes is None:
        raise InputError(
            f"stack {config.stack!r} has no parkbrake:kubernetes section; it is not a Kubernetes stack "
            "(see Pulumi.eks.yaml)"
        )
    return config.kubernetes


def nodepool_name(tenant: str, pool: str) -> str:
    return f"{tenant}-{pool}"


def flavor_name(tenant: str, pool: str) -> str:
    """The Kueue ResourceFlavor of a tenant's pool: its NodePool's name (``research-training``), and it
    selects that NodePool's nodes alone (components/k8s/tenant_queues.py)."""
    return nodepool_name(tenant, pool)
