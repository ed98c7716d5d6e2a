"""The Kubernetes rules: judged on the eks program's own resources, then with one thing broken at a time."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from policies.engine import judge
from policies.rule import PolicyContext, Violation
from policies.rules import (
    gpu_deployments_have_a_revision,
    gpu_jobs_carry_exec_time,
    gpu_node_pools_expire,
    gpu_queues_gated_by_budget,
)
from stacks.config import load_stack_config
from stacks.offline import OfflineRun, RegisteredResource, run_offline
from stacks.platform import build_platform
from tests.conftest import REPO_ROOT

NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
ADMISSION_CHECK = "kubernetes:kueue.x-k8s.io/v1beta2:AdmissionCheck"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
POLICY = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"


@pytest.fixture(scope="module")
def eks_run() -> OfflineRun:
    config = load_stack_config("eks", REPO_ROOT)
    return run_offline(lambda: build_platform(config), stack="eks", region=config.region)


def changed(run: OfflineRun, type_token: str, name: str, edit: Any) -> list[RegisteredResource]:
    """The run's resources with one object's inputs edited (a deep copy)."""
    resources = []
    for resource in run.resources:
        if resource.type == type_token and resource.inputs["metadata"]["name"] == name:
            inputs = copy.deepcopy(resource.inputs)
            edit(inputs)
            resources.append(replace(resource, inputs=inputs))
        else:
            resources.append(resource)
    return resources


def messages(violations: Any) -> list[str]:
    return [violation.message for violation in violations if isinstance(violation, Violation)]


def test_the_eks_stack_passes_all_three(eks_run: OfflineRun) -> None:
    context = PolicyContext()
    for rule in (
        gpu_node_pools_expire.RULE,
        gpu_queues_gated_by_budget.RULE,
        gpu_jobs_carry_exec_time.RULE,
        gpu_deployments_have_a_revision.RULE,
    ):
        assert list(rule.check(eks_run.resources, context)) == [], rule.name


@pytest.mark.parametrize(
    ("expire_after", "expected"),
    [
        (None, "is not set (Karpenter's default is 720h)"),
        ("Never", "is Never"),
        ("720h", "longer than the ceiling of 2d"),
    ],
)
def test_a_gpu_node_pool_without_a_finite_expiry_in_the_ceiling_fails(
    eks_run: OfflineRun, expire_after: str | None, expected: str
) -> None:
    def edit(inputs: dict[str, Any]) -> None:
        template = inputs["spec"]["template"]["spec"]
        template.pop("expireAfter")
        if expire_after is not None:
            template["expireAfter"] = expire_after

    resources = changed(eks_run, NODE_POOL, "research-training", edit)
    found = messages(
        gpu_node_pools_expire.RULE.check(resources, PolicyContext(max_runtime_ceiling=timedelta(hours=48)))
    )

    assert len(found) == 1
    assert expected in found[0]


def test_a_gpu_node_pool_without_a_gpu_limit_fails(eks_run: OfflineRun) -> None:
    resources = changed(eks_run, NODE_POOL, "research-large", lambda inputs: inputs["spec"].pop("limits"))

    found = messages(gpu_node_pools_expire.RULE.check(resources, PolicyContext()))

    assert found == ['has no limits["nvidia.com/gpu"]; set the pool\'s maximum in GPUs ("0" parked)']


def test_a_gpu_queue_without_the_budget_check_fails(eks_run: OfflineRun) -> None:
    resources = changed(
        eks_run, CLUSTER_QUEUE, "research", lambda inputs: inputs["spec"].pop("admissionChecksStrategy")
    )

    violations = list(gpu_queues_gated_by_budget.RULE.check(resources, PolicyContext()))

    assert len(violations) == 1
    assert violations[0].resource.endswith("queues-cluster-queue-research")
    assert "without the budget check" in violations[0].message


def test_a_check_of_another_controller_gates_nothing(eks_run: OfflineRun) -> None:
    resources = changed(
        eks_run,
        ADMISSION_CHECK,
        "parkbrake-budget",
        lambda inputs: inputs["spec"].update(controllerName="kueue.x-k8s.io/provisioning-request"),
    )

    assert len(list(gpu_queues_gated_by_budget.RULE.check(resources, PolicyContext()))) == 1


def test_a_gpu_deployment_without_a_revision_label_fails_and_a_cpu_one_need_not(eks_run: OfflineRun) -> None:
    def unlabel(inputs: dict[str, Any]) -> None:
        inputs["spec"]["template"]["metadata"]["labels"].pop("parkbrake.dev/revision")

    gpu = messages(
        gpu_deployments_have_a_revision.RULE.check(
            changed(eks_run, DEPLOYMENT, "inference", unlabel), PolicyContext()
        )
    )
    cpu = messages(
        gpu_deployments_have_a_revision.RULE.check(
            changed(eks_run, DEPLOYMENT, "control-plane", unlabel), PolicyContext()
        )
    )

    assert gpu == [
        "requests GPUs but its pod template has no parkbrake.dev/revision label; label the pods with the revision"
    ]
    assert cpu == []


def _without_binding(run: OfflineRun) -> list[RegisteredResource]:
    return [
        resource
        for resource in run.resources
        if not (
            resource.type == BINDING
            and resource.inputs["metadata"]["name"] == "parkbrake-max-exec-time-research"
        )
    ]


@pytest.mark.parametrize(
    ("broken", "what"),
    [
        (_without_binding, "no binding"),
        (
            lambda run: changed(
                run,
                BINDING,
                "parkbrake-max-exec-time-research",
                lambda i: i["spec"].update(validationActions=["Warn"]),
            ),
            "a binding that only warns",
        ),
        (
            lambda run: changed(
                run,
                POLICY,
                "parkbrake-max-exec-time-research",
                lambda i: i["spec"].update(failurePolicy="Ignore"),
            ),
            "a policy that fails open",
        ),
        (
            lambda run: changed(
                run,
                POLICY,
                "parkbrake-max-exec-time-research",
                lambda i: i["spec"]["matchConstraints"]["resourceRules"][0].update(resources=["cronjobs"]),
            ),
            "a policy that does not cover Jobs",
        ),
    ],
)
def test_a_gpu_queues_namespaces_without_the_execution_time_policy_fail(
    eks_run: OfflineRun, broken: Any, what: str
) -> None:
    found = messages(judge(gpu_jobs_carry_exec_time.RULE, broken(eks_run), PolicyContext()).violations)

    # research's queue admits two namespaces; product's queue covers no GPU type, so it is not judged.
    assert [message.split(",")[0] for message in found] == [
        "admits GPU jobs from namespace research",
        "admits GPU jobs from namespace research-batch",
    ], what
    assert "declare the stack's ExecutionTimeLimit" in found[0]


def test_every_rules_verdict_is_the_same_whatever_order_the_program_registered_its_resources(
    eks_run: OfflineRun,
) -> None:
    # The Pulumi SDK's mocks complete registrations in no fixed order (two CI runs listed the same
    # namespaces in either order); a verdict must not follow it. The eks program with its
    # execution-time bindings gone, so that rules have several violations to order.
    from policies.registry import RULES

    resources = [r for r in eks_run.resources if r.type != BINDING]
    context = PolicyContext()
    found = [judge(rule, resources, context) for rule in RULES]
    assert sum(len(verdict.violations) for verdict in found) >= 2
    for shuffled in (resources[::-1], resources[1::2] + resources[::2]):
        assert [judge(rule, shuffled, context) for rule in RULES] == found
