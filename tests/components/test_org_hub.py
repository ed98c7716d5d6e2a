"""The hub under the mock engine: the central bus admits the organisation and nobody else (its policy
decided by AWS's documented rules, tests/iam_evaluation.py), the forwarded state changes reach the
one ledger's meter, and the central sweep's reaper may assume the spoke roles of the organisation only."""

from __future__ import annotations

import json
from dataclasses import replace

from components.org_hub import bus_policy, central_sweep_policy
from tests.components.org_build import (
    HUB_BUS_ARN,
    ROLE_POLICY,
    RULE,
    TARGET,
    org_config,
    org_run,
    org_run_of,
)
from tests.iam_evaluation import Request, decide

BUS = "aws:cloudwatch/eventBus:EventBus"
BUS_POLICY = "aws:cloudwatch/eventBusPolicy:EventBusPolicy"
ARCHIVE = "aws:cloudwatch/eventArchive:EventArchive"
PARAMETER = "aws:ssm/parameter:Parameter"
PERMISSION = "aws:lambda/permission:Permission"
ORG_ID = "o-a1b2c3d4e5"


def test_the_hub_bus_admits_every_account_of_the_organisation_and_no_other() -> None:
    run = org_run_of()
    bus = run.named(BUS, "hub")
    assert bus.inputs["name"] == "parkbrake-org-hub"
    policy = json.loads(run.named(BUS_POLICY, "hub").inputs["policy"])
    (admit,) = policy["Statement"]
    assert (admit["Principal"], admit["Action"]) == ("*", "events:PutEvents")
    assert admit["Condition"] == {"StringEquals": {"aws:PrincipalOrgID": ORG_ID}}
    document = bus_policy(HUB_BUS_ARN, ORG_ID)
    for org, expected in [(ORG_ID, "Allow"), ("o-zzzzzzzzzz", "ImplicitDeny"), (None, "ImplicitDeny")]:
        context = {"aws:PrincipalOrgID": org} if org else {}
        request = Request("events:PutEvents", HUB_BUS_ARN, "arn:aws:iam::222222222222:role/x", context)
        assert decide(request, [], [document]) == expected, org
    assert run.named(ARCHIVE, "hub").inputs["retentionDays"] == 35


def forwarded_state_change(state: str) -> dict[str, object]:
    """EC2's state change as a spoke forwards it (the EventBridge events reference's shape)."""
    return {"version": "0", "id": "e-1", "detail-type": "EC2 Instance State-change Notification",
            "source": "aws.ec2", "account": "222222222222", "time": "2036-05-05T10:00:00Z",
            "region": "us-west-2", "resources": [], "detail": {"instance-id": "i-0abc", "state": state}}  # fmt: skip


def forwarded_tag_change(resource_type: str) -> dict[str, object]:
    """A member account's tag change as its spoke forwards it (EventBridge events reference,
    events-ref-tag.html: ``detail.service`` and ``detail.resource-type``)."""
    return {
        "source": "aws.tag",
        "detail-type": "Tag Change on Resource",
        "account": "222222222222",
        "region": "us-west-2",
        "resources": [f"arn:aws:ec2:us-west-2:222222222222:{resource_type}/i-0abc"],
        "detail": {"service": "ec2", "resource-type": resource_type, "changed-tag-keys": ["parkbrake:cap"]},
    }


def test_forwarded_state_changes_on_the_hub_bus_reach_the_meter_pending_aside() -> None:
    """The meter takes what the stack's own state-change rule takes: ``pending`` changes nothing, so
    it costs no invocation. The pattern is matched by moto's implementation of EventBridge's
    matching (moto/events/models.py ``EventPattern``, a FAKE of EventBridge's)."""
    from moto.events.models import EventPattern

    run = org_run_of()
    rule = run.named(RULE, "hub-state-changes")
    assert rule.inputs["eventBusName"] == "parkbrake-org-hub"
    pattern = EventPattern.load(rule.inputs["eventPattern"])
    matched = {
        state: pattern.matches_event(forwarded_state_change(state))
        for state in ("pending", "running", "stopping", "stopped", "shutting-down", "terminated")
    }
    assert matched == {"pending": False} | dict.fromkeys(list(matched)[1:], True)
    target = run.named(TARGET, "meter-from-hub")
    assert target.inputs["arn"] == "arn:aws:lambda:us-east-1:123456789012:function:parkbrake-org-meter"


