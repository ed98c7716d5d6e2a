"""``GpuAgent``: the NVML agent (``parkbrake agent``) as a DaemonSet on every GPU node, and its monitor.

It runs only on nodes of parkbrake's NodePools (their ``parkbrake.dev/pool`` label) and tolerates their GPU
taint. It exports the same per-GPU metrics as on EC2 (port 9400, ``/metrics``); on Kubernetes it reports
only — its shutdown command is ``true`` and it never leaves an Auto Scaling group — because Karpenter's
``WhenEmpty`` consolidation reclaims an idle node. With the Prometheus operator's CRDs in the cluster
(``prometheus_operator: true``) a PodMonitor has Prometheus scrape it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.apiextensions import CustomResource

from components.common import child_of
from components.k8s.common import (
    GPU_TOLERATION,
    MONITORING_API,
    NAME_LABEL,
    POOL_LABEL,
    REVISION_LABEL,
    labels,
    type_token,
)

AGENT = "parkbrake-agent"
METRICS_PORT = 9400


@dataclass
class GpuAgentArgs:
    stack: str
    namespace: str
    image: str
    revision: str
    prometheus_operator: bool = False


def _container(image: str, revision: str) -> dict[str, Any]:
    """The agent's container: NVML through the NVIDIA runtime, metrics on its port; it only reports
    (shutdown command ``true``): Karpenter reclaims an idle node."""
    command = [
        "parkbrake",
        "agent",
        "--port",
        str(METRICS_PORT),
        "--shutdown-command",
        "true",
        "--no-release-from-group",
    ]
    return {
        "name": "agent",
        "image": image,
        "command": command,
        # NVML without claiming a GPU: the NVIDIA runtime mounts the driver for all.
        "env": [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
            {"name": "PARKBRAKE_REVISION", "value": revision},
        ],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
        "readinessProbe": {"httpGet": {"path": "/metrics", "port": "metrics"}},
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"memory": "128Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": 65532,
        },
    }


class GpuAgent(pulumi.ComponentResource):
    daemon_set_name: pulumi.Output[str]

    def __init__(self, name: str, args: GpuAgentArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(type_token("GpuAgent"), name, None, opts)
        selector = {NAME_LABEL: AGENT}
        pod_labels = labels(args.stack, {**selector, REVISION_LABEL: args.revision})
        k8s.apps.v1.DaemonSet(
            f"{name}-daemon-set",
            metadata={"name": AGENT, "namespace": args.namespace, "labels": pod_labels},
            spec={
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        "affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [
                                        {"matchExpressions": [{"key": POOL_LABEL, "operator": "Exists"}]}
                                    ]
                                }
                            }
                        },
                        "tolerations": [GPU_TOLERATION],
                        "priorityClassName": "system-node-critical",
                        "containers": [_container(args.image, args.revision)],
                    },
                },
            },
            opts=child_of(self),
        )
        if args.prometheus_operator:
            CustomResource(
                f"{name}-pod-monitor",
                api_version=MONITORING_API,
                kind="PodMonitor",
                metadata={"name": AGENT, "namespace": args.namespace, "labels": labels(args.stack)},
                spec={
                    "selector": {"matchLabels": selector},
                    "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s"}],
                },
                opts=child_of(self),
            )
        self.daemon_set_name = pulumi.Output.from_input(AGENT)
        self.register_outputs({"daemonSetName": self.daemon_set_name})
