"""``ServiceDeployment``: a parkbrake service (the control plane, inference) as a Deployment and a Service.

The same image, revision and health check as on ECS: the pods carry the revision as the
``parkbrake.dev/revision`` label and in ``PARKBRAKE_REVISION`` (what ``/version`` reports), and are ready
when ``health_path`` answers, as the ECS target group checks. A GPU service requests ``nvidia.com/gpu``,
tolerates the GPU taint and is placed on its NodePool; parked, it has no replica (and so its NodePool no node).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.common import child_of
from components.k8s.common import (
    GPU_RESOURCE,
    GPU_TOLERATION,
    NAME_LABEL,
    NODE_POOL_LABEL,
    REVISION_LABEL,
    labels,
    type_token,
)


@dataclass
class ServiceDeploymentArgs:
    stack: str
    service: str  # the Deployment's and the Service's name, e.g. "inference"
    namespace: str
    image: str
    revision: str
    replicas: int
    port: int = 8080
    health_path: str = "/healthz"
    gpus: int = 0  # GPUs per pod; > 0 places the pods on ``node_pool``
    node_pool: str | None = None
    cpu: str = "500m"
    memory: str = "1Gi"
    environment: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    service_account: str | None = None

    def __post_init__(self) -> None:
        if self.replicas < 0:
            raise ValueError(f"replicas must be ≥ 0; got {self.replicas}")
        if self.gpus and not self.node_pool:
            raise ValueError(f"{self.service} requests GPUs: name the NodePool its pods run on")


def _container(args: ServiceDeploymentArgs) -> dict[str, Any]:
    """The service's container: its port and environment, probed on its health path, with its GPUs."""
    probe = {
        "httpGet": {"path": args.health_path, "port": "http"},
        "periodSeconds": 15,
        "timeoutSeconds": 5,
    }
    resources: dict[str, dict[str, str]] = {
        "requests": {"cpu": args.cpu, "memory": args.memory},
        "limits": {"memory": args.memory},
    }
    if args.gpus:
        resources["requests"][GPU_RESOURCE] = str(args.gpus)
        resources["limits"][GPU_RESOURCE] = str(args.gpus)
    environment = [{"name": "PARKBRAKE_REVISION", "value": args.revision}] + [
        {"name": key, "value": value} for key, value in sorted(args.environment.items())
    ]
    return {
        "name": args.service,
        "image": args.image,
        "ports": [{"name": "http", "containerPort": args.port}],
        "env": environment,
        "readinessProbe": probe,
        "livenessProbe": {**probe, "failureThreshold": 3, "initialDelaySeconds": 30},
        "resources": resources,
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True},
    }


def _placement(args: ServiceDeploymentArgs) -> dict[str, Any]:
    """A service with GPUs runs on its NodePool's nodes, tolerating their GPU taint."""
    if not args.gpus:
        return {}
    return {"nodeSelector": {NODE_POOL_LABEL: args.node_pool}, "tolerations": [GPU_TOLERATION]}


class ServiceDeployment(pulumi.ComponentResource):
    service_name: pulumi.Output[str]
    replicas: pulumi.Output[int]

    def __init__(
        self, name: str, args: ServiceDeploymentArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(type_token("ServiceDeployment"), name, None, opts)
        selector = {NAME_LABEL: args.service}
        pod_labels = labels(args.stack, {**selector, REVISION_LABEL: args.revision})
        k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": args.service, "namespace": args.namespace, "labels": pod_labels},
            spec={
                "replicas": args.replicas,
                "selector": {"matchLabels": selector},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        **_placement(args),
                        **({"serviceAccountName": args.service_account} if args.service_account else {}),
                        "containers": [
                            _container(args),
                        ],
                    },
                },
            },
            opts=child_of(self),
        )
        k8s.core.v1.Service(
            f"{name}-service",
            metadata={
                "name": args.service,
                "namespace": args.namespace,
                "labels": labels(args.stack, selector),
            },
            spec={
                "selector": selector,
                "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
                "type": "ClusterIP",
            },
            opts=child_of(self),
        )
        self.service_name = pulumi.Output.from_input(args.service)
        self.replicas = pulumi.Output.from_input(args.replicas)
        self.register_outputs({"serviceName": self.service_name, "replicas": self.replicas})
