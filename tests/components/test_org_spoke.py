"""A spoke as Pulumi declares it in a member account: its forwarding to the hub bus, the role the hub
assumes and (sweep: spoke) its own deadlines and sweep, under the mock engine; the roles'
documents decided by AWS's documented rules (tests/iam_evaluation.py, a fake named as one)."""

from __future__ import annotations

import json

from botocore import xform_name
from hypothesis import given, settings
from hypothesis import strategies as st

from components.guardrail_lambdas import FUNCTIONS
from components.lambda_archive import code_files
from components.org_spoke_parts import (
    STATE_CHANGE_DETAIL_TYPE,
    TAG_CHANGE_DETAIL_TYPE,
    RolePart,
    ScheduleGroupPart,
    SpokeArgs,
    spoke_parts,
)
from guardrails import names
from guardrails.settings import settings_from_environment
from tests.components.org_build import (
    FUNCTION,
    HUB_ACCOUNT,
    HUB_BUS_ARN,
    MEMBER,
    ROLE,
    ROLE_POLICY,
    RULE,
    TARGET,
    spoke_run,
)
from tests.iam_evaluation import Request, decide

PREFIX = "parkbrake-org-spoke-us-west-2"
NAME = f"spoke-{MEMBER}-us-west-2"
SCHEDULE_GROUP = "aws:scheduler/scheduleGroup:ScheduleGroup"


def policy_of(role_child: str, sweep: str = "central") -> dict[str, object]:
    return json.loads(spoke_run(sweep).named(ROLE_POLICY, f"{NAME}-{role_child}").inputs["policy"])  # type: ignore[arg-type]


def test_both_forwarding_rules_target_the_hub_bus_with_the_forwarding_role() -> None:
    run = spoke_run()
    forwarded = {}
    for rule_name in ("forward-state-changes", "forward-tag-changes"):
        rule = run.named(RULE, f"{NAME}-{rule_name}")
        pattern = json.loads(rule.inputs["eventPattern"])
        (target,) = [t for t in run.of_type(TARGET) if t.inputs["rule"] == rule.inputs["name"]]
        assert target.inputs["arn"] == HUB_BUS_ARN
        assert target.inputs["roleArn"] == f"arn:aws:iam::{MEMBER}:role/{PREFIX}-forward"
        assert "eventBusName" not in rule.inputs  # the default bus, where AWS's own events arrive
        forwarded[pattern["detail-type"][0]] = pattern
    assert forwarded[STATE_CHANGE_DETAIL_TYPE]["source"] == ["aws.ec2"]
    assert forwarded[TAG_CHANGE_DETAIL_TYPE] == {
        "source": ["aws.tag"],
        "detail-type": [TAG_CHANGE_DETAIL_TYPE],
        "detail": {"resource-type": ["instance"], "service": ["ec2"]},
    }


def test_the_forwarding_role_may_put_events_on_the_hub_bus_and_nowhere_else() -> None:
    policy = policy_of("forward-role")
    assert decide(Request("events:PutEvents", HUB_BUS_ARN), [policy]) == "Allow"
    elsewhere = HUB_BUS_ARN.replace("parkbrake-org-hub", "default")
    assert decide(Request("events:PutEvents", elsewhere), [policy]) == "ImplicitDeny"


