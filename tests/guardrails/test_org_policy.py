"""The organisation's SCP: each guarded action on a spoke denied to a member account's roles and left
to the deployers (read by IAM's documented rules, tests/iam_evaluation.py), what stays the on-call's
left alone, clean by parliament, and within AWS Organizations' size limit."""

from __future__ import annotations

import json
from typing import Any

import parliament
import pytest

from guardrails import tags
from guardrails.errors import InputError
from guardrails.guard_policy import EXTENSION_TAGS, SCP_SIZE_LIMIT
from guardrails.org_policy import minified, organisation_policy
from tests.iam_evaluation import Request, decide

DEPLOYERS = "arn:aws:iam::*:role/parkbrake-deployer"
EXTENDERS = "arn:aws:iam::*:role/ml-engineer*"
ACCOUNT = "210987654321"
MEMBER_ADMIN = f"arn:aws:iam::{ACCOUNT}:role/AWSReservedSSO_AdministratorAccess_0123456789abcdef"
DEPLOYER = f"arn:aws:iam::{ACCOUNT}:role/parkbrake-deployer"
SPOKE_ROLE = f"arn:aws:iam::{ACCOUNT}:role/parkbrake-prod-reaper"
ENGINEER = f"arn:aws:iam::{ACCOUNT}:role/ml-engineer-ana"
ALLOW_EVERYTHING = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
}
REGION = f"us-east-1:{ACCOUNT}"
FUNCTION = f"arn:aws:lambda:{REGION}:function:parkbrake-prod-reaper"
INSTANCE = f"arn:aws:ec2:{REGION}:instance/i-0a1b2c3d4e5f67890"
GROUP = f"arn:aws:autoscaling:{REGION}:autoScalingGroup:1:autoScalingGroupName/parkbrake-prod-training"