def test_the_central_sweep_may_assume_spoke_roles_inside_the_organisation_only() -> None:
    central, spoke = org_run_of(), org_run_of(sweep="spoke")
    grant = central.named(ROLE_POLICY, "central-sweep")
    assert grant.inputs["role"] == "parkbrake-org-reaper"
    assert [r for r in spoke.of_type(ROLE_POLICY) if r.name == "central-sweep"] == []
    policy = central_sweep_policy("org", ORG_ID, "aws")
    role = "arn:aws:iam::222222222222:role/parkbrake-org-spoke-us-west-2"
    inside = {"aws:ResourceOrgID": ORG_ID}
    assert decide(Request("sts:AssumeRole", role, context=inside), [policy]) == "Allow"
    assert decide(Request("sts:AssumeRole", role), [policy]) == "ImplicitDeny"
    other = "arn:aws:iam::222222222222:role/parkbrake-org-deployer"
    assert decide(Request("sts:AssumeRole", other, context=inside), [policy]) == "ImplicitDeny"
    spokes = json.loads(central.named(PARAMETER, "spokes").inputs["insecureValue"])
    assert spokes["sweep"] == "central"
    assert spokes["roles"][:2] == [
        "arn:aws:iam::111111111111:role/parkbrake-org-spoke-us-east-1",
        "arn:aws:iam::222222222222:role/parkbrake-org-spoke-us-east-1",
    ]


def test_central_deadlines_take_the_forwarded_events_from_the_hub_bus_without_a_meter() -> None:
    """The hub's deadline Lambda gets every spoke's forwarded state and tag changes (a rule of its own,
    made with or without a ledger's meter), may be invoked by that rule only, and may assume the spoke
    roles and read the spokes parameter; with sweep: spoke the spokes keep their own deadlines."""
    central, spoke = org_run_of(), org_run_of(sweep="spoke")
    from moto.events.models import EventPattern

    rule = central.named(RULE, "hub-deadline-events")
    assert rule.inputs["eventBusName"] == "parkbrake-org-hub"
    states = EventPattern.load(rule.inputs["eventPattern"])
    matched = {
        state: states.matches_event(forwarded_state_change(state))
        for state in ("pending", "running", "stopping", "stopped", "shutting-down", "terminated")
    }
    assert matched == {"pending": False} | dict.fromkeys(list(matched)[1:], True)  # a pending costs nothing
    tagged = central.named(RULE, "hub-deadline-tag-changes")
    changes = EventPattern.load(tagged.inputs["eventPattern"])
    assert changes.matches_event(forwarded_tag_change("instance"))
    assert not changes.matches_event(forwarded_tag_change("volume"))
    assert not states.matches_event(forwarded_tag_change("instance"))
    assert central.named(TARGET, "deadline-tags-from-hub").inputs["eventBusName"] == "parkbrake-org-hub"
    assert (
        central.named(PERMISSION, "deadline-tags-from-hub")
        .inputs["sourceArn"]
        .endswith(":hub-deadline-tag-changes")
    )
    target = central.named(TARGET, "deadline-from-hub")
    assert target.inputs["arn"] == "arn:aws:lambda:us-east-1:123456789012:function:parkbrake-org-deadline"
    assert target.inputs["eventBusName"] == "parkbrake-org-hub"
    permission = central.named(PERMISSION, "deadline-from-hub")
    assert (permission.inputs["function"], permission.inputs["principal"]) == (
        "parkbrake-org-deadline",
        "events.amazonaws.com",
    )
    assert permission.inputs["sourceArn"].endswith(":hub-deadline-events")  # the mock engine's ARN
    grant = central.named(ROLE_POLICY, "central-deadlines")
    assert grant.inputs["role"] == "parkbrake-org-deadline"
    policy = json.loads(grant.inputs["policy"])
    role = "arn:aws:iam::222222222222:role/parkbrake-org-spoke-us-west-2"
    inside = {"aws:ResourceOrgID": ORG_ID}
    assert decide(Request("sts:AssumeRole", role, context=inside), [policy]) == "Allow"
    spokes = "arn:aws:ssm:us-east-1:123456789012:parameter/parkbrake/org/spokes"
    assert decide(Request("ssm:GetParameter", spokes), [policy]) == "Allow"
    without_ledger = org_run(replace(org_config(), database=None))
    assert without_ledger.named(TARGET, "deadline-from-hub").inputs["arn"] == target.inputs["arn"]
    assert [r for r in without_ledger.of_type(RULE) if r.name == "hub-state-changes"] == []  # no meter
    assert [r for r in spoke.of_type(RULE) if r.name.startswith("hub-deadline")] == []
    assert [r for r in spoke.of_type(ROLE_POLICY) if r.name == "central-deadlines"] == []
