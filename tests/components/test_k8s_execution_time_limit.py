"""The execution-time policy as the eks stack renders it, its CEL run with cel-python as the API server would.

The evaluator below follows the ValidatingAdmissionPolicy contract (kubernetes v1.33
``staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/``): every ``matchConditions``
expression first, with ``object``, ``oldObject`` (null on CREATE) and ``request``; one false and the policy
does not apply; then ``variables`` in order, each seeing the ones before it as ``variables.<name>``, then
every validation; a validation that is false (or an error, the policy failing closed) denies with its
``messageExpression``, else its ``message``.
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest
from hypothesis import given, settings
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
    """The expression's value, or the CELEvalError it ends in (the API server's runtime error)."""
    environment = celpy.Environment()
    try:
        return environment.program(environment.compile(text)).evaluate(activation)
    except celpy.CELEvalError as error:
        return error


def _true(result: Any) -> bool:
    return result is True or (isinstance(result, celpy.celtypes.BoolType) and bool(result))


def denials(
    policy: dict[str, Any],
    job: dict[str, Any],
    *,
    old: dict[str, Any] | None = None,
    resource: tuple[str, str] = ("batch", "jobs"),
) -> list[str]:
    """The messages the API server would deny ``job`` with under ``policy`` (empty: admitted); ``old`` the
    stored object of an UPDATE (None: a CREATE); ``resource`` the request's (group, resource)."""
    group, plural = resource
    request = {
        "operation": "CREATE" if old is None else "UPDATE",
        "resource": {"group": group, "version": job["apiVersion"].rsplit("/", 1)[-1], "resource": plural},
    }
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(job),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel(request),
    }
    for condition in policy["spec"].get("matchConditions", []):
        result = _run(condition["expression"], activation)
        if isinstance(result, celpy.CELEvalError):  # failurePolicy: Fail
            return [f"matchCondition {condition['name']} failed: {result}"]
        if not _true(result):
            return []  # the policy does not apply
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
        if _true(_run(validation["expression"], activation)):
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


# --- it never stands in Kueue's way: only CREATE and UPDATEs that change the queue or the limit ---


def suspended(body: dict[str, Any], suspend: bool) -> dict[str, Any]:
    changed = copy.deepcopy(body)
    changed["spec"]["suspend"] = suspend
    changed["metadata"]["resourceVersion"] = "2"
    return changed


def test_kueue_suspends_a_job_whose_label_no_longer_passes(research_policy: dict[str, Any]) -> None:
    running = queued(str(TWELVE_HOURS))  # admitted under an older, longer cap; 8h now
    assert denials(research_policy, running) != []  # created today it would be refused

    # HoldAndDrain or a budget stop: Kueue's suspend PATCH (kueue v0.19.2 jobframework/reconciler.go stopJob)
    assert denials(research_policy, suspended(running, True), old=suspended(running, False)) == []
    assert denials(research_policy, suspended(running, False), old=suspended(running, True)) == []


def test_an_update_that_changes_the_queue_or_the_limit_is_judged(research_policy: dict[str, Any]) -> None:
    admitted = queued(str(EIGHT_HOURS))
    longer = queued(str(EIGHT_HOURS + 1))
    assert len(denials(research_policy, longer, old=admitted)) == 1
    unqueued = job({}, gpus=4)
    assert len(denials(research_policy, unqueued, old=admitted)) == 1  # leaving Kueue on a GPU job
    assert denials(research_policy, queued("60"), old=admitted) == []


LABELS = st.dictionaries(
    st.sampled_from([QUEUE, LIMIT, "app"]), st.sampled_from(["research", "60", "99999", "x", ""]), max_size=3
)


@settings(max_examples=60, deadline=None)
@given(labels=LABELS, gpus=st.integers(0, 8), instance_type=st.sampled_from([None, "g5.12xlarge", "x"]))
def test_an_update_that_keeps_both_labels_is_never_denied(
    labels: dict[str, str], gpus: int, instance_type: str | None
) -> None:
    policy = {"spec": policy_spec(TenantCaps("research", {"g5.12xlarge": EIGHT_HOURS}))}
    stored = job(dict(labels), gpus=gpus, instance_type=instance_type)
    changed = job(dict(labels), gpus=gpus, instance_type="p4d.24xlarge")  # Kueue writes the flavor's labels
    changed["spec"]["suspend"] = True

    assert denials(policy, changed, old=stored) == []


# --- every kind Kueue runs here: JobSet, RayJob, PyTorchJob, plain Pods ---


def pod_spec(gpus: int, instance_type: str | None = None) -> dict[str, Any]:
    return job(None, gpus=gpus, instance_type=instance_type)["spec"]["template"]["spec"]


def jobset(labels: dict[str, str], *pods: dict[str, Any]) -> dict[str, Any]:
    replicated = [
        {"name": f"r{i}", "template": {"spec": {"template": {"spec": pod}}}} for i, pod in enumerate(pods)
    ]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "labels": labels}, "spec": {"replicatedJobs": replicated}}  # fmt: skip


