"""TenantQueues under the offline engine: Kueue v1beta2 flavors, queues gated by the budget check, priorities."""

from __future__ import annotations

from typing import Any

import pytest

from components.k8s.tenant_queues import GpuType, QueueTenant, TenantQueues, TenantQueuesArgs
from stacks.offline import OfflineRun, RegisteredResource, run_offline

KUEUE = "kubernetes:kueue.x-k8s.io/v1beta2"
RESEARCH = QueueTenant(
    "research",
    ("research", "research-batch"),
    24,
    (GpuType("research-training", "g5.12xlarge", 16), GpuType("research-large", "p4d.24xlarge", 8)),
)
# The same GPU type as research's training pool: each tenant's pool is a flavor of its own.
PRODUCT = QueueTenant("product", ("product",), 2, (GpuType("product-batch", "g5.12xlarge", 8),))


def build(**overrides: Any) -> OfflineRun:
    args = TenantQueuesArgs(**{"stack": "eks", "tenants": [RESEARCH, PRODUCT], **overrides})
    return run_offline(lambda: TenantQueues("queues", args), stack="eks", region="us-east-1")


def by_name(run: OfflineRun, kind: str) -> dict[str, RegisteredResource]:
    return {resource.inputs["metadata"]["name"]: resource for resource in run.of_type(f"{KUEUE}:{kind}")}


def test_one_flavor_per_tenant_pool_selecting_its_nodepool_and_instance_type() -> None:
    flavors = by_name(build(), "ResourceFlavor")

    assert set(flavors) == {"research-training", "research-large", "product-batch"}
    spec = flavors["research-large"].inputs["spec"]
    assert spec["nodeLabels"] == {
        "karpenter.sh/nodepool": "research-large",
        "node.kubernetes.io/instance-type": "p4d.24xlarge",
    }
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert flavors["product-batch"].inputs["metadata"]["labels"]["parkbrake.dev/tenant"] == "product"


def selects(node_labels: dict[str, str], node: dict[str, str]) -> bool:
    """Kueue writes a flavor's nodeLabels into the pods' nodeSelector (kueue v0.19.2 pkg/podset/podset.go);
    a nodeSelector matches a node that carries every one of its labels."""
    return all(node.get(key) == value for key, value in node_labels.items())


def test_no_flavor_of_one_tenant_selects_another_tenants_nodes_of_the_same_gpu_type() -> None:
    run = build()
    flavors = by_name(run, "ResourceFlavor")
    # Karpenter's labels on a node of each NodePool (karpenter v1.14.1 nodeclaimtemplate.go): its
    # NodePool's name, its instance type.
    nodes = {
        tenant.name: [
            {"karpenter.sh/nodepool": t.node_pool, "node.kubernetes.io/instance-type": t.instance_type}
            for t in tenant.gpu_types
        ]
        for tenant in (RESEARCH, PRODUCT)
    }
    queues = by_name(run, "ClusterQueue")
    for tenant, queue in queues.items():
        (group,) = queue.inputs["spec"]["resourceGroups"]
        for flavor in group["flavors"]:
            node_labels = flavors[flavor["name"]].inputs["spec"]["nodeLabels"]
            assert any(selects(node_labels, node) for node in nodes[tenant])
            for other, other_nodes in nodes.items():
                if other != tenant:
                    assert not any(selects(node_labels, node) for node in other_nodes), (tenant, other)


def test_each_tenant_has_a_gated_cluster_queue_with_gpu_quota_per_type() -> None:
    queues = by_name(build(), "ClusterQueue")

    research = queues["research"].inputs["spec"]
    assert research["namespaceSelector"] == {"matchLabels": {"parkbrake.dev/tenant": "research"}}
    assert research["admissionChecksStrategy"] == {"admissionChecks": [{"name": "parkbrake-budget"}]}
    assert research["stopPolicy"] == "None"
    (group,) = research["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu"]
    assert [(f["name"], f["resources"][0]["nominalQuota"]) for f in group["flavors"]] == [
        ("research-training", 16),
        ("research-large", 8),
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


def test_two_tenants_naming_one_flavor_are_refused() -> None:
    other = QueueTenant("other", ("other",), 2, (GpuType("research-training", "g5.12xlarge", 8),))
    with pytest.raises(ValueError, match="flavor names repeat"):
        TenantQueuesArgs(stack="eks", tenants=[RESEARCH, other])
