"""Reading Kubernetes objects as the Pulumi Kubernetes provider registers them: type tokens and fields.

A resource's inputs are the object itself (``apiVersion``, ``kind``, ``metadata``, ``spec``); the type token
is ``kubernetes:<apiVersion>:<kind>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.resources import items, mapping
from policies.rule import ResourceView

NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
ADMISSION_CHECK = "kubernetes:kueue.x-k8s.io/v1beta2:AdmissionCheck"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
GPU_RESOURCE = "nvidia.com/gpu"
BUDGET_CONTROLLER = "parkbrake.dev/budget"
REVISION_LABEL = "parkbrake.dev/revision"


def spec(resource: ResourceView) -> Mapping[str, Any]:
    return mapping(resource.inputs.get("spec"))


def object_name(resource: ResourceView) -> str:
    return str(mapping(resource.inputs.get("metadata")).get("name") or resource.name)


def node_pool_template_spec(node_pool: ResourceView) -> Mapping[str, Any]:
    return mapping(mapping(spec(node_pool).get("template")).get("spec"))


def is_gpu_node_pool(node_pool: ResourceView) -> bool:
    """A NodePool whose nodes carry the GPU taint or that limits GPUs: one that launches GPU nodes."""
    taints = items(node_pool_template_spec(node_pool).get("taints"))
    return GPU_RESOURCE in mapping(spec(node_pool).get("limits")) or any(
        mapping(taint).get("key") == GPU_RESOURCE for taint in taints
    )


def pod_template_spec(deployment: ResourceView) -> Mapping[str, Any]:
    return mapping(mapping(spec(deployment).get("template")).get("spec"))


def requests_gpus(deployment: ResourceView) -> bool:
    for container in items(pod_template_spec(deployment).get("containers")):
        resources = mapping(mapping(container).get("resources"))
        if GPU_RESOURCE in mapping(resources.get("requests")) or GPU_RESOURCE in mapping(
            resources.get("limits")
        ):
            return True
    return False
