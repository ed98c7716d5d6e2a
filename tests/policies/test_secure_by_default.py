"""Each secure-by-default rule, tripped by a stack config, fails ``parkbrake plan`` (exit 1) by name."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from cli.main import parkbrake

REPO_ROOT = Path(__file__).resolve().parents[2]
Mutation = Callable[[dict[str, Any]], None]


def dev_config() -> dict[str, Any]:
    return copy.deepcopy(YAML(typ="safe").load((REPO_ROOT / "Pulumi.dev.yaml").read_text()))


def plan(document: dict[str, Any], tmp_path: Path) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "Pulumi.dev.yaml"
    YAML(typ="safe").dump(document, path)
    result = CliRunner().invoke(
        parkbrake,
        ["plan", "--stack", "dev", "--config", str(path), "--project-dir", str(REPO_ROOT), "-o", "json"],
    )
    return result.exit_code, json.loads(result.output)


def failed(report: dict[str, Any]) -> dict[str, list[str]]:
    return {
        verdict["policy"]: [violation["message"] for violation in verdict["violations"]]
        for verdict in report["policies"]
        if not verdict["passed"]
    }


def public_inference_without_certificate(config: dict[str, Any]) -> None:
    config["config"]["parkbrake:inference"].pop("certificate_arn")


def public_control_plane_without_certificate(config: dict[str, Any]) -> None:
    config["config"]["parkbrake:control_plane"]["internal"] = False


def hosts_installing_from_the_public_index(config: dict[str, Any]) -> None:
    config["config"]["parkbrake:hosts"] = {"agent_package": "parkbrake"}


def revision_with_an_apostrophe(config: dict[str, Any]) -> None:
    config["config"]["parkbrake:revision"] = "feat/ann's-fix"


@pytest.mark.parametrize(
    ("trip", "policy", "message"),
    [
        (hosts_installing_from_the_public_index, "gpu-hosts-locked-down",
         "its user data installs from a public package index at boot ('pip install --quiet parkbrake')"),
        (revision_with_an_apostrophe, "names-fit-aws",
         "cluster: tags.parkbrake:revision: \"feat/ann's-fix\" is not accepted as a tag value"),
        (public_inference_without_certificate, "public-endpoints-https-behind-waf",
         "public load balancer inference: its HTTP listener on port 80 serves traffic in the clear"),
        (public_control_plane_without_certificate, "public-endpoints-https-behind-waf",
         "public load balancer control-plane: its HTTP listener on port 80 serves traffic in the clear"),
    ],
)  # fmt: skip
def test_the_config_that_trips_a_rule_fails_plan(
    trip: Mutation, policy: str, message: str, tmp_path: Path
) -> None:
    config = dev_config()
    trip(config)

    exit_code, report = plan(config, tmp_path)

    assert exit_code == 1
    assert policy in failed(report)
    assert any(found.startswith(message) for found in failed(report)[policy]), failed(report)


def test_the_example_as_shipped_passes(tmp_path: Path) -> None:
    exit_code, report = plan(dev_config(), tmp_path)

    assert (exit_code, failed(report)) == (0, {})
