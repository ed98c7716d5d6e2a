"""The hub's central sweep (lambdas/engines/org_sweeping.py) on moto's server: three member accounts
in two regions each, reached through their spoke roles.

moto's ``sts:AssumeRole`` into another account's role returns credentials acting in that account
(moto/sts/models.py, ``STSBackend.assume_role``), so each account's hosts are its own; a denied role
needs moto's IAM authorisation, switched on through ``/moto-api/reset-auth`` as in
tests/lambdas/test_assumed_sessions.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import boto3
import pytest
from guardrail_fleet import (
    STACK,
    client_factory,
    guardrail_settings,
    latest_launch,
    launch,
    managed_tags,
    metric_value,
    minutes,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from guardrails import names
from guardrails.decisions import Decision
from guardrails.settings import Settings
from lambdas import reaper
from lambdas.aws.assumed import AccountAccess, AccountSessions
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.environment import ClientFactory
from lambdas.aws.spoke_list import SpokeList, SpokeListError, spoke_places
from tests.moto_iam_auth import reset_auth

HUB = "123456789012"  # moto's default account: the hub's own
A, B, C = "111111111111", "222222222222", "333333333333"
REGIONS = ("us-east-1", "eu-west-1")
PARAMETER = f"/parkbrake/{STACK}/spokes"


def spoke_role(account: str, region: str) -> str:
    return names.spoke_role_arn(STACK, account, region)


def spoke_ec2(account: str, region: str) -> Any:
    """An EC2 client acting in ``account`` through a session of its own (not the sweep's)."""
    admin = AccountAccess(account, (f"arn:aws:iam::{account}:role/admin",))
    return AccountSessions().clients(admin)("ec2", region)


class OrgFleet:
    """In every account and region a host within its cap; in B's us-east-1 one past it."""

    def __init__(self, hub: ClientFactory) -> None:
        self.within: dict[tuple[str, str], str] = {}
        for account in (A, B, C):
            for region in REGIONS:
                ec2 = spoke_ec2(account, region)
                self.within[account, region] = launch(ec2, "g5.xlarge", managed_tags(max_runtime="4h"))[0]
        b_east = spoke_ec2(B, "us-east-1")
        self.due = launch(b_east, "g5.xlarge", managed_tags(max_runtime="90m"))[0]
        self.now = latest_launch(b_east, [self.due]) + minutes(100)
        roles = [spoke_role(account, region) for account in (A, B, C) for region in REGIONS]
        document = {"form": "stacks", "sweep": "central", "regions": list(REGIONS), "roles": roles}
        hub("ssm", None).put_parameter(Name=PARAMETER, Value=json.dumps(document), Type="String")

    def state_of(self, account: str, region: str, instance_id: str) -> str:
        reservations = spoke_ec2(account, region).describe_instances(InstanceIds=[instance_id])
        return str(reservations["Reservations"][0]["Instances"][0]["State"]["Name"])


def hub_settings() -> Settings:
    return replace(guardrail_settings(), spokes_parameter=PARAMETER)


class KeptDecisions:
    """A ledger writer that keeps what it is given: the decisions as the meter would receive them."""

    def __init__(self) -> None:
        self.decisions: list[Decision] = []

    def append(self, decisions: Sequence[Decision], *, origin: str) -> dict[str, str]:
        self.decisions += decisions
        return {}


def sweep(
    hub: ClientFactory, now: datetime, *, dry_run: bool = False, kept: KeptDecisions | None = None
) -> dict[str, Any]:
    writer = kept or KeptDecisions()
    decisions = DecisionLog(guardrail="reaper", origin="test", ledger=lambda: writer)
    return reaper.handle(
        {"dry_run": dry_run}, settings=hub_settings(), clients=hub, now=now, decisions=decisions
    )


def test_a_host_past_its_cap_in_another_account_is_stopped_by_the_hub(
    aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    hub = client_factory(aws)
    fleet = OrgFleet(hub)
    kept = KeptDecisions()
    result = sweep(hub, fleet.now, kept=kept)
    assert result["stopped"] == [fleet.due]
    assert fleet.state_of(B, "us-east-1", fleet.due) in ("stopping", "stopped")  # seen by B itself
    for (account, region), instance_id in fleet.within.items():
        assert fleet.state_of(account, region, instance_id) == "running"
    rows = {row["instance_id"]: row for row in result["hosts"]}
    assert len(rows) == 7
    assert (rows[fleet.due]["account_id"], rows[fleet.due]["region"]) == (B, "us-east-1")
    assert {rows[i]["account_id"] for i in fleet.within.values()} == {A, B, C}
    assert [place["failure"] for place in result["places"]] == [None] * 6
    assert result["errors"] == []
    out = capsys.readouterr().out
    assert metric_value(out, "GuardrailLastSuccess", Guardrail="reaper", Stack=STACK) == fleet.now.timestamp()
    assert (
        metric_value(out, "GuardrailFindings", Guardrail="reaper", Stack=STACK, Finding="unreachable-spoke")
        == 0
    )
    stopped = [d for d in kept.decisions if d.instance_id == fleet.due and d.kind == "stop"]
    assert [d.details["account_id"] for d in stopped] == [B]  # the decision log names the account


def test_a_dry_run_stops_nothing_and_says_what_it_would(aws: str) -> None:
    hub = client_factory(aws)
    fleet = OrgFleet(hub)
    result = sweep(hub, fleet.now, dry_run=True)
    assert (result["stopped"], result["would_stop"]) == ([], [fleet.due])
    assert fleet.state_of(B, "us-east-1", fleet.due) == "running"


def test_the_hubs_own_hosts_are_not_the_central_sweeps(aws: str) -> None:
    hub = client_factory(aws)
    fleet = OrgFleet(hub)
    own = launch(hub("ec2", "us-east-1"), "g5.xlarge", managed_tags(max_runtime="1m"))[0]
    result = sweep(hub, fleet.now + minutes(5))
    assert own not in {row["instance_id"] for row in result["hosts"]}


@pytest.fixture
def denied_c(aws: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[OrgFleet]:
    """The fleet, then the hub's caller allowed anything but assuming C's us-east-1 spoke role; every
    spoke role exists and may act on EC2 (moto checks the role's own policies once authorisation is on)."""
    fleet = OrgFleet(client_factory(aws))  # seeded before authorisation is on
    iam = boto3.client("iam")
    iam.create_user(UserName="hub-reaper")
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "*", "Resource": "*"},
            {"Effect": "Deny", "Action": "sts:AssumeRole", "Resource": spoke_role(C, "us-east-1")},
        ],
    }
    iam.put_user_policy(UserName="hub-reaper", PolicyName="hub", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="hub-reaper")["AccessKey"]
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{HUB}:root"}, "Action": "sts:AssumeRole"}
        ],
    }
    act = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:*", "Resource": "*"}]}
    for account in (A, B, C):
        admin = AccountAccess(account, (f"arn:aws:iam::{account}:role/admin",))
        spoke_iam = AccountSessions().clients(admin)("iam", None)
        for region in REGIONS:
            name = names.spoke_role(STACK, region)
            spoke_iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))
            spoke_iam.put_role_policy(RoleName=name, PolicyName="sweep", PolicyDocument=json.dumps(act))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    reset_auth(aws, "0")
    try:
        yield fleet
    finally:
        reset_auth(aws, "inf")


