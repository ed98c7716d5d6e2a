"""The eks stack's program offline: every object it declares, parked and unparked, validated strictly."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stacks.config import StackConfig, load_stack_config
from stacks.kubernetes_objects import counts_by_kind, kubernetes_objects
from stacks.kubernetes_validation import validate_object, validate_objects
from tests.conftest import REPO_ROOT

VERSION = "1.33"


@pytest.fixture(scope="module")
def config() -> StackConfig:
    return load_stack_config("eks", REPO_ROOT)


@pytest.fixture(scope="module")
def rendered(config: StackConfig) -> dict[bool, list[dict[str, Any]]]:
    return {parked: kubernetes_objects(config.with_parked(parked)) for parked in (False, True)}


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {body["metadata"]["name"]: body for body in objects if body["kind"] == kind}


def test_the_stack_declares_every_kind_it_should(rendered: dict[bool, list[dict[str, Any]]]) -> None:
    counts = counts_by_kind(rendered[False])

    assert counts == {
        "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy": 2,  # one per tenant
        "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding": 2,
        "apps/v1 DaemonSet": 1,
        "apps/v1 Deployment": 3,  # control plane, inference, budget controller
        "karpenter.k8s.aws/v1 EC2NodeClass": 3,
        "karpenter.sh/v1 NodePool": 3,
        "kueue.x-k8s.io/v1beta2 AdmissionCheck": 1,
        "kueue.x-k8s.io/v1beta2 ClusterQueue": 2,
        "kueue.x-k8s.io/v1beta2 LocalQueue": 3,
        "kueue.x-k8s.io/v1beta2 ResourceFlavor": 2,
        "kueue.x-k8s.io/v1beta2 WorkloadPriorityClass": 3,
        "monitoring.coreos.com/v1 PodMonitor": 1,
        "rbac.authorization.k8s.io/v1 ClusterRole": 2,  # the controller's, the park brake's
        "rbac.authorization.k8s.io/v1 ClusterRoleBinding": 2,
        "rbac.authorization.k8s.io/v1 Role": 1,  # the brake's Deployments, in the stack's namespace
        "rbac.authorization.k8s.io/v1 RoleBinding": 1,
        "v1 Namespace": 4,
        "v1 Service": 2,
        "v1 ServiceAccount": 2,
    }
    assert counts_by_kind(rendered[True]) == counts  # parking changes values, never what exists


def test_parked_zeroes_gpu_limits_holds_queues_and_stops_gpu_deployments(
    rendered: dict[bool, list[dict[str, Any]]],
) -> None:
    unparked, parked = rendered[False], rendered[True]

    assert {
        name: p["spec"]["limits"]["nvidia.com/gpu"] for name, p in of_kind(unparked, "NodePool").items()
    } == {
        "research-training": "16",
        "research-large": "8",
        "product-inference": "3",
    }
    assert {p["spec"]["limits"]["nvidia.com/gpu"] for p in of_kind(parked, "NodePool").values()} == {"0"}
    assert {q["spec"]["stopPolicy"] for q in of_kind(unparked, "ClusterQueue").values()} == {"None"}
    assert {q["spec"]["stopPolicy"] for q in of_kind(parked, "ClusterQueue").values()} == {"Hold"}
    assert of_kind(unparked, "Deployment")["inference"]["spec"]["replicas"] == 1
    assert of_kind(parked, "Deployment")["inference"]["spec"]["replicas"] == 0
    # The controller keeps running parked (it releases reservations as admitted work ends); the control
    # plane parks to zero as its ECS service does.
    assert of_kind(parked, "Deployment")["parkbrake-budget-controller"]["spec"]["replicas"] == 1
    assert of_kind(unparked, "Deployment")["control-plane"]["spec"]["replicas"] == 2
    assert of_kind(parked, "Deployment")["control-plane"]["spec"]["replicas"] == 0


def test_node_pools_expire_at_their_pools_caps(rendered: dict[bool, list[dict[str, Any]]]) -> None:
    pools = of_kind(rendered[False], "NodePool")

    assert {name: p["spec"]["template"]["spec"]["expireAfter"] for name, p in pools.items()} == {
        "research-training": "8h",
        "research-large": "12h",
        "product-inference": "24h",
    }


@pytest.mark.parametrize("parked", [False, True], ids=["unparked", "parked"])
def test_every_object_validates_strictly(rendered: dict[bool, list[dict[str, Any]]], parked: bool) -> None:
    verdicts = validate_objects(rendered[parked], VERSION)

    assert len(verdicts) == len(rendered[parked])
    assert [(v.kind, v.name, v.errors) for v in verdicts if not v.valid] == []
    custom = [v for v in verdicts if not v.validated_by.startswith("kubernetes-validate")]
    assert {v.kind for v in custom} == {
        "EC2NodeClass", "NodePool", "ResourceFlavor", "AdmissionCheck", "WorkloadPriorityClass",
        "ClusterQueue", "LocalQueue", "PodMonitor",
    }  # fmt: skip
    assert sum(v.cel_evaluated for v in verdicts) > 100  # the CRDs' CEL rules did run


def cluster_queue(rendered: dict[bool, list[dict[str, Any]]]) -> dict[str, Any]:
    return copy.deepcopy(of_kind(rendered[False], "ClusterQueue")["research"])


def test_a_typo_in_a_field_name_fails(rendered: dict[bool, list[dict[str, Any]]]) -> None:
    queue = cluster_queue(rendered)
    queue["spec"]["namespaceSelectr"] = queue["spec"].pop("namespaceSelector")

    verdict = validate_object(queue, VERSION)

    assert not verdict.valid
    assert any("namespaceSelectr" in error for error in verdict.errors)


def test_a_wrong_enum_value_fails(rendered: dict[bool, list[dict[str, Any]]]) -> None:
    queue = cluster_queue(rendered)
    queue["spec"]["stopPolicy"] = "Paused"

    verdict = validate_object(queue, VERSION)

    assert any(error.startswith("spec.stopPolicy:") and "Paused" in error for error in verdict.errors)


def test_a_v1beta1_only_field_fails_in_a_v1beta2_object(rendered: dict[bool, list[dict[str, Any]]]) -> None:
    # v1beta1's flat list of check names; v1beta2 only has admissionChecksStrategy.
    queue = cluster_queue(rendered)
    queue["spec"]["admissionChecks"] = ["parkbrake-budget"]

    verdict = validate_object(queue, VERSION)

    assert any("admissionChecks" in error and "unexpected" in error for error in verdict.errors)


def test_a_failing_cel_rule_fails(rendered: dict[bool, list[dict[str, Any]]]) -> None:
    # Karpenter's NodePool CRD has no minItems on a requirement's values: only its CEL rule refuses an
    # empty `In`, so the JSON Schema passes and the CEL evaluation must catch it.
    node_pool = copy.deepcopy(of_kind(rendered[False], "NodePool")["research-training"])
    node_pool["spec"]["template"]["spec"]["requirements"][0]["values"] = []

    verdict = validate_object(node_pool, VERSION)

    assert verdict.errors == [
        "spec.template.spec.requirements: requirements with operator 'In' must have a value defined "
        "(CEL rule self.all(x, x.operator == 'In' ? x.values.size() != 0 : true))"
    ]


def test_a_built_in_kind_with_an_unknown_field_fails(rendered: dict[bool, list[dict[str, Any]]]) -> None:
    deployment = copy.deepcopy(of_kind(rendered[False], "Deployment")["inference"])
    deployment["spec"]["replica"] = 2

    verdict = validate_object(deployment, VERSION)

    assert verdict.validated_by == "kubernetes-validate (Kubernetes 1.33, strict)"
    assert any("replica" in error for error in verdict.errors)
