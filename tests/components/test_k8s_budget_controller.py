"""BudgetController under the offline engine: its Deployment, ServiceAccount and least-privilege RBAC."""

from __future__ import annotations

import json

from components.k8s.budget_controller import BudgetController, BudgetControllerArgs
from stacks.offline import OfflineRun, run_offline


def build() -> OfflineRun:
    args = BudgetControllerArgs(
        stack="eks",
        namespace="parkbrake",
        image="example/control-plane:1",
        revision="abc",
        tenant_gpu_quotas={"research": 24, "product": 3},
    )
    return run_offline(lambda: BudgetController("budget-controller", args), stack="eks", region="us-east-1")


def test_the_cluster_role_grants_exactly_what_the_controller_needs() -> None:
    (role,) = build().of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")

    grants = {
        (group, resource): set(rule["verbs"])
        for rule in role.inputs["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert grants == {
        ("kueue.x-k8s.io", "workloads"): {"get", "list", "watch"},
        ("kueue.x-k8s.io", "workloads/status"): {"patch"},
        ("kueue.x-k8s.io", "admissionchecks"): {"get", "list", "watch"},
        ("kueue.x-k8s.io", "admissionchecks/status"): {"patch"},
        ("karpenter.sh", "nodeclaims"): {"list", "delete"},
        ("", "events"): {"create"},
    }  # tests/cli/k8s/test_rbac.py proves each is used and nothing else is asked for
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in role.inputs["rules"])


def test_the_deployment_runs_the_controller_for_its_stack_as_its_service_account() -> None:
    run = build()

    (deployment,) = run.of_type("kubernetes:apps/v1:Deployment")
    pod = deployment.inputs["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "parkbrake-budget-controller"
    assert pod["containers"][0]["command"] == ["parkbrake", "k8s", "controller", "--stack", "eks"]
    assert deployment.inputs["spec"]["replicas"] == 1
    (binding,) = run.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding")
    assert binding.inputs["subjects"] == [
        {"kind": "ServiceAccount", "name": "parkbrake-budget-controller", "namespace": "parkbrake"}
    ]
    assert binding.inputs["roleRef"]["name"] == "parkbrake-budget-controller"


def test_the_controller_is_told_each_tenants_gpu_quota_across_its_flavors() -> None:
    (deployment,) = build().of_type("kubernetes:apps/v1:Deployment")

    environment = {
        variable["name"]: variable["value"]
        for variable in deployment.inputs["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert json.loads(environment["PARKBRAKE_TENANT_GPU_QUOTAS"]) == {"product": 3, "research": 24}
