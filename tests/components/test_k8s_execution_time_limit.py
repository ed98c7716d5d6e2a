"""The execution-time policy as the eks stack renders it, its CEL run with cel-python as the API server would.

The evaluator below follows the ValidatingAdmissionPolicy contract: ``variables`` in order, each seeing the
ones before it as ``variables.<name>``, then every validation; a validation that is false (or an error,
the policy failing closed) denies with its ``messageExpression``, else its ``message``.
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from components.k8s.execution_time_limit import TenantCaps, policy_spec
from stacks.config import load_stack_config
from stacks.kubernetes_objects import kubernetes_objects
from stacks.kubernetes_validation import validate_object
from tests.conftest import REPO_ROOT

QUEUE = "kueue.x-k8s.io/queue-name"
LIMIT = "kueue.x-k8s.io/max-exec-time-seconds"
TYPE = "node.kubernetes.io/instance-type"
EIGHT_HOURS, TWELVE_HOURS = 28_800, 43_200  # the eks stack's research pools: g5.12xlarge 8h, p4d.24xlarge 12h


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return kubernetes_objects(load_stack_config("eks", REPO_ROOT))


@pytest.fixture(scope="module")
def research_policy(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    (policy,) = [
        body
        for body in rendered
        if body["kind"] == "ValidatingAdmissionPolicy"
        and body["metadata"]["name"] == "parkbrake-max-exec-time-research"
    ]
    return policy


def _run(text: str, activation: dict[str, Any]) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(text)).evaluate(activation)


def denials(policy: dict[str, Any], job: dict[str, Any]) -> list[str]:
    """The messages the API server would deny ``job`` with under ``policy`` (empty: admitted)."""
    activation: dict[str, Any] = {"object": celpy.json_to_cel(job)}
    variables: dict[str, Any] = {}
    for variable in policy["spec"].get("variables", []):
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()}
        )
        variables[variable["name"]] = _run(variable["expression"], activation)
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    denied = []
    for validation in policy["spec"]["validations"]:
        result = _run(validation["expression"], activation)
        if result is True or (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            continue
        if "messageExpression" in validation:
            denied.append(str(_run(validation["messageExpression"], activation)))
        else:
            denied.append(validation["message"])
    return denied


def job(
    labels: dict[str, str] | None = None, *, gpus: int = 4, instance_type: str | None = None
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "train", "image": "trainer:1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if instance_type:
        pod["nodeSelector"] = {TYPE: instance_type}
    metadata: dict[str, Any] = {"name": "train", "namespace": "research"}
    if labels is not None:
        metadata["labels"] = labels
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"template": {"spec": pod}},
    }


def queued(limit: str | None, **kwargs: Any) -> dict[str, Any]:
    labels = {QUEUE: "research"} | ({LIMIT: limit} if limit is not None else {})
    return job(labels, **kwargs)


def test_every_tenant_gets_a_policy_and_a_denying_binding_over_its_namespaces(
    rendered: list[dict[str, Any]],
) -> None:
    bindings = {
        b["metadata"]["name"]: b["spec"] for b in rendered if b["kind"] == "ValidatingAdmissionPolicyBinding"
    }

    assert bindings["parkbrake-max-exec-time-research"] == {
        "policyName": "parkbrake-max-exec-time-research",
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels": {"parkbrake.dev/tenant": "research"}}},
    }
    assert set(bindings) == {"parkbrake-max-exec-time-research", "parkbrake-max-exec-time-product"}
    for body in rendered:
        if body["kind"].startswith("ValidatingAdmissionPolicy"):
            verdict = validate_object(body, "1.33")
            assert verdict.errors == [], verdict.errors


def test_a_queued_job_within_its_pools_cap_is_admitted(research_policy: dict[str, Any]) -> None:
    assert denials(research_policy, queued(str(EIGHT_HOURS))) == []
    assert denials(research_policy, queued("1")) == []
    assert denials(research_policy, queued(str(TWELVE_HOURS), instance_type="p4d.24xlarge")) == []
    assert denials(research_policy, job(None, gpus=0)) == []  # CPU work outside Kueue is left alone


def test_a_queued_job_without_the_label_is_denied_with_what_to_set(research_policy: dict[str, Any]) -> None:
    (message,) = denials(research_policy, queued(None))

    assert message == (
        "set label kueue.x-k8s.io/max-exec-time-seconds to whole seconds from 1 to 28800, the cap of tenant "
        "research: its pool that expires first (select node.kubernetes.io/instance-type for another)"
    )


def test_the_cap_is_the_selected_pools_else_the_one_that_expires_first(
    research_policy: dict[str, Any],
) -> None:
    assert denials(research_policy, queued(str(EIGHT_HOURS + 1))) != []  # may land on the 8h pool
    (message,) = denials(research_policy, queued(str(TWELVE_HOURS + 1), instance_type="p4d.24xlarge"))
    assert "from 1 to 43200" in message
    assert "its p4d.24xlarge pool" in message
    assert denials(research_policy, queued(str(EIGHT_HOURS + 1), instance_type="g5.12xlarge")) != []


def test_a_gpu_job_that_names_no_queue_is_denied(research_policy: dict[str, Any]) -> None:
    assert denials(research_policy, job({"app": "x"})) == [
        "a Job asking for nvidia.com/gpu must name its tenant's LocalQueue: set label kueue.x-k8s.io/queue-name: research"
    ]
    requests = job(None)
    container = requests["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"nvidia.com/gpu": "1"}}
    assert len(denials(research_policy, requests)) == 1


@pytest.mark.parametrize(
    "value", ["0", "-5", "+5", "1h", "3600.0", " 3600", "99999999999999999999", "٣٦٠٠", "", "0x10", "1e3"]
)
def test_a_label_that_is_not_whole_seconds_within_the_cap_is_denied(
    research_policy: dict[str, Any], value: str
) -> None:
    assert len(denials(research_policy, queued(value))) == 1


@given(st.text(max_size=30))
def test_any_label_value_is_admitted_exactly_when_it_is_whole_seconds_within_the_cap(value: str) -> None:
    policy = {"spec": policy_spec(TenantCaps("research", {"g5.12xlarge": EIGHT_HOURS}))}
    admitted = value.isascii() and value.isdigit() and len(value) <= 9 and 1 <= int(value) <= EIGHT_HOURS

    assert (denials(policy, queued(value)) == []) is admitted


def test_a_tenant_without_a_training_pool_admits_no_queued_job(rendered: list[dict[str, Any]]) -> None:
    (policy,) = [
        b
        for b in rendered
        if b["metadata"]["name"] == "parkbrake-max-exec-time-product"
        and b["kind"] == "ValidatingAdmissionPolicy"
    ]
    product_job = copy.deepcopy(queued("60"))
    product_job["metadata"]["labels"][QUEUE] = "product"

    assert denials(policy, product_job) == [
        "tenant product has no training pool: its queues admit no GPU job"
    ]
