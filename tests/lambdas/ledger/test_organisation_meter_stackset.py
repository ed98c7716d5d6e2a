"""The hub's meter with ``spokes: stackset`` (docs/organisation.md): its member accounts are not in
its environment but learned from the spokes parameter, the accounts of the StackSet's OUs as
Organizations lists them (lambdas/aws/spoke_list.py, the central sweep's own reading). On moto's
server: moto emulates Organizations (an organisation, its OUs, accounts created and moved), and
``sts:AssumeRole`` into another account id acts in that account (moto/sts/models.py), so a host made
through a spoke role is that account's."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

import boto3
import pytest
from guardrail_fleet import (
    REGION,
    STACK,
    TARGET_ARN,
    client_factory,
    guardrail_settings,
    launch,
    managed_tags,
    state_change,
)
from ledger_streams import T0, at

from guardrails import names
from guardrails.ledger import state_change_from_event
from guardrails.settings import Settings
from lambdas.aws.assumed import AccountAccess, AccountSessions
from lambdas.aws.environment import ClientFactory
from lambdas.aws.spoke_list import SpokeList, SpokeListError
from lambdas.engines import metering
from lambdas.ledger.store import LedgerStore

PARAMETER = f"/parkbrake/{STACK}/spokes"
RECEIVED = T0 + timedelta(days=1)


class Organisation:
    """moto's organisation: the caller (the hub, moto's default account) its management account, an
    OU ``ml`` with an account, and an account outside the OU; the hub's spokes parameter names the OU."""

    def __init__(self, hub: ClientFactory) -> None:
        self.organizations = boto3.client("organizations")
        self.organizations.create_organization(FeatureSet="ALL")
        self.root = self.organizations.list_roots()["Roots"][0]["Id"]
        created = self.organizations.create_organizational_unit(ParentId=self.root, Name="ml")
        self.unit = created["OrganizationalUnit"]["Id"]
        self.research = self.account_in(self.unit, "research")
        self.elsewhere = self.account_in(self.root, "elsewhere")
        document = {
            "form": "stackset",
            "sweep": "central",
            "regions": [REGION],
            "roles": [],
            "organizational_units": [self.unit],
        }
        hub("ssm", None).put_parameter(Name=PARAMETER, Value=json.dumps(document), Type="String")

    def account_in(self, parent: str, name: str) -> str:
        status = self.organizations.create_account(AccountName=name, Email=f"{name}@example.com")
        account = str(status["CreateAccountStatus"]["AccountId"])
        self.organizations.move_account(
            AccountId=account, SourceParentId=self.root, DestinationParentId=parent
        )
        return account


class CountingClients:
    """The hub's clients, counting the SSM clients asked for: one per reading of the spokes."""

    def __init__(self, clients: ClientFactory) -> None:
        self.clients, self.reads = clients, 0

    def __call__(self, service: str, region: str | None = None) -> Any:
        self.reads += service == "ssm"
        return self.clients(service, region)


def host_in(account: str) -> str:
    """A GPU host in ``account``, made through its spoke role (as the StackSet's spoke would hold it)."""
    spoke = AccountSessions().clients(AccountAccess(account, (names.spoke_role_arn(STACK, account, REGION),)))
    (instance_id,) = launch(spoke("ec2", REGION), "g5.xlarge", managed_tags(tenant="vision"))
    return instance_id


def hub_settings() -> Settings:
    return guardrail_settings(spokes_parameter=PARAMETER)  # no PARKBRAKE_MEMBER_ACCOUNTS: a StackSet's hub


def meter(
    store: LedgerStore, clients: ClientFactory, spokes: SpokeList, host: tuple[str, str], minute: int
) -> dict[str, Any]:
    """The hub's meter run on ``host`` (instance id, account) starting at ``minute``."""
    instance_id, account = host
    event = state_change(instance_id, "running", at(minute), account=account)
    return metering.meter_event(
        state_change_from_event(event), store=store, clients=clients, settings=hub_settings(),
        now=RECEIVED, invoked_function_arn=TARGET_ARN, spokes=spokes,
    )  # fmt: skip


@pytest.fixture
def organisation(aws: str) -> Organisation:
    return Organisation(client_factory(aws))


def test_an_event_of_an_account_in_the_ou_is_metered_and_one_outside_is_refused_with_one_line(
    aws: str, organisation: Organisation, store: LedgerStore, caplog: pytest.LogCaptureFixture
) -> None:
    clients = client_factory(aws)
    spokes = SpokeList()
    ours, stranger = host_in(organisation.research), host_in(organisation.elsewhere)
    assert meter(store, clients, spokes, (ours, organisation.research), 0)["inserted"] == 1
    with caplog.at_level(logging.INFO, logger=metering.__name__):
        outcome = meter(store, clients, spokes, (stranger, organisation.elsewhere), 0)
    assert (
        f"is from account {organisation.elsewhere}, which is not the stack's own account"
        in outcome["refused"]
    )
    assert f"its 1 member account(s) (the spokes listed in {PARAMETER})" in outcome["refused"]
    (line,) = [record.getMessage() for record in caplog.records if record.name == metering.__name__]
    assert line.startswith("refused: event ")
    assert f"of {stranger} is from account {organisation.elsewhere}" in line
    (interval,) = store.intervals()
    assert (interval.instance_id, interval.account, interval.attribution.tenant) == (
        ours,
        organisation.research,
        "vision",
    )


def test_an_account_that_joins_the_ou_is_metered_on_its_next_event_without_a_redeploy(
    aws: str, organisation: Organisation, store: LedgerStore
) -> None:
    clients = CountingClients(client_factory(aws))
    seconds = [0.0]  # a hand-moved clock, not time's
    spokes = SpokeList(clock=lambda: seconds[0], recheck=timedelta(minutes=5))
    assert (
        meter(store, clients, spokes, (host_in(organisation.research), organisation.research), 0)["inserted"]
        == 1
    )
    assert clients.reads == 1
    late = organisation.account_in(organisation.unit, "late")
    theirs = host_in(late)
    seconds[0] = 60.0  # a minute after the list was read: not read again for every unknown account
    assert "refused" in meter(store, clients, spokes, (theirs, late), 1)
    assert clients.reads == 1
    seconds[0] = 5 * 60.0  # its next event, the list old enough to be looked at again
    assert meter(store, clients, spokes, (theirs, late), 5)["inserted"] == 1
    assert clients.reads == 2
    assert {interval.instance_id: interval.account for interval in store.intervals()}[theirs] == late
    seconds[0] = 6 * 60.0
    assert meter(store, clients, spokes, (host_in(late), late), 6)["inserted"] == 1
    assert clients.reads == 2  # a known account is metered from the container's list


def test_an_unreadable_spokes_list_raises_for_a_member_event_so_it_is_delivered_again(
    aws: str, store: LedgerStore
) -> None:
    clients = client_factory(aws)  # no parameter, no organisation
    member = "222233334444"
    with pytest.raises(SpokeListError, match=f"cannot read {PARAMETER}: ParameterNotFound"):
        meter(store, clients, SpokeList(), (host_in(member), member), 0)
    assert store.intervals() == []
    (own,) = launch(clients("ec2", None), "g5.xlarge", managed_tags(tenant="vision"))
    assert meter(store, clients, SpokeList(), (own, "123456789012"), 0)["inserted"] == 1  # the hub's own