def test_a_denied_role_is_a_line_and_a_count_and_the_others_are_swept(
    aws: str, denied_c: OrgFleet, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    fleet = denied_c
    result = sweep(client_factory(aws), fleet.now)  # clients made now, with the hub's restricted key
    assert result["stopped"] == [fleet.due]
    failed = [place for place in result["places"] if place["failure"]]
    assert [(place["account_id"], place["region"]) for place in failed] == [(C, "us-east-1")]
    assert failed[0]["failure"].startswith(f"cannot assume {spoke_role(C, 'us-east-1')}: AccessDenied")
    (error,) = result["errors"]
    assert (error["account_id"], error["region"], error["action"]) == (C, "us-east-1", "assume-role")
    swept = {row["account_id"] for row in result["hosts"]}
    assert swept == {A, B, C}  # C's eu-west-1 spoke is still swept
    assert len(result["hosts"]) == 6
    assert any(
        "could not sweep" in record.getMessage() and C in record.getMessage() for record in caplog.records
    )
    out = capsys.readouterr().out
    assert (
        metric_value(out, "GuardrailFindings", Guardrail="reaper", Stack=STACK, Finding="unreachable-spoke")
        == 1
    )
    assert (
        metric_value(out, "GuardrailActions", Guardrail="reaper", Action="error", Reason="assume-role") == 1
    )
    assert metric_value(out, "GuardrailLastSuccess", Guardrail="reaper", Stack=STACK) is None  # pages


def test_an_unreadable_spokes_parameter_is_an_error_not_a_crash(aws: str) -> None:
    result = sweep(client_factory(aws), datetime.now().astimezone())
    (error,) = result["errors"]
    assert error["action"] == "list-spokes"
    assert error["error"].startswith(f"cannot read {PARAMETER}: ParameterNotFound")


def test_a_role_that_is_not_a_spoke_role_is_refused() -> None:
    with pytest.raises(SpokeListError, match="is not a spoke role of stack test"):
        spoke_places({"roles": [f"arn:aws:iam::{A}:role/admin"]}, STACK)
    with pytest.raises(SpokeListError, match="neither roles nor organizational_units"):
        spoke_places({"roles": []}, STACK)
    places = spoke_places({"roles": [spoke_role(A, "eu-west-1")]}, STACK)
    assert [(p.account_id, p.region, p.access.role_chain) for p in places] == [
        (A, "eu-west-1", (spoke_role(A, "eu-west-1"),))
    ]


def test_a_container_reads_its_spokes_again_after_their_age_or_a_failure(aws: str) -> None:
    hub = client_factory(aws)
    ssm = hub("ssm", None)

    def publish(*accounts: str) -> None:
        document = {"roles": [spoke_role(account, "us-east-1") for account in accounts]}
        ssm.put_parameter(Name=PARAMETER, Value=json.dumps(document), Type="String", Overwrite=True)

    seconds = [0.0]  # a hand-moved clock, not time's
    spokes = SpokeList(max_age=minutes(15), clock=lambda: seconds[0])
    publish(A)
    assert [p.account_id for p in spokes.places(hub_settings(), hub)] == [A]
    publish(A, B)
    seconds[0] = 14 * 60.0
    assert [p.account_id for p in spokes.places(hub_settings(), hub)] == [A]  # still the container's
    seconds[0] = 15 * 60.0
    assert [p.account_id for p in spokes.places(hub_settings(), hub)] == [A, B]
    publish(B)
    spokes.forget()  # what a run with a failed place does
    assert [p.account_id for p in spokes.places(hub_settings(), hub)] == [B]


def test_a_stacksets_spokes_are_the_accounts_of_its_units_and_the_units_below(aws: str) -> None:
    organizations = boto3.client("organizations")
    organizations.create_organization(FeatureSet="ALL")
    root = organizations.list_roots()["Roots"][0]["Id"]
    unit = organizations.create_organizational_unit(ParentId=root, Name="ml")["OrganizationalUnit"]["Id"]
    below = organizations.create_organizational_unit(ParentId=unit, Name="ml-prod")["OrganizationalUnit"][
        "Id"
    ]

    def account_in(parent: str, name: str) -> str:
        status = organizations.create_account(AccountName=name, Email=f"{name}@example.com")
        account = status["CreateAccountStatus"]["AccountId"]
        organizations.move_account(AccountId=account, SourceParentId=root, DestinationParentId=parent)
        return str(account)

    research, prod = account_in(unit, "research"), account_in(below, "prod")
    account_in(root, "elsewhere")
    document = {"form": "stackset", "regions": list(REGIONS), "roles": [], "organizational_units": [unit]}
    places = spoke_places(document, STACK, organizations)
    assert [(p.account_id, p.account_name, p.region) for p in places] == [
        (research, "research", "us-east-1"),
        (research, "research", "eu-west-1"),
        (prod, "prod", "us-east-1"),
        (prod, "prod", "eu-west-1"),
    ]
    assert places[0].access.role_chain == (spoke_role(research, "us-east-1"),)
    with pytest.raises(SpokeListError, match="needs Organizations"):
        spoke_places(document, STACK)


def test_a_spoke_listed_twice_is_one_place_and_a_region_twice_one_region() -> None:
    twice = {"roles": [spoke_role(A, "eu-west-1"), spoke_role(B, "us-east-1"), spoke_role(A, "eu-west-1")]}
    places = spoke_places(twice, STACK)
    assert [(p.account_id, p.region) for p in places] == [(A, "eu-west-1"), (B, "us-east-1")]


def test_a_stackset_document_without_regions_is_refused_not_an_empty_sweep() -> None:
    for regions in ([], ["us-east-1", "nowhere"], "us-east-1"):
        document = {"regions": regions, "organizational_units": ["ou-ab12-cdef3456"]}
        with pytest.raises(SpokeListError, match="regions must be"):
            spoke_places(document, STACK, organizations=object())


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
DOCUMENT_KEYS = st.sampled_from(["roles", "organizational_units", "regions", "partition", "form"])


@settings(max_examples=200, deadline=None)
@example({"roles": 5})
@example({"regions": ["us-east-1"], "organizational_units": "ou-ab12-cdef3456"})
@given(st.one_of(JSON_VALUES, st.dictionaries(DOCUMENT_KEYS, JSON_VALUES, max_size=4)))
def test_a_garbage_spokes_document_raises_only_the_spoke_list_error(document: object) -> None:
    failure: SpokeListError | None = None
    try:
        places = spoke_places(document, STACK)
    except SpokeListError as error:
        failure, places = error, []
    if failure is not None:
        assert "\n" not in str(failure)
    else:
        assert places
        assert all(p.access.role_chain for p in places)
