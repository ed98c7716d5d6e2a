"""ServiceDeployment under the offline engine: a service as a Deployment and a Service, as on ECS."""

from __future__ import annotations

from typing import Any

import pytest

from components.k8s.service_deployment import ServiceDeployment, ServiceDeploymentArgs
from stacks.offline import OfflineRun, run_offline

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE = "kubernetes:core/v1:Service"


def deployment_args(**overrides: Any) -> ServiceDeploymentArgs:
    fields: dict[str, Any] = {
        "stack": "eks", "service": "inference", "namespace": "parkbrake", "image": "example/inference:1",
        "revision": "abc123", "replicas": 2, "health_path": "/healthz", "port": 8080,
    }  # fmt: skip
    return ServiceDeploymentArgs(**{**fields, **overrides})


def build(args: ServiceDeploymentArgs) -> OfflineRun:
    return run_offline(lambda: ServiceDeployment(args.service, args), stack="eks", region="us-east-1")


def test_gpu_service_requests_gpus_on_its_node_pool_with_the_revision_and_health_check() -> None:
    run = build(deployment_args(gpus=1, node_pool="product-inference"))

    (deployment,) = run.of_type(DEPLOYMENT)
    spec = deployment.inputs["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert spec["template"]["metadata"]["labels"]["parkbrake.dev/revision"] == "abc123"
    assert pod["nodeSelector"] == {"karpenter.sh/nodepool": "product-inference"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    (container,) = pod["containers"]
    assert container["image"] == "example/inference:1"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert {"name": "PARKBRAKE_REVISION", "value": "abc123"} in container["env"]
    (service,) = run.of_type(SERVICE)
    assert service.inputs["spec"]["selector"] == {"app.kubernetes.io/name": "inference"}


def test_cpu_service_has_no_gpu_and_no_placement() -> None:
    (deployment,) = build(deployment_args(service="control-plane")).of_type(DEPLOYMENT)

    pod = deployment.inputs["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod
    assert "tolerations" not in pod
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["requests"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"replicas": -1}, "replicas must be"), ({"gpus": 1}, "name the NodePool")],
)
def test_bad_arguments_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        deployment_args(**overrides)
