"""The Kubernetes objects a stack's program declares, as the API server would receive them.

Read from the same offline run as ``parkbrake plan`` (stacks/offline.py): every registered resource of the
Kubernetes provider, its inputs being the object. The order is the order to apply them in: namespaces and
RBAC first, Karpenter's and Kueue's cluster objects before what refers to them, workloads last.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from stacks.config import StackConfig
from stacks.offline import OfflineRun, jsonable, run_offline

APPLY_ORDER = (
    "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    "EC2NodeClass", "NodePool", "ResourceFlavor", "AdmissionCheck", "WorkloadPriorityClass", "ClusterQueue",
    "LocalQueue", "Service", "Deployment", "DaemonSet", "CronJob", "PodMonitor", "ServiceMonitor",
)  # fmt: skip


def _plain(value: Any) -> Any:
    """JSON as the API server reads it: the mock engine hands every number over as a float (8080.0)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def objects_of(run: OfflineRun) -> list[dict[str, Any]]:
    """Every Kubernetes object of the run (not the provider), in apply order, then by namespace and name."""
    found = [
        _plain(jsonable(resource.inputs))
        for resource in run.resources
        if resource.custom and resource.type.startswith("kubernetes:")
    ]

    def order(body: dict[str, Any]) -> tuple[int, str, str]:
        kind = str(body.get("kind"))
        metadata = body.get("metadata") or {}
        rank = APPLY_ORDER.index(kind) if kind in APPLY_ORDER else len(APPLY_ORDER)
        return rank, str(metadata.get("namespace", "")), str(metadata.get("name", ""))

    return sorted(found, key=order)


def kubernetes_objects(config: StackConfig) -> list[dict[str, Any]]:
    """Run the stack's program offline (as ``plan`` does) and return the objects it declares."""
    from stacks.platform import build_platform

    run = run_offline(lambda: build_platform(config), stack=config.stack, region=config.region)
    return objects_of(run)


def counts_by_kind(objects: list[dict[str, Any]]) -> dict[str, int]:
    return dict(sorted(Counter(f"{body['apiVersion']} {body['kind']}" for body in objects).items()))
