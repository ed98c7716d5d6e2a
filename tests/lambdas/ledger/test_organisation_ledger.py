"""One ledger for the organisation (docs/ledger.md, *Accounts*): the hub's meter takes its member
accounts' events, reads their hosts through each account's spoke role, and a tenant's budget stops
its hosts in every account. On moto's server: ``sts:AssumeRole`` into a role of another account id
returns credentials that act in that account (moto/sts/models.py, ``STSBackend.assume_role``), so a
host made through the spoke role is in the member account and invisible to the hub's own."""

from __future__ import annotations

import logging
from datetime import timedelta
from decimal import Decimal

import pytest
from guardrail_fleet import (
    ACCOUNT,
    REGION,
    STACK,
    TARGET_ARN,
    client_factory,
    guardrail_settings,
    launch,
    managed_tags,
    state_change,
    states,
)
from ledger_streams import T0, at

from guardrails import names
from guardrails.ledger import state_change_from_event
from guardrails.runway import Budget
from guardrails.settings import Settings
from lambdas.aws.assumed import AccountAccess, AccountSessions
from lambdas.aws.environment import ClientFactory
from lambdas.aws.spoke_clients import place_clients_for
from lambdas.engines import budgeting, metering
from lambdas.ledger.store import LedgerStore

HUB = ACCOUNT  # moto's default account: the meter's own
MEMBER = "222233334444"
STRANGER = "999988887777"
RECEIVED = T0 + timedelta(days=1)


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    return client_factory(aws)


def member_clients(account: str = MEMBER) -> ClientFactory:
    """The member account's clients, as the hub reaches them: its spoke role for the region."""
    return AccountSessions().clients(AccountAccess(account, (names.spoke_role_arn(STACK, account, REGION),)))


def own_ids(clients: ClientFactory) -> list[str]:
    pages = clients("ec2", None).describe_instances()["Reservations"]
    return [item["InstanceId"] for page in pages for item in page["Instances"]]


def hub_settings() -> Settings:
    return guardrail_settings(member_accounts=frozenset({MEMBER}))


def test_a_member_accounts_host_is_metered_in_the_hubs_ledger_with_its_account(
    store: LedgerStore, clients: ClientFactory
) -> None:
    (theirs,) = launch(member_clients()("ec2", REGION), "g5.xlarge", managed_tags(tenant="vision"))
    (ours,) = launch(clients("ec2", None), "g5.xlarge", managed_tags(tenant="vision"))
    assert own_ids(clients) == [ours]  # the member's host is not in the hub's own account
    for instance_id, account in ((theirs, MEMBER), (ours, HUB)):
        event = state_change(instance_id, "running", at(0), account=account)
        outcome = metering.meter_event(
            state_change_from_event(event), store=store, clients=clients, settings=hub_settings(),
            now=RECEIVED, invoked_function_arn=TARGET_ARN,
        )  # fmt: skip
        assert outcome["inserted"] == 1, outcome
    accounts = {interval.instance_id: interval.account for interval in store.intervals()}
    assert accounts == {theirs: MEMBER, ours: HUB}
    (interval,) = [i for i in store.intervals() if i.instance_id == theirs]
    assert (interval.attribution.tenant, interval.attribution.instance_type) == ("vision", "g5.xlarge")


@pytest.mark.parametrize("settings", [hub_settings(), guardrail_settings()], ids=["hub", "own account"])
def test_an_event_of_an_account_the_meter_does_not_take_is_one_log_line_and_nothing_appended(
    store: LedgerStore, clients: ClientFactory, caplog: pytest.LogCaptureFixture, settings: Settings
) -> None:
    (theirs,) = launch(member_clients(STRANGER)("ec2", REGION), "g5.xlarge", managed_tags())
    event = state_change(theirs, "running", at(0), account=STRANGER)
    with caplog.at_level(logging.INFO, logger=metering.__name__):
        outcome = metering.meter_event(
            state_change_from_event(event), store=store, clients=clients, settings=settings,
            now=RECEIVED, invoked_function_arn=TARGET_ARN,
        )  # fmt: skip
    assert f"from account {STRANGER}, which is not the stack's own account {HUB}" in outcome["refused"]
    (line,) = [record.getMessage() for record in caplog.records if record.name == metering.__name__]
    assert line.startswith(f"refused: event {event['id']} of {theirs} is from account {STRANGER}")
    assert store.intervals() == []


def test_a_tenant_spanning_accounts_past_its_budget_is_stopped_in_every_account(
    store: LedgerStore, clients: ClientFactory
) -> None:
    spoke = member_clients()
    (theirs,) = launch(spoke("ec2", REGION), "p4d.24xlarge", managed_tags())
    (ours,) = launch(clients("ec2", None), "p4d.24xlarge", managed_tags())
    changes = [
        state_change_from_event(state_change(theirs, "running", at(0), account=MEMBER)),
        state_change_from_event(state_change(ours, "running", at(0), account=HUB)),
    ]
    settings = guardrail_settings(member_accounts=frozenset({MEMBER}))
    reach = place_clients_for(settings, clients, own_account=HUB)
    metering.meter(
        changes, store=store, clients=clients, settings=settings, received_at=T0, place_clients=reach
    )
    store.set_budget(Budget("research", Decimal(50), "month", actions=frozenset({"notify", "deny", "stop"})))
    enforcer = budgeting.AwsEnforcer.from_settings(settings, clients, invoked_function_arn=TARGET_ARN)
    run = budgeting.enforce_budgets(store, enforcer, now=at(50), default_cap=timedelta(minutes=90))
    assert sorted(run.stopped) == sorted([theirs, ours])  # 2 × $27.31 spent: past the $50
    assert states(spoke("ec2", REGION), [theirs]) == {theirs: "stopped"}
    assert states(clients("ec2", None), [ours]) == {ours: "stopped"}
    accounts = {interval.instance_id: interval.account for interval in store.intervals()}
    assert accounts == {theirs: MEMBER, ours: HUB}  # both metered in the one ledger
