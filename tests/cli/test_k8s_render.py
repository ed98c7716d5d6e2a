"""`parkbrake k8s render`: the Kubernetes objects of the eks stack as YAML or JSON, and its refusals."""

from __future__ import annotations

import json

from click.testing import CliRunner
from ruamel.yaml import YAML

from cli.main import parkbrake
from tests.conftest import REPO_ROOT


def render(*arguments: str) -> tuple[int, str]:
    result = CliRunner().invoke(parkbrake, ["k8s", "render", "--project-dir", str(REPO_ROOT), *arguments])
    return result.exit_code, result.output


def test_yaml_is_one_document_per_object_namespaces_first() -> None:
    code, output = render("--stack", "eks")

    assert code == 0, output
    documents = list(YAML(typ="safe").load_all(output))
    assert len(documents) == 40
    assert documents[0]["kind"] == "Namespace"
    assert documents[-1]["kind"] == "PodMonitor"


def test_json_is_a_list_and_parked_changes_the_limits() -> None:
    code, output = render("--stack", "eks", "--parked", "--output", "json")

    assert code == 0, output
    document = json.loads(output)
    assert document["kind"] == "List"
    limits = {
        body["metadata"]["name"]: body["spec"]["limits"]["nvidia.com/gpu"]
        for body in document["items"]
        if body["kind"] == "NodePool"
    }
    assert limits == {"research-training": "0", "research-large": "0", "product-inference": "0"}
    stop_policies = {
        body["metadata"]["name"]: body["spec"]["stopPolicy"]
        for body in document["items"]
        if body["kind"] == "ClusterQueue"
    }
    assert stop_policies == {"research": "Hold", "product": "Hold"}
    replicas = {
        body["metadata"]["name"]: body["spec"]["replicas"]
        for body in document["items"]
        if body["kind"] == "Deployment"
    }
    # Parked, the services have no replica (as their ECS services on AWS); the controller keeps its one.
    assert replicas == {"inference": 0, "control-plane": 0, "parkbrake-budget-controller": 1}


def test_an_aws_stack_is_refused_with_exit_2() -> None:
    code, output = render("--stack", "dev")

    assert code == 2
    assert "no parkbrake:kubernetes section" in output


def test_an_unknown_stack_is_refused_with_exit_2() -> None:
    code, output = render("--stack", "nosuch")

    assert code == 2
    assert "no config for stack 'nosuch'" in output
