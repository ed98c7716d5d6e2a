"""ParkRole under the offline engine: the brake's account, its ClusterRole and its namespaced Role."""

from __future__ import annotations

from components.k8s.park_role import ParkRole, ParkRoleArgs
from stacks.offline import OfflineRun, run_offline

RBAC = "kubernetes:rbac.authorization.k8s.io/v1"


def build() -> OfflineRun:
    args = ParkRoleArgs(stack="eks", namespace="parkbrake")
    return run_offline(lambda: ParkRole("park", args), stack="eks", region="us-east-1")


def grants(rules: list[dict[str, list[str]]]) -> dict[tuple[str, str], set[str]]:
    return {
        (group, resource): set(rule["verbs"])
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def test_the_brake_patches_queues_and_nodepools_and_deletes_nodeclaims_cluster_wide() -> None:
    (role,) = build().of_type(f"{RBAC}:ClusterRole")

    assert grants(role.inputs["rules"]) == {
        ("kueue.x-k8s.io", "clusterqueues"): {"list", "patch"},
        ("karpenter.sh", "nodepools"): {"list", "patch"},
        ("karpenter.sh", "nodeclaims"): {"list", "delete"},
    }


def test_deployments_only_in_the_stacks_namespace_and_both_bound_to_the_brakes_account() -> None:
    run = build()

    (role,) = run.of_type(f"{RBAC}:Role")
    assert role.inputs["metadata"]["namespace"] == "parkbrake"
    assert grants(role.inputs["rules"]) == {("apps", "deployments"): {"list", "patch"}}
    subject = {"kind": "ServiceAccount", "name": "parkbrake-park", "namespace": "parkbrake"}
    (cluster_binding,) = run.of_type(f"{RBAC}:ClusterRoleBinding")
    (binding,) = run.of_type(f"{RBAC}:RoleBinding")
    assert cluster_binding.inputs["subjects"] == [subject] == binding.inputs["subjects"]
    assert binding.inputs["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "parkbrake-park",
    }  # fmt: skip
    assert binding.inputs["metadata"]["namespace"] == "parkbrake"
