"""The hub under the mock engine: the central bus admits the organisation and nobody else (its policy
decided by AWS's documented rules, tests/iam_evaluation.py), the forwarded state changes reach the
one ledger's meter, and the central sweep's reaper may assume the spoke roles of the organisation only."""

from __future__ import annotations

import json

from components.org_hub import bus_policy, central_sweep_policy
from tests.components.org_build import HUB_BUS_ARN, ROLE_POLICY, RULE, TARGET, org_run_of
from tests.iam_evaluation import Request, decide

BUS = "aws:cloudwatch/eventBus:EventBus"
BUS_POLICY = "aws:cloudwatch/eventBusPolicy:EventBusPolicy"
ARCHIVE = "aws:cloudwatch/eventArchive:EventArchive"
PARAMETER = "aws:ssm/parameter:Parameter"
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


def test_forwarded_state_changes_on_the_hub_bus_reach_the_meter() -> None:
    run = org_run_of()
    rule = run.named(RULE, "hub-state-changes")
    assert rule.inputs["eventBusName"] == "parkbrake-org-hub"
    assert json.loads(rule.inputs["eventPattern"])["detail-type"] == [
        "EC2 Instance State-change Notification"
    ]
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
