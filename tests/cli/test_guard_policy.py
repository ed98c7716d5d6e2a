"""``parkbrake guard-policy``: the preventive documents, validated by parliament (AWS's own catalogue of
actions and condition keys), small enough for an SCP, and refusing bad input clearly."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import parliament
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import parkbrake
from guardrails import tags
from guardrails.extension import Extension
from guardrails.guard_policy import (
    EXTENSION_TAGS,
    SCP_SIZE_LIMIT,
    permissions_boundary,
    service_control_policy,
)
from guardrails.org_policy import organisation_policy
from tests.conftest import REPO_ROOT
from tests.iam_evaluation import Request, applies

DEPLOYER = "arn:aws:iam::123456789012:role/platform-deployer"
EXTENDERS = "arn:aws:iam::*:role/ml-engineer*"
ENGINEER = "arn:aws:iam::123456789012:role/ml-engineer-ana"  # an extender (the pattern above)
STACK_ROLE = "arn:aws:iam::123456789012:role/parkbrake-dev-reaper"
SOMEONE = "arn:aws:iam::123456789012:role/data-analyst"
INSTANCE = "arn:aws:ec2:us-east-1:123456789012:instance/i-0a1b2c3d4e5f67890"
GROUP = "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:1:autoScalingGroupName/parkbrake-dev-training"


def guard_policy(*arguments: str) -> Any:
    return CliRunner().invoke(parkbrake, ["guard-policy", "--project-dir", str(REPO_ROOT), *arguments])


def findings(document: dict[str, Any]) -> list[str]:
    return [f"{f.issue}: {f.detail}" for f in parliament.analyze_policy_string(json.dumps(document)).findings]


def by_sid(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {statement["Sid"]: statement for statement in document["Statement"]}


@pytest.mark.parametrize("build", [service_control_policy, permissions_boundary])
def test_parliament_finds_nothing_wrong(build: Any) -> None:
    assert findings(build("dev", [DEPLOYER])) == []
    assert findings(build("dev", [DEPLOYER], [EXTENDERS])) == []


def denied_by(
    policy: dict[str, Any], action: str, resource: str, principal: str, tag_keys: list[str]
) -> list[str]:
    """The Sids of the deny statements that match a tag edit on an existing resource, read by IAM's
    documented rules (tests/iam_evaluation.py)."""
    request = Request(action, resource, principal, {"aws:PrincipalArn": principal, "aws:TagKeys": tag_keys})
    return [s["Sid"] for s in policy["Statement"] if s["Effect"] == "Deny" and applies(s, request)]


def test_extend_writes_exactly_the_tags_an_extender_may_set() -> None:
    now = datetime(2036, 3, 2, 11, 48, tzinfo=UTC)
    extension = Extension("i-1", now, now + timedelta(hours=1), timedelta(hours=1), "eval", ENGINEER, now)
    assert sorted(extension.tags()) == sorted(EXTENSION_TAGS)


@pytest.mark.parametrize(
    ("principal", "action", "resource", "tag_keys", "denied"),
    [
        # What `parkbrake extend` sends, as an extender: allowed.
        (ENGINEER, "ec2:CreateTags", INSTANCE, list(EXTENSION_TAGS), []),
        (ENGINEER, "ec2:CreateTags", INSTANCE, [tags.EXEMPT_UNTIL], []),
        (ENGINEER, "ec2:CreateTags", INSTANCE, ["Name"], []),  # not a parkbrake tag at all
        # Anything more: denied.
        (ENGINEER, "ec2:CreateTags", INSTANCE, [tags.MANAGED], ["DenyExtendersBeyondTheExtensionTags"]),
        (ENGINEER, "ec2:CreateTags", INSTANCE, [tags.MAX_RUNTIME], ["DenyExtendersBeyondTheExtensionTags"]),
        (ENGINEER, "ec2:CreateTags", INSTANCE, [tags.EXEMPT_UNTIL, tags.MAX_RUNTIME],
         ["DenyExtendersBeyondTheExtensionTags"]),
        (ENGINEER, "ec2:DeleteTags", INSTANCE, [tags.MANAGED], ["DenyExtendersBeyondTheExtensionTags"]),
        (ENGINEER, "autoscaling:CreateOrUpdateTags", GROUP, [tags.MAX_RUNTIME], ["DenyParkbrakeTagEditsOnAutoScaling"]),
        # Whoever is not an extender may not extend; the stack's own roles may tag as before.
        (SOMEONE, "ec2:CreateTags", INSTANCE, [tags.EXEMPT_UNTIL], ["DenyParkbrakeTagEditsOnEC2"]),
        (STACK_ROLE, "ec2:CreateTags", INSTANCE, [tags.MANAGED, tags.MAX_RUNTIME], []),
    ],
)  # fmt: skip
def test_an_extender_sets_the_extension_tags_and_no_other_parkbrake_tag(
    principal: str, action: str, resource: str, tag_keys: list[str], denied: list[str]
) -> None:
    for policy in (service_control_policy("dev", [DEPLOYER], [EXTENDERS]),
                   permissions_boundary("dev", [DEPLOYER], [EXTENDERS])):  # fmt: skip
        assert denied_by(policy, action, resource, principal, tag_keys) == denied


def test_without_extenders_the_policy_is_as_before_and_an_engineer_cannot_extend() -> None:
    policy = service_control_policy("dev", [DEPLOYER])
    assert "DenyExtendersBeyondTheExtensionTags" not in by_sid(policy)
    assert denied_by(policy, "ec2:CreateTags", INSTANCE, ENGINEER, list(EXTENSION_TAGS)) == [
        "DenyParkbrakeTagEditsOnEC2"
    ]


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
    printed = guard_policy(
        "--stack", "prod", "--document", "scp", "--deployer-role", DEPLOYER, "--extender-role", EXTENDERS
    )
    assert printed.exit_code == 0, printed.output
    assert len(printed.output) <= SCP_SIZE_LIMIT
    assert json.loads(printed.output) == service_control_policy("prod", [DEPLOYER], [EXTENDERS])


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
        (["--stack", "dev", "--extender-role", "ml-*"], "--extender-role: ml-* is not a role ARN"),
        (["--stack", "dev", "--deployer-role", "arn:aws:iam::*:role/*"],
         "--deployer-role: arn:aws:iam::*:role/* matches every role"),
    ],
)  # fmt: skip
def test_bad_input_is_one_clear_line(arguments: list[str], message: str) -> None:
    result = guard_policy(*arguments)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def launch_denied_by(policy: dict[str, Any], instance_type: str, request_tags: dict[str, str]) -> list[str]:
    """The Sids of the deny statements that match ``RunInstances`` of ``instance_type`` with these tags."""
    context = {"ec2:InstanceType": instance_type} | {
        f"aws:RequestTag/{key}": value for key, value in request_tags.items()
    }
    resource = "arn:aws:ec2:us-east-1:123456789012:instance/*"
    request = Request("ec2:RunInstances", resource, context=context)
    return [s["Sid"] for s in policy["Statement"] if s["Effect"] == "Deny" and s["Action"] == "ec2:RunInstances"
            and applies(s, request)]  # fmt: skip


@pytest.mark.parametrize(
    ("max_runtime", "denied"),
    [("90m", False), ("2h", False), ("1h30m", False), ("5400s", False), ("1d", False), ("24h", False),
     ("1440m", False), ("9999999999d", True), ("900h", True), ("25h", True), ("1441m", True),
     ("86401s", True), ("2d", True), ("1" * 300 + "h", True), ("", True)],
)  # fmt: skip
def test_a_launch_is_denied_unless_its_max_runtime_fits_the_ceiling(max_runtime: str, denied: bool) -> None:
    policy = service_control_policy("dev", ceiling=timedelta(hours=24))
    tags_given = {tags.MANAGED: "true", tags.MAX_RUNTIME: max_runtime}
    found = launch_denied_by(policy, "g5.xlarge", tags_given)
    assert ("DenyAcceleratorsWithAMaxRuntimeBeyondTheCeiling" in found) is denied, found
    assert launch_denied_by(policy, "m5.large", tags_given) == []  # not an accelerator: none of this applies


@settings(max_examples=400, deadline=None)
@given(
    ceiling_hours=st.integers(1, 744),
    value=st.from_regex(r"\A[0-9]{1,7}[dhms]\Z|\A[0-9]{1,4}[dh][0-9]{1,2}[hm]\Z")
    | st.text("0123456789dhms", max_size=9),
)
def test_every_value_the_policy_lets_through_parses_within_the_ceiling_or_not_at_all(
    ceiling_hours: int, value: str
) -> None:
    """Whatever a "?" of the patterns matches (a digit or a unit letter): a launch the policy allows
    carries a cap within the ceiling, or one the guardrails cannot read (judged under the default)."""
    from guardrails.durations import DurationError, parse_duration

    ceiling = timedelta(hours=ceiling_hours)
    policy = service_control_policy("dev", ceiling=ceiling)
    if launch_denied_by(policy, "p4d.24xlarge", {tags.MANAGED: "true", tags.MAX_RUNTIME: value}):
        return
    try:
        parsed = parse_duration(value, ceiling=None)
    except DurationError:
        return
    assert parsed <= ceiling, (value, ceiling_hours)


@pytest.mark.parametrize("ceiling_hours", [1, 24, 168, 744])
def test_every_one_unit_value_within_the_ceiling_is_let_through(ceiling_hours: int) -> None:
    from guardrails.duration_patterns import duration_patterns

    patterns = duration_patterns(timedelta(hours=ceiling_hours))
    minutes = ceiling_hours * 60
    for value in [f"{n}m" for n in range(1, minutes + 1, 7)] + [f"{n}h" for n in range(1, ceiling_hours + 1)]:
        assert any(fnmatchcase(value, pattern) for pattern in patterns), value


def test_the_scp_of_a_31_day_ceiling_still_fits() -> None:
    from cli.guard_policy import _policy_text

    document = service_control_policy("prod", [DEPLOYER], [EXTENDERS], ceiling=timedelta(days=31))
    assert len(_policy_text(document)) <= SCP_SIZE_LIMIT
    assert json.loads(_policy_text(document)) == document


# ----- --org: the organisation's SCP (tests/guardrails/test_org_policy.py judges its statements)

ORG_DEPLOYERS = "arn:aws:iam::*:role/parkbrake-deployer"


def test_org_prints_the_organisations_scp_without_a_stack_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        parkbrake,
        ["guard-policy", "--org", "--project-dir", str(tmp_path), "--deployer-role", ORG_DEPLOYERS,
         "--extender-role", EXTENDERS],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert len(result.output.strip()) <= SCP_SIZE_LIMIT  # as printed, ready for create-policy --content
    assert json.loads(result.output) == organisation_policy([ORG_DEPLOYERS], [EXTENDERS])


def test_org_json_output_gives_the_size_aws_counts() -> None:
    result = guard_policy("--org", "--deployer-role", ORG_DEPLOYERS, "--output", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    policy = organisation_policy([ORG_DEPLOYERS])
    assert document == {
        "service_control_policy": policy,
        "characters": len(json.dumps(policy, separators=(",", ":"))),
        "limit": SCP_SIZE_LIMIT,
    }
    assert findings(document["service_control_policy"]) == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([], "Error: --deployer-role: give the role(s) that deploy the spokes"),
        (["--deployer-role", "parkbrake-deployer"], "Error: --deployer-role: parkbrake-deployer is not a role ARN"),
        (["--deployer-role", "arn:aws:iam::*:role/*"], "Error: --deployer-role: arn:aws:iam::*:role/* matches every role"),
        (["--deployer-role", ORG_DEPLOYERS, "--document", "boundary"],
         "Error: --document boundary: --org prints a service control policy only"),
        ([arg for n in range(12) for arg in ("--deployer-role", f"arn:aws:iam::{n:012d}:role/stackset-execution")],
         "Error: --deployer-role/--extender-role: the policy would be"),
    ],
)  # fmt: skip
def test_org_bad_input_is_one_line_and_exit_2(arguments: list[str], message: str) -> None:
    result = guard_policy("--org", *arguments)
    assert result.exit_code == 2
    assert result.output.startswith(message)
    assert result.output.count("\n") == 1
