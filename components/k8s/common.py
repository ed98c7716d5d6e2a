"""What the Kubernetes components share: the token namespace, labels, the GPU resource and taint, durations."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pulumi
from pulumi_kubernetes import _utilities

K8S_TYPE_PREFIX = "parkbrake:k8s"
GPU_RESOURCE = "nvidia.com/gpu"
# The taint every GPU node carries, so that only pods that ask for GPUs (and the agent) land there.
GPU_TAINT = {"key": GPU_RESOURCE, "value": "true", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
TENANT_LABEL = "parkbrake.dev/tenant"
POOL_LABEL = "parkbrake.dev/pool"
STACK_LABEL = "parkbrake.dev/stack"
REVISION_LABEL = "parkbrake.dev/revision"
NAME_LABEL = "app.kubernetes.io/name"
# Karpenter's label on every node of a NodePool (karpenter v1.14.1 pkg/apis/v1/labels.go NodePoolLabelKey).
NODE_POOL_LABEL = "karpenter.sh/nodepool"
MANAGED_BY = {"app.kubernetes.io/managed-by": "parkbrake"}
# The budget admission check: Kueue hands its decision to the controller of this name.
BUDGET_CHECK = "parkbrake-budget"
BUDGET_CONTROLLER_NAME = "parkbrake.dev/budget"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
KARPENTER_API = "karpenter.sh/v1"
EC2_NODE_CLASS_API = "karpenter.k8s.aws/v1"
MONITORING_API = "monitoring.coreos.com/v1"


def type_token(name: str) -> str:
    """``parkbrake:k8s:<Name>``, the token every Kubernetes component registers under."""
    return f"{K8S_TYPE_PREFIX}:{name}"


def labels(stack: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {**MANAGED_BY, STACK_LABEL: stack, **(extra or {})}


def go_duration(duration: timedelta) -> str:
    """A duration as Kubernetes and Karpenter spell it: hours, minutes, seconds only (``36h``, ``1h30m``)."""
    seconds = int(duration.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    text = (
        (f"{hours}h" if hours else "")
        + (f"{minutes}m" if minutes else "")
        + (f"{seconds}s" if seconds else "")
    )
    return text or "0s"


class KubernetesObject(pulumi.CustomResource):
    """Any Kubernetes object given whole (``apiVersion``, ``kind``, ``metadata`` and its other top-level fields).

    For kinds whose fields are not all under ``spec`` (Kueue's WorkloadPriorityClass has ``value`` at the top),
    which the SDK's ``CustomResource`` cannot declare. Registered as the Kubernetes provider registers any kind.
    """

    def __init__(
        self, name: str, body: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        options = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=_utilities.get_version()))
        super().__init__(f"kubernetes:{body['apiVersion']}:{body['kind']}", name, dict(body), options)
