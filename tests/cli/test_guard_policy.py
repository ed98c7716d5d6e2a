"""``parkbrake guard-policy``: the preventive documents, validated by parliament (AWS's own catalogue of
actions and condition keys), small enough for an SCP, and refusing bad input clearly."""

from __future__ import annotations

import json
from typing import Any

import parliament
import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from guardrails.guard_policy import SCP_SIZE_LIMIT, permissions_boundary, service_control_policy
from tests.conftest import REPO_ROOT

DEPLOYER = "arn:aws:iam::123456789012:role/platform-deployer"


def guard_policy(*arguments: str) -> Any:
    return CliRunner().invoke(parkbrake, ["guard-policy", "--project-dir", str(REPO_ROOT), *arguments])


def findings(document: dict[str, Any]) -> list[str]:
    return [f"{f.issue}: {f.detail}" for f in parliament.analyze_policy_string(json.dumps(document)).findings]


def by_sid(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {statement["Sid"]: statement for statement in document["Statement"]}


@pytest.mark.parametrize("build", [service_control_policy, permissions_boundary])
def test_parliament_finds_nothing_wrong(build: Any) -> None:
    assert findings(build("dev", [DEPLOYER])) == []


def test_parliament_would_notice_a_wrong_condition_key() -> None:
    """The check above means something: a misspelt condition key is reported."""
    broken = json.loads(
        json.dumps(service_control_policy("dev")).replace("ec2:InstanceType", "ec2:InstanceTyp")
    )
    assert any("UNKNOWN_CONDITION_FOR_ACTION" in finding for finding in findings(broken))


def test_launching_an_accelerator_needs_both_tags() -> None:
    statements = by_sid(service_control_policy("dev"))
    managed, capped = (
        statements["DenyAcceleratorsNotManaged"],
        statements["DenyAcceleratorsWithoutMaxRuntime"],
    )
    for statement in (managed, capped):
        assert (statement["Effect"], statement["Action"]) == ("Deny", "ec2:RunInstances")
        assert statement["Resource"] == "arn:*:ec2:*:*:instance/*"
        assert {"p*", "g*", "trn*", "inf*", "dl*", "f*", "vt*"} <= set(
            statement["Condition"]["StringLike"]["ec2:InstanceType"]
        )
    assert managed["Condition"]["StringNotEquals"] == {"aws:RequestTag/parkbrake:managed": "true"}
    assert capped["Condition"]["Null"] == {"aws:RequestTag/parkbrake:max-runtime": "true"}


def test_only_the_stacks_roles_and_deployers_edit_parkbrake_tags() -> None:
    statements = by_sid(service_control_policy("dev", [DEPLOYER]))
    ec2, autoscaling = (
        statements["DenyParkbrakeTagEditsOnEC2"],
        statements["DenyParkbrakeTagEditsOnAutoScaling"],
    )
    assert ec2["Action"] == ["ec2:CreateTags", "ec2:DeleteTags"]
    assert autoscaling["Action"] == ["autoscaling:CreateOrUpdateTags", "autoscaling:DeleteTags"]
    for statement in (ec2, autoscaling):
        assert statement["Condition"]["ForAnyValue:StringLike"] == {"aws:TagKeys": ["parkbrake:*"]}
        assert statement["Condition"]["ArnNotLike"] == {
            "aws:PrincipalArn": ["arn:*:iam::*:role/parkbrake-dev-*", DEPLOYER]
        }
    # Tags given at launch are what the launch statements demand; only later edits are denied.
    assert ec2["Condition"]["Null"] == {"ec2:CreateAction": "true"}


def test_the_boundary_is_the_same_denies_behind_an_allow() -> None:
    boundary = permissions_boundary("dev")
    assert boundary["Statement"][0] == {
        "Sid": "AllowWithinTheBoundary",
        "Effect": "Allow",
        "Action": "*",
        "Resource": "*",
    }
    assert boundary["Statement"][1:] == service_control_policy("dev")["Statement"]


def test_the_scp_fits_aws_organizations_limit() -> None:
    printed = guard_policy("--stack", "prod", "--document", "scp", "--deployer-role", DEPLOYER)
    assert printed.exit_code == 0, printed.output
    assert len(printed.output) <= SCP_SIZE_LIMIT
    assert json.loads(printed.output) == service_control_policy("prod", [DEPLOYER])


def test_json_output_holds_both_documents() -> None:
    result = guard_policy("--stack", "dev", "--output", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document == {
        "stack": "dev",
        "service_control_policy": service_control_policy("dev"),
        "permissions_boundary": permissions_boundary("dev"),
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--stack", "nosuch"], "no config for stack 'nosuch'"),
        (["--stack", "dev", "--deployer-role", "deployer"], "--deployer-role: deployer is not a role ARN"),
    ],
)
def test_bad_input_is_one_clear_line(arguments: list[str], message: str) -> None:
    result = guard_policy(*arguments)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