def test_the_spoke_role_is_named_for_its_region_trusted_by_the_hubs_roles_and_stops_managed_hosts_only() -> (
    None
):
    run = spoke_run()
    role = run.named(ROLE, f"{NAME}-spoke-role")
    assert role.inputs["name"] == PREFIX
    (trust,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert trust["Principal"] == {"AWS": f"arn:aws:iam::{HUB_ACCOUNT}:root"}
    # The root principal admits the hub account; the condition narrows it to the stack's own roles there.
    condition_only = {"Statement": [{key: value for key, value in trust.items() if key != "Principal"}]}
    for principal, expected in [
        (f"arn:aws:iam::{HUB_ACCOUNT}:role/parkbrake-org-reaper", "Allow"),
        (f"arn:aws:iam::{HUB_ACCOUNT}:role/ml-engineer", "ImplicitDeny"),
        (f"arn:aws:iam::{MEMBER}:role/parkbrake-org-reaper", "ImplicitDeny"),  # the member's own
    ]:
        request = Request("sts:AssumeRole", role.inputs["name"], context={"aws:PrincipalArn": principal})
        assert decide(request, [condition_only]) == expected, principal
    policy = policy_of("spoke-role")
    host = f"arn:aws:ec2:us-west-2:{MEMBER}:instance/i-0123456789abcdef0"
    managed = {"aws:ResourceTag/parkbrake:managed": "true"}
    assert decide(Request("ec2:StopInstances", host, context=managed), [policy]) == "Allow"
    assert decide(Request("ec2:StopInstances", host), [policy]) == "ImplicitDeny"
    assert decide(Request("ec2:TerminateInstances", host, context=managed), [policy]) == "ImplicitDeny"
    assert decide(Request("ec2:DescribeInstances", "*"), [policy]) == "Allow"
    # The meter's and the reconciler's attribution of a type the price table lacks (lambdas/engines/
    # metering.py, accelerator_counts) asks EC2 in the host's account, through this role.
    assert decide(Request("ec2:DescribeInstanceTypes", "*"), [policy]) == "Allow"


def test_the_spoke_roles_grant_no_ec2_action_the_guardrails_never_call() -> None:
    """Least privilege in a member account: every EC2 action a spoke's roles grant is one the code the
    hub and the spoke run (the Lambda code archive) calls, boto3's method being botocore's
    ``xform_name`` of the action."""
    code = "\n".join(text.decode() for path, text in code_files().items() if path.endswith(".py"))
    parts = spoke_parts(SpokeArgs("org", HUB_ACCOUNT, "us-east-1", MEMBER, "us-west-2", sweep="spoke"))
    granted = {
        action
        for part in parts
        if isinstance(part, RolePart)
        for grant in part.policy["Statement"]
        for action in grant["Action"]
        if action.startswith("ec2:")
    }
    assert "ec2:StopInstances" in granted
    uncalled = {
        action
        for action in granted
        if f".{xform_name(action[4:])}(" not in code and f'"{xform_name(action[4:])}"' not in code
    }
    assert uncalled == set()


def test_central_spokes_leave_deadlines_to_the_hub_and_spoke_mode_arms_its_own() -> None:
    central, spoke = spoke_run("central"), spoke_run("spoke")
    assert central.of_type(FUNCTION) == []  # the hub's deadline takes the forwarded events
    assert central.of_type(SCHEDULE_GROUP) == []
    assert sorted(f.inputs["name"] for f in spoke.of_type(FUNCTION)) == [
        f"{PREFIX}-deadline",
        f"{PREFIX}-reaper",
    ]
    deadline = spoke.named(FUNCTION, f"{NAME}-deadline")
    assert deadline.inputs["handler"] == "lambdas.deadline.handler"
    reaper = f"arn:aws:lambda:us-west-2:{MEMBER}:function:{PREFIX}-reaper"
    scheduler = f"arn:aws:iam::{MEMBER}:role/{PREFIX}-scheduler"
    assert deadline.inputs["environment"]["variables"] == {
        "PARKBRAKE_STACK": "org",
        "PARKBRAKE_REGIONS": "us-west-2",
        "PARKBRAKE_DEADLINE_TARGET_ARN": reaper,
        "PARKBRAKE_SCHEDULER_ROLE_ARN": scheduler,
        "PARKBRAKE_DEADLINE_GROUP": f"{PREFIX}-deadlines",
    }
    (group,) = spoke.of_type(SCHEDULE_GROUP)
    assert group.inputs["name"] == f"{PREFIX}-deadlines"  # its own, not the hub's parkbrake-org-deadlines
    # What its functions read is where they arm: the group the spoke made.
    read = settings_from_environment(deadline.inputs["environment"]["variables"])
    assert read.deadline_schedule_group() == group.inputs["name"]
    invoke = policy_of("deadline-scheduler-role", "spoke")
    assert decide(Request("lambda:InvokeFunction", reaper), [invoke]) == "Allow"
    arms = policy_of("deadline-role", "spoke")
    schedule = f"arn:aws:scheduler:us-west-2:{MEMBER}:schedule/{PREFIX}-deadlines/parkbrake-i-0abc"
    assert decide(Request("scheduler:CreateSchedule", schedule), [arms]) == "Allow"
    hubs = f"arn:aws:scheduler:us-west-2:{MEMBER}:schedule/parkbrake-org-deadlines/parkbrake-i-0abc"
    assert decide(Request("scheduler:UpdateSchedule", hubs), [arms]) == "ImplicitDeny"  # its group only
    passed = {"iam:PassedToService": "scheduler.amazonaws.com"}
    assert decide(Request("iam:PassRole", scheduler, context=passed), [arms]) == "Allow"
    rules = {t.inputs["rule"] for t in spoke.of_type(TARGET) if t.inputs["targetId"] == "deadline"}
    assert rules == {f"{PREFIX}-deadline", f"{PREFIX}-deadline-tags"}
    clock = spoke.named(RULE, f"{NAME}-sweep-clock")
    assert clock.inputs["scheduleExpression"] == "rate(5 minutes)"
    assert [t.inputs["rule"] for t in spoke.of_type(TARGET) if t.inputs["targetId"] == "reaper"] == [
        f"{PREFIX}-reaper"
    ]


def test_every_child_is_the_spokes_and_named_for_its_account_and_region() -> None:
    run = spoke_run("spoke")
    (component,) = run.of_type("parkbrake:org:Spoke")
    children = [resource for resource in run.resources if resource is not component]
    assert children
    assert all(child.parent == component.urn for child in children)
    assert all(child.name.startswith(f"{NAME}-") for child in children)
    physical = [c.inputs.get("name") or c.inputs.get("layerName") for c in children if c.type != TARGET]
    named = [name for name in physical if name]
    assert all(
        name.startswith((PREFIX, "/aws/lambda/" + PREFIX, "/parkbrake/org/spoke-us-west-2/"))
        for name in named
    )


REGIONS = ("us-east-1", "us-east-2", "us-west-2", "eu-west-1", "ap-southeast-2", "us-gov-west-1")


@settings(max_examples=60, deadline=None)
@given(
    stack=st.from_regex(r"[a-z][a-z0-9-]{0,14}", fullmatch=True),
    regions=st.lists(st.sampled_from(REGIONS), min_size=2, max_size=2, unique=True),
)
def test_no_two_regions_of_an_account_nor_the_hub_share_a_role_or_deadline_group_name(
    stack: str, regions: list[str]
) -> None:
    """IAM's names are the account's, a Scheduler group's the account's and region's: a spoke per
    region and the hub's own roles and deadline group, in the hub account (which may be in the OU, in
    the hub's region too), never take the same one, with either sweep."""
    hub_roles = {names.function_name(stack, f.guardrail) for f in FUNCTIONS} | {names.scheduler_role(stack)}
    spokes = [
        spoke_parts(SpokeArgs(stack, HUB_ACCOUNT, "us-east-1", HUB_ACCOUNT, region, sweep="spoke"))
        for region in regions
    ]
    spoke_roles = [{part.name for part in parts if isinstance(part, RolePart)} for parts in spokes]
    assert spoke_roles[0].isdisjoint(spoke_roles[1])
    assert all(roles.isdisjoint(hub_roles) for roles in spoke_roles)
    assert all(len(name) <= 64 for roles in spoke_roles for name in roles)  # IAM's role name limit
    groups = [[part.name for part in parts if isinstance(part, ScheduleGroupPart)] for parts in spokes]
    assert all(len(group) == 1 for group in groups)
    assert groups[0] != groups[1]
    assert names.deadline_schedule_group(stack) not in groups[0] + groups[1]
    assert names.schedule_group(stack) not in groups[0] + groups[1]
    # Scheduler's group name limit (botocore scheduler/2021-06-30/service-2.json, ScheduleGroupName)
    assert all(len(group) <= 64 for (group,) in groups)
