"""TenantQueues under the offline engine: Kueue v1beta2 flavors, queues gated by the budget check, priorities."""

from __future__ import annotations

from typing import Any

import pytest

from components.k8s.tenant_queues import GpuType, QueueTenant, TenantQueues, TenantQueuesArgs
from stacks.offline import OfflineRun, RegisteredResource, run_offline

KUEUE = "kubernetes:kueue.x-k8s.io/v1beta2"
RESEARCH = QueueTenant(
    "research", ("research", "research-batch"), 24, (GpuType("g5.12xlarge", 16), GpuType("p4d.24xlarge", 8))
)
PRODUCT = QueueTenant("product", ("product",), 2, (GpuType("g5.12xlarge", 8),))


def build(**overrides: Any) -> OfflineRun:
    args = TenantQueuesArgs(**{"stack": "eks", "tenants": [RESEARCH, PRODUCT], **overrides})
    return run_offline(lambda: TenantQueues("queues", args), stack="eks", region="us-east-1")


def by_name(run: OfflineRun, kind: str) -> dict[str, RegisteredResource]:
    return {resource.inputs["metadata"]["name"]: resource for resource in run.of_type(f"{KUEUE}:{kind}")}


def test_one_flavor_per_gpu_type_named_with_dashes_selecting_the_instance_type() -> None:
    flavors = by_name(build(), "ResourceFlavor")

    assert set(flavors) == {"g5-12xlarge", "p4d-24xlarge"}
    spec = flavors["p4d-24xlarge"].inputs["spec"]
    assert spec["nodeLabels"] == {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_each_tenant_has_a_gated_cluster_queue_with_gpu_quota_per_type() -> None:
    queues = by_name(build(), "ClusterQueue")

    research = queues["research"].inputs["spec"]
    assert research["namespaceSelector"] == {"matchLabels": {"parkbrake.dev/tenant": "research"}}
    assert research["admissionChecksStrategy"] == {"admissionChecks": [{"name": "parkbrake-budget"}]}
    assert research["stopPolicy"] == "None"
    (group,) = research["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu"]
    assert [(f["name"], f["resources"][0]["nominalQuota"]) for f in group["flavors"]] == [
        ("g5-12xlarge", 16),
        ("p4d-24xlarge", 8),
    ]
    # The tenant's quota caps each type below what its NodePool could hold.
    (product_group,) = queues["product"].inputs["spec"]["resourceGroups"]
    assert product_group["flavors"][0]["resources"][0]["nominalQuota"] == 2


def test_local_queue_per_namespace_and_namespaces_labelled_with_their_tenant() -> None:
    run = build()

    local = {
        (r.inputs["metadata"]["namespace"], r.inputs["metadata"]["name"]): r
        for r in run.of_type(f"{KUEUE}:LocalQueue")
    }
    assert set(local) == {("research", "research"), ("research-batch", "research"), ("product", "product")}
    assert local[("research-batch", "research")].inputs["spec"] == {"clusterQueue": "research"}
    namespaces = {r.inputs["metadata"]["name"]: r for r in run.of_type("kubernetes:core/v1:Namespace")}
    assert namespaces["research-batch"].inputs["metadata"]["labels"]["parkbrake.dev/tenant"] == "research"


def test_the_budget_admission_check_and_priority_classes() -> None:
    run = build()

    (check,) = by_name(run, "AdmissionCheck").values()
    assert check.inputs["metadata"]["name"] == "parkbrake-budget"
    assert check.inputs["spec"] == {"controllerName": "parkbrake.dev/budget"}
    priorities = {name: r.inputs["value"] for name, r in by_name(run, "WorkloadPriorityClass").items()}
    assert priorities == {"parkbrake-serving": 1000, "parkbrake-normal": 100, "parkbrake-batch": 10}


def test_parked_holds_every_cluster_queue() -> None:
    queues = by_name(build(parked=True), "ClusterQueue")

    assert {name: queue.inputs["spec"]["stopPolicy"] for name, queue in queues.items()} == {
        "research": "Hold",
        "product": "Hold",
    }


def test_a_tenant_named_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="tenant names repeat"):
        TenantQueuesArgs(stack="eks", tenants=[RESEARCH, RESEARCH])
