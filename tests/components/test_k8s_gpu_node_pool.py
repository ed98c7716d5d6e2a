"""GpuNodePool under the offline engine: a Karpenter NodePool and EC2NodeClass per tenant and pool."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from components.k8s.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from stacks.offline import OfflineRun, RegisteredResource, run_offline

NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"


def pool_args(**overrides: Any) -> GpuNodePoolArgs:
    fields: dict[str, Any] = {
        "stack": "eks",
        "tenant": "research",
        "pool": "training",
        "instance_type": "g5.12xlarge",
        "gpus_per_node": 4,
        "max_nodes": 4,
        "max_runtime": timedelta(hours=8),
        "cluster_name": "parkbrake-eks",
        "node_role": "KarpenterNodeRole-parkbrake-eks",
        "revision": "abc123",
    }
    return GpuNodePoolArgs(**{**fields, **overrides})


def build(args: GpuNodePoolArgs) -> OfflineRun:
    return run_offline(lambda: GpuNodePool(args.name, args), stack="eks", region="us-east-1")


def only(run: OfflineRun, type_token: str) -> RegisteredResource:
    (resource,) = run.of_type(type_token)
    return resource


def test_node_pool_limits_gpus_expires_nodes_at_the_cap_and_taints_them() -> None:
    run = build(pool_args(termination_grace_period=timedelta(minutes=30)))

    node_pool = only(run, NODE_POOL)
    assert node_pool.inputs["metadata"]["name"] == "research-training"
    assert node_pool.inputs["metadata"]["labels"]["parkbrake.dev/tenant"] == "research"
    assert node_pool.inputs["metadata"]["labels"]["parkbrake.dev/pool"] == "training"
    spec = node_pool.inputs["spec"]
    assert spec["limits"] == {"nvidia.com/gpu": "16"}
    template = spec["template"]["spec"]
    assert template["expireAfter"] == "8h"
    assert template["terminationGracePeriod"] == "30m"
    assert template["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert {
        "key": "node.kubernetes.io/instance-type",
        "operator": "In",
        "values": ["g5.12xlarge"],
    } in template["requirements"]
    assert spec["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "15m"}
    assert template["nodeClassRef"] == {
        "group": "karpenter.k8s.aws",
        "kind": "EC2NodeClass",
        "name": "research-training",
    }


def test_a_cap_of_a_day_or_more_is_spelt_in_hours_as_karpenter_reads_it() -> None:
    run = build(pool_args(max_runtime=timedelta(hours=36, minutes=30)))

    assert only(run, NODE_POOL).inputs["spec"]["template"]["spec"]["expireAfter"] == "36h30m"


def test_node_class_tags_instances_as_managed_attributed_gpu_hosts() -> None:
    run = build(
        pool_args(
            role="inference",
            owner="ml-oncall@parkbrake.dev",
            termination_grace_period=timedelta(minutes=20),
            sweep_every=timedelta(minutes=10),
        )
    )

    node_class = only(run, NODE_CLASS)
    assert node_class.inputs["spec"]["tags"] == {
        "parkbrake:managed": "true",
        "parkbrake:stack": "eks",
        "parkbrake:pool": "training",
        "parkbrake:tenant": "research",
        "parkbrake:max-runtime": "8h",
        "parkbrake:revision": "abc123",
        "parkbrake:reclaim-grace": "30m",  # terminationGracePeriod + one sweep: the sweep's backstop after
        "parkbrake:serving": "true",
        "parkbrake:owner": "ml-oncall@parkbrake.dev",
    }
    assert node_class.inputs["spec"]["role"] == "KarpenterNodeRole-parkbrake-eks"
    assert node_class.inputs["spec"]["metadataOptions"]["httpTokens"] == "required"
    assert node_class.inputs["spec"]["subnetSelectorTerms"] == [
        {"tags": {"karpenter.sh/discovery": "parkbrake-eks"}}
    ]


def test_parked_pool_limits_gpus_to_zero_and_keeps_everything_else() -> None:
    unparked, parked = build(pool_args()), build(pool_args(parked=True))

    assert only(parked, NODE_POOL).inputs["spec"]["limits"] == {"nvidia.com/gpu": "0"}
    assert (
        only(parked, NODE_POOL).inputs["spec"]["template"]
        == only(unparked, NODE_POOL).inputs["spec"]["template"]
    )


def test_children_belong_to_the_component_and_spot_is_a_requirement() -> None:
    run = build(pool_args(capacity_type="spot"))

    (component,) = run.of_type("parkbrake:k8s:GpuNodePool")
    assert {resource.type for resource in run.children_of(component)} == {NODE_POOL, NODE_CLASS}
    requirements = only(run, NODE_POOL).inputs["spec"]["template"]["spec"]["requirements"]
    assert {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]} in requirements


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"instance_type": "m5.large", "gpus_per_node": 0}, "carries no GPU"),
        ({"max_runtime": timedelta(0)}, "max_runtime must be positive"),
    ],
)
def test_bad_arguments_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pool_args(**overrides)