# (action, resource, request context beyond the principal): what would switch a spoke off.
GUARDED: list[tuple[str, str, dict[str, Any]]] = [
    ("lambda:DeleteFunction", FUNCTION, {}),
    ("lambda:UpdateFunctionCode", FUNCTION, {}),
    ("lambda:UpdateFunctionConfiguration", FUNCTION, {}),
    ("lambda:PutFunctionConcurrency", FUNCTION, {}),  # a reserved concurrency of 0 stops it
    ("lambda:RemovePermission", FUNCTION, {}),
    ("lambda:UpdateAlias", f"{FUNCTION}:live", {}),
    ("lambda:DeleteEventSourceMapping", f"arn:aws:lambda:{REGION}:event-source-mapping:1b2c", {"lambda:FunctionArn": FUNCTION}),
    ("events:DisableRule", f"arn:aws:events:{REGION}:rule/parkbrake-prod-state-changes", {}),
    ("events:DeleteRule", f"arn:aws:events:{REGION}:rule/parkbrake-prod-state-changes", {}),
    ("events:PutRule", f"arn:aws:events:{REGION}:rule/parkbrake-prod-state-changes", {}),
    ("events:RemoveTargets", f"arn:aws:events:{REGION}:rule/parkbrake-prod-decisions/parkbrake-prod-to-hub", {}),
    ("events:PutTargets", f"arn:aws:events:{REGION}:rule/default/parkbrake-prod-to-hub", {}),
    ("events:DeleteEventBus", f"arn:aws:events:{REGION}:event-bus/parkbrake-prod-decisions", {}),
    ("scheduler:UpdateSchedule", f"arn:aws:scheduler:{REGION}:schedule/parkbrake-prod/parkbrake-prod-reaper", {}),
    ("scheduler:DeleteSchedule", f"arn:aws:scheduler:{REGION}:schedule/parkbrake-prod/parkbrake-prod-reaper", {}),
    ("scheduler:DeleteScheduleGroup", f"arn:aws:scheduler:{REGION}:schedule-group/parkbrake-prod", {}),
    ("cloudformation:DeleteStack", f"arn:aws:cloudformation:{REGION}:stack/parkbrake-spoke/4c1d", {}),
    ("cloudformation:UpdateStack", f"arn:aws:cloudformation:{REGION}:stack/StackSet-parkbrake-spoke-9f2e/4c1d", {}),
    ("cloudformation:UpdateTerminationProtection", f"arn:aws:cloudformation:{REGION}:stack/parkbrake-spoke/4c1d", {}),
    ("cloudformation:DeleteStackInstances", f"arn:aws:cloudformation:{REGION}:stackset/parkbrake-spoke:9f2e", {}),
    ("iam:PassRole", SPOKE_ROLE, {"iam:PassedToService": "lambda.amazonaws.com"}),
    ("iam:PassRole", SPOKE_ROLE, {"iam:PassedToService": "scheduler.amazonaws.com"}),
    ("ec2:CreateTags", INSTANCE, {"aws:TagKeys": [tags.MANAGED]}),
    ("ec2:DeleteTags", INSTANCE, {"aws:TagKeys": ["Name", tags.MAX_RUNTIME]}),
    ("autoscaling:DeleteTags", GROUP, {"aws:TagKeys": [tags.POOL]}),
]  # fmt: skip
ROLE_CHANGES: list[tuple[str, str, dict[str, Any]]] = [
    ("iam:CreateRole", f"arn:aws:iam::{ACCOUNT}:role/parkbrake-anything", {}),
    ("iam:DeleteRole", SPOKE_ROLE, {}),
    ("iam:UpdateAssumeRolePolicy", SPOKE_ROLE, {}),
    ("iam:PutRolePolicy", SPOKE_ROLE, {}),
    ("iam:AttachRolePolicy", SPOKE_ROLE, {}),
    ("iam:DeleteRolePermissionsBoundary", SPOKE_ROLE, {}),
]
DEADLINE_SCHEDULE = (
    f"arn:aws:scheduler:{REGION}:schedule/parkbrake-prod-deadlines/deadline-i-0a1b2c3d4e5f67890"
)
# What stays the engineers' own: not the spokes, or what the on-call does on purpose.
LEFT_ALONE: list[tuple[str, str, dict[str, Any]]] = [
    ("scheduler:UpdateSchedule", f"arn:aws:scheduler:{REGION}:schedule/parkbrake-prod/parkbrake-prod-nightly-training", {}),
    ("lambda:DeleteFunction", f"arn:aws:lambda:{REGION}:function:team-etl", {}),
    ("events:DisableRule", f"arn:aws:events:{REGION}:rule/team-nightly", {}),
    ("cloudformation:DeleteStack", f"arn:aws:cloudformation:{REGION}:stack/team-data/4c1d", {}),
    ("iam:DeleteRole", f"arn:aws:iam::{ACCOUNT}:role/team-etl", {}),
    ("iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/parkbrake-prod-inference-task", {"iam:PassedToService": "ecs-tasks.amazonaws.com"}),
    ("ec2:CreateTags", INSTANCE, {"aws:TagKeys": ["Name"]}),
    # Tags given at launch are the launch's (the stack's SCP judges those).
    ("ec2:CreateTags", INSTANCE, {"aws:TagKeys": [tags.MANAGED], "ec2:CreateAction": "RunInstances"}),
]  # fmt: skip


def decision(
    policy: dict[str, Any], principal: str, action: str, resource: str, context: dict[str, Any]
) -> str:
    """The SCP over a role that is otherwise allowed everything: only the SCP's denies can refuse."""
    request = Request(action, resource, principal, {"aws:PrincipalArn": principal, **context})
    return decide(request, [ALLOW_EVERYTHING, policy])


@pytest.fixture(name="policy")
def policy_fixture() -> dict[str, Any]:
    return organisation_policy([DEPLOYERS], [EXTENDERS])


@pytest.mark.parametrize(("action", "resource", "context"), [*GUARDED, *ROLE_CHANGES])
def test_a_member_account_cannot_switch_a_spoke_off(
    policy: dict[str, Any], action: str, resource: str, context: dict[str, Any]
) -> None:
    assert decision(policy, MEMBER_ADMIN, action, resource, context) == "Deny"
    assert decision(policy, DEPLOYER, action, resource, context) == "Allow"


@pytest.mark.parametrize(("action", "resource", "context"), GUARDED)
def test_the_stacks_own_roles_keep_working(
    policy: dict[str, Any], action: str, resource: str, context: dict[str, Any]
) -> None:
    assert decision(policy, SPOKE_ROLE, action, resource, context) == "Allow"


@pytest.mark.parametrize(("action", "resource", "context"), ROLE_CHANGES)
def test_only_the_deployers_make_or_change_a_parkbrake_role(
    policy: dict[str, Any], action: str, resource: str, context: dict[str, Any]
) -> None:
    """A stack's own role may not mint another parkbrake-* role, which every statement would except."""
    assert decision(policy, SPOKE_ROLE, action, resource, context) == "Deny"


