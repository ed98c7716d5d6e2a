"""The hub stack's program under the mock engine: a spoke per account and region through a provider that
assumes the account's role (its c7n-org chain), and, with the hub account in the OU, no name a spoke
takes that the hub already holds in the same account (and region, for regional resources)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from components.org_spoke_parts import ACCOUNT_PSEUDO, REGION_PSEUDO
from components.org_spoke_stackset import spoke_template
from stacks.offline import RegisteredResource
from tests.components.org_build import HUB_ACCOUNT, HUB_REGION, org_run_of

PROVIDER = "pulumi:providers:aws"
SPOKE = "parkbrake:org:Spoke"
# IAM's names are the account's, everywhere; the others' are the account's in one region.
GLOBAL_TYPES = {"aws:iam/role:Role": "name"}
NAME_INPUTS = ("name", "layerName")


def test_a_spoke_per_account_and_region_each_through_its_accounts_provider() -> None:
    run = org_run_of()
    spokes = sorted(resource.name for resource in run.of_type(SPOKE))
    assert spokes == [
        "spoke-111111111111-us-east-1",
        "spoke-222222222222-us-east-1",
        "spoke-222222222222-us-west-2",
        "spoke-333333333333-us-west-2",
    ]
    providers = {provider.name: provider.inputs for provider in run.of_type(PROVIDER)}
    chained = providers["spoke-333333333333-us-west-2"]
    assert chained["region"] == "us-west-2"
    # The engine hands a provider its structured inputs JSON-encoded.
    assert json.loads(chained["allowedAccountIds"]) == ["333333333333"]
    roles = json.loads(chained["assumeRoles"])
    assert [role["roleArn"] for role in roles] == [
        "arn:aws:iam::111111111111:role/parkbrake-broker",
        "arn:aws:iam::333333333333:role/parkbrake-deployer",
    ]
    assert [role.get("externalId") for role in roles] == [None, "parkbrake-org"]


def _placed(resource: RegisteredResource, owners: dict[str, tuple[str, str]]) -> tuple[str, str]:
    return owners.get(resource.parent or "", (HUB_ACCOUNT, HUB_REGION))


def physical_names(resources: list[RegisteredResource]) -> list[tuple[str, str, str, str]]:
    """(account, region or "" for IAM, type, name) of every resource the stack names itself."""
    owners = {}
    for spoke in (r for r in resources if r.type == SPOKE):
        _, account, region = spoke.name.split("-", 2)
        owners[spoke.urn] = (account, region)
    found = []
    for resource in resources:
        name = next((resource.inputs[key] for key in NAME_INPUTS if key in resource.inputs), None)
        if resource.custom and isinstance(name, str) and resource.type != PROVIDER:
            account, region = _placed(resource, owners)
            found.append((account, "" if resource.type in GLOBAL_TYPES else region, resource.type, name))
    return found


@pytest.mark.parametrize("sweep", ["central", "spoke"])
def test_the_hub_account_in_the_ou_holds_its_spoke_without_a_name_collision(sweep: str) -> None:
    names = physical_names(org_run_of(sweep=sweep).resources)
    assert any(
        account == HUB_ACCOUNT and name.startswith("parkbrake-org-spoke-") for account, _, _, name in names
    )
    assert [key for key, count in Counter(names).items() if count > 1] == []


@pytest.mark.parametrize("sweep", ["central", "spoke"])
def test_the_stack_sets_instance_in_the_hub_account_and_region_collides_with_nothing_of_the_hubs(
    sweep: str,
) -> None:
    run = org_run_of("stackset", sweep)
    hub_names = {(kind, name) for _, _, kind, name in physical_names(run.resources)}
    template = run.of_type("parkbrake:org:SpokeStackSet")
    assert template
    from components.org_spoke_parts import SpokeArgs
    from components.org_spoke_stackset import TemplateArgs

    body = spoke_template(TemplateArgs(SpokeArgs("org", HUB_ACCOUNT, HUB_REGION, sweep=sweep), "b", {}))  # type: ignore[arg-type]
    cfn_types = {
        "AWS::IAM::Role": ("aws:iam/role:Role", "RoleName"),
        "AWS::Events::Rule": ("aws:cloudwatch/eventRule:EventRule", "Name"),
        "AWS::Lambda::Function": ("aws:lambda/function:Function", "FunctionName"),
        "AWS::SSM::Parameter": ("aws:ssm/parameter:Parameter", "Name"),
        "AWS::Logs::LogGroup": ("aws:cloudwatch/logGroup:LogGroup", "LogGroupName"),
        "AWS::Scheduler::ScheduleGroup": ("aws:scheduler/scheduleGroup:ScheduleGroup", "Name"),
    }
    spoke_names = set()
    for resource in body["Resources"].values():
        kind, key = cfn_types.get(resource["Type"], (None, None))
        if kind is None:
            continue
        value = resource["Properties"][key]
        text = value["Fn::Sub"] if isinstance(value, dict) else value
        spoke_names.add((kind, text.replace(REGION_PSEUDO, HUB_REGION).replace(ACCOUNT_PSEUDO, HUB_ACCOUNT)))
    # central: forwarding, the spoke role, the park switch (the hub keeps the deadlines)
    assert len(spoke_names) >= (5 if sweep == "central" else 8)
    # sweep: spoke's deadline group is the spoke's own (parkbrake-org-spoke-<region>-deadlines), not
    # the hub's parkbrake-org-deadlines: nothing is shared in the hub's account and region either way.
    assert spoke_names & hub_names == set()
    group = ("aws:scheduler/scheduleGroup:ScheduleGroup", f"parkbrake-org-spoke-{HUB_REGION}-deadlines")
    assert (group in spoke_names) is (sweep == "spoke")
    assert ("aws:scheduler/scheduleGroup:ScheduleGroup", "parkbrake-org-deadlines") in hub_names


@pytest.mark.parametrize(("sweep", "expected"), [("central", "/parkbrake/org/spokes"), ("spoke", None)])
def test_the_hubs_reaper_reads_the_spokes_only_when_it_sweeps_them(sweep: str, expected: str | None) -> None:
    from tests.components.guardrails_build import environment_of

    run = org_run_of(sweep=sweep)
    environment = environment_of(run, "reaper")
    assert environment.get("PARKBRAKE_SPOKES_PARAMETER") == expected
    grants = [
        r for r in run.resources if r.type == "aws:iam/rolePolicy:RolePolicy" and r.name == "central-sweep"
    ]
    if expected is None:
        assert grants == []
    else:
        (grant,) = grants
        actions = {a for s in json.loads(grant.inputs["policy"])["Statement"] for a in s["Action"]}
        assert {"sts:AssumeRole", "ssm:GetParameter"} <= actions


@pytest.mark.parametrize(("spokes", "sweep"), [("stacks", "central"), ("stackset", "spoke")])
def test_the_hubs_meter_budget_and_reconciler_learn_their_accounts_from_the_spokes_and_may_reach_them(
    spokes: str, sweep: str
) -> None:
    from tests.components.guardrails_build import environment_of

    run = org_run_of(spokes=spokes, sweep=sweep)
    central = "PARKBRAKE_SPOKES_PARAMETER" in environment_of(run, "reaper")
    assert central == (sweep == "central")  # the meter's variable does not make the reaper sweep
    for guardrail in ("meter", "budget", "reconciler"):
        environment = environment_of(run, guardrail)
        # in either form, either sweep
        assert environment["PARKBRAKE_SPOKES_PARAMETER"] == "/parkbrake/org/spokes", guardrail
        members = environment.get("PARKBRAKE_MEMBER_ACCOUNTS")
        assert members == ("111111111111,222222222222,333333333333" if spokes == "stacks" else None)
        (grant,) = [
            r
            for r in run.resources
            if r.type == "aws:iam/rolePolicy:RolePolicy" and r.name == f"{guardrail}-reads-spokes"
        ]
        assert grant.inputs["role"] == f"parkbrake-org-{guardrail}"
        statements = {s["Sid"]: s for s in json.loads(grant.inputs["policy"])["Statement"]}
        assert statements["AssumeSpokeRoles"]["Action"] == ["sts:AssumeRole"]
        assert statements["AssumeSpokeRoles"]["Resource"] == "arn:aws:iam::*:role/parkbrake-org-spoke-*"
        assert statements["ReadSpokes"]["Resource"].endswith(":parameter/parkbrake/org/spokes")
        listing = statements.get("ListSpokeAccounts", {}).get("Action")
        assert listing == (
            [
                "organizations:DescribeOrganization",
                "organizations:ListAccountsForParent",
                "organizations:ListOrganizationalUnitsForParent",
            ]
            if spokes == "stackset"
            else None
        )