def rayjob(labels: dict[str, str], head: dict[str, Any], *workers: dict[str, Any]) -> dict[str, Any]:
    cluster = {"headGroupSpec": {"template": {"spec": head}},
               "workerGroupSpecs": [{"groupName": f"w{i}", "template": {"spec": w}} for i, w in enumerate(workers)]}  # fmt: skip
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj", "labels": labels},
            "spec": {"entrypoint": "python train.py", "rayClusterSpec": cluster}}  # fmt: skip


def pytorchjob(labels: dict[str, str], **replicas: dict[str, Any]) -> dict[str, Any]:
    specs = {name: {"replicas": 1, "template": {"spec": pod}} for name, pod in replicas.items()}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt", "labels": labels},
            "spec": {"pytorchReplicaSpecs": specs}}  # fmt: skip


def pod(labels: dict[str, str], gpus: int, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "labels": labels}
    if owner:
        metadata["ownerReferences"] = [{"name": "o", "uid": "u", "controller": True, **owner}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec(gpus)}


OK = {QUEUE: "research", LIMIT: str(EIGHT_HOURS)}
KINDS = [
    ("JobSet", ("jobset.x-k8s.io", "jobsets"), lambda labels: jobset(labels, pod_spec(0), pod_spec(4))),
    ("RayJob", ("ray.io", "rayjobs"), lambda labels: rayjob(labels, pod_spec(0), pod_spec(1))),
    ("PyTorchJob", ("kubeflow.org", "pytorchjobs"), lambda labels: pytorchjob(labels, Master=pod_spec(8))),
    ("Pod", ("", "pods"), lambda labels: pod(labels, 1)),
]


@pytest.mark.parametrize(("kind", "resource", "make"), KINDS, ids=[kind for kind, _, _ in KINDS])
def test_every_kueue_kind_asking_for_gpus_is_held_to_the_queue_and_the_cap(
    research_policy: dict[str, Any], kind: str, resource: tuple[str, str], make: Any
) -> None:
    assert denials(research_policy, make(OK), resource=resource) == []
    assert denials(research_policy, make({"app": "x"}), resource=resource) == [
        f"a {kind} asking for nvidia.com/gpu must name its tenant's LocalQueue: "
        "set label kueue.x-k8s.io/queue-name: research"
    ]
    over = {QUEUE: "research", LIMIT: str(EIGHT_HOURS + 1)}
    assert len(denials(research_policy, make(over), resource=resource)) == 1


def test_the_cap_holds_for_every_gpu_pod_template_of_a_job(research_policy: dict[str, Any]) -> None:
    twelve = {QUEUE: "research", LIMIT: str(TWELVE_HOURS)}
    on_p4d = jobset(twelve, pod_spec(8, "p4d.24xlarge"), pod_spec(0))
    assert denials(research_policy, on_p4d, resource=("jobset.x-k8s.io", "jobsets")) == []
    one_on_g5 = jobset(twelve, pod_spec(8, "p4d.24xlarge"), pod_spec(4, "g5.12xlarge"))
    assert len(denials(research_policy, one_on_g5, resource=("jobset.x-k8s.io", "jobsets"))) == 1


def test_what_a_covered_owner_made_is_judged_at_the_owner_not_again(research_policy: dict[str, Any]) -> None:
    of_a_job = pod({}, 4, {"apiVersion": "batch/v1", "kind": "Job"})
    assert denials(research_policy, of_a_job, resource=("", "pods")) == []
    jobs_of_a_jobset = job({}, gpus=4)
    jobs_of_a_jobset["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": "js",
            "uid": "u",
            "controller": True,
        }
    ]
    assert denials(research_policy, jobs_of_a_jobset) == []
    # A ReplicaSet's GPU pods in a tenant's namespace go through Kueue like any other
    of_a_replica_set = pod({}, 1, {"apiVersion": "apps/v1", "kind": "ReplicaSet"})
    assert len(denials(research_policy, of_a_replica_set, resource=("", "pods"))) == 1


def test_the_policy_matches_every_kind_on_create_and_update(research_policy: dict[str, Any]) -> None:
    rules = research_policy["spec"]["matchConstraints"]["resourceRules"]

    assert {(rule["apiGroups"][0], rule["apiVersions"][0], rule["resources"][0]) for rule in rules} == {
        ("batch", "v1", "jobs"), ("jobset.x-k8s.io", "v1alpha2", "jobsets"), ("ray.io", "v1", "rayjobs"),
        ("kubeflow.org", "v1", "pytorchjobs"), ("", "v1", "pods"),
    }  # fmt: skip
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in rules)
    assert [c["name"] for c in research_policy["spec"]["matchConditions"]] == [
        "creates-or-relabels",
        "not-its-owners",
    ]