@pytest.mark.parametrize(("action", "resource", "context"), LEFT_ALONE)
def test_what_is_not_a_spoke_is_left_alone(
    policy: dict[str, Any], action: str, resource: str, context: dict[str, Any]
) -> None:
    assert decision(policy, MEMBER_ADMIN, action, resource, context) == "Allow"


def test_an_extender_moves_deadlines_and_sets_the_extension_tags_only(policy: dict[str, Any]) -> None:
    for action in ("scheduler:UpdateSchedule", "scheduler:DeleteSchedule"):
        assert decision(policy, ENGINEER, action, DEADLINE_SCHEDULE, {}) == "Allow"
        assert decision(policy, MEMBER_ADMIN, action, DEADLINE_SCHEDULE, {}) == "Deny"
    extension = {"aws:TagKeys": list(EXTENSION_TAGS)}
    assert decision(policy, ENGINEER, "ec2:CreateTags", INSTANCE, extension) == "Allow"
    assert decision(policy, ENGINEER, "ec2:CreateTags", INSTANCE, {"aws:TagKeys": [tags.MANAGED]}) == "Deny"
    reaper = f"arn:aws:scheduler:{REGION}:schedule/parkbrake-prod/parkbrake-prod-reaper"
    assert decision(policy, ENGINEER, "scheduler:UpdateSchedule", reaper, {}) == "Deny"


def test_without_extenders_nobody_but_the_stacks_moves_a_deadline() -> None:
    policy = organisation_policy([DEPLOYERS])
    assert decision(policy, ENGINEER, "scheduler:UpdateSchedule", DEADLINE_SCHEDULE, {}) == "Deny"
    assert decision(policy, SPOKE_ROLE, "scheduler:UpdateSchedule", DEADLINE_SCHEDULE, {}) == "Allow"


def test_every_statement_denies_and_excepts_the_deployers(policy: dict[str, Any]) -> None:
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Deny"
        assert "Principal" not in statement  # an SCP has none (orgs_manage_policies_scps_syntax.html)
        if statement["Sid"] != "DenyExtendersBeyondTheExtensionTags":
            assert DEPLOYERS in statement["Condition"]["ArnNotLike"]["aws:PrincipalArn"]


def test_parliament_finds_nothing_wrong(policy: dict[str, Any]) -> None:
    assert parliament.analyze_policy_string(json.dumps(policy)).findings == []
    broken = json.dumps(policy).replace("lambda:FunctionArn", "lambda:FunctionArm")
    assert any(
        f.issue == "UNKNOWN_CONDITION_FOR_ACTION" for f in parliament.analyze_policy_string(broken).findings
    )


def test_it_fits_an_scp_minified_with_room_for_a_few_more_roles() -> None:
    """AWS counts every character of an SCP against 5,120, whitespace too (orgs_reference_limits.html)."""
    few = organisation_policy([DEPLOYERS, "arn:aws:iam::*:role/OrganizationAccountAccessRole"], [EXTENDERS])
    assert len(minified(few)) <= SCP_SIZE_LIMIT
    assert json.loads(minified(few)) == few
    many = [f"arn:aws:iam::{n:012d}:role/stackset-execution-role" for n in range(12)]
    with pytest.raises(
        InputError, match=r"^--deployer-role/--extender-role: the policy would be \d+ characters"
    ):
        organisation_policy(many)


@pytest.mark.parametrize(
    ("deployers", "extenders", "message"),
    [
        ([], [], "--deployer-role: give the role(s) that deploy the spokes"),
        (["parkbrake-deployer"], [], "--deployer-role: parkbrake-deployer is not a role ARN"),
        (["arn:aws:iam::*:user/ana"], [], "--deployer-role: arn:aws:iam::*:user/ana is not a role ARN"),
        (["arn:aws:iam::*:role/*"], [], "--deployer-role: arn:aws:iam::*:role/* matches every role"),
        (
            [DEPLOYERS],
            ["arn:aws:iam::*:role/*/*"],
            "--extender-role: arn:aws:iam::*:role/*/* matches every role",
        ),
    ],
)
def test_unusable_roles_are_refused(deployers: list[str], extenders: list[str], message: str) -> None:
    with pytest.raises(InputError) as raised:
        organisation_policy(deployers, extenders)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)
