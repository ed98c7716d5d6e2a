"""BudgetController under the offline engine: its Deployment, ServiceAccount and least-privilege RBAC."""

from __future__ import annotations

from components.k8s.budget_controller import BudgetController, BudgetControllerArgs
from stacks.offline import OfflineRun, run_offline


def build() -> OfflineRun:
    args = BudgetControllerArgs(
        stack="eks",
        namespace="parkbrake",
        image="example/control-plane:1",
        revision="abc",
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
        ("kueue.x-k8s.io", "admissionchecks"): {"list", "watch"},
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


def test_the_container_is_restarted_when_a_loop_dies_and_serves_metrics_on_the_probed_port() -> None:
    from cli.k8s.metrics import HEALTH_PATH, HEALTH_PORT

    (deployment,) = build().of_type("kubernetes:apps/v1:Deployment")

    (container,) = deployment.inputs["spec"]["template"]["spec"]["containers"]
    assert container["ports"] == [{"name": "health", "containerPort": HEALTH_PORT}]
    probe = container["livenessProbe"]
    assert probe["httpGet"] == {"path": HEALTH_PATH, "port": "health"}  # what the controller serves
    assert probe["failureThreshold"] * probe["periodSeconds"] >= 60  # a slow minute is not a death
