"""The hub's budget Lambda and reconciler learn the member accounts as its meter does: from the spokes
parameter, with ``spokes: stackset`` the accounts of the StackSet's OUs as Organizations lists them
(lambdas/aws/spoke_list.py). On moto's server: moto's Organizations emulation (an organisation, an
OU, accounts created and moved) and ``sts:AssumeRole`` into another account id acting in that
account (moto/sts/models.py), so a host made through a spoke role is that account's; the fault proxy
(tests/aws_fault_proxy.py) refuses the spoke roles' ``AssumeRole``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

import pytest
from aws_fault_proxy import FaultProxy
from guardrail_fleet import (
    ACCOUNT,
    REGION,
    STACK,
    TARGET_ARN,
    client_factory,
    heartbeats,
    launch,
    managed_tags,
    state_change,
    states,
)
from ledger_streams import T0, at
from test_organisation_meter_stackset import PARAMETER, RECEIVED, Organisation, hub_settings

from guardrails import names
from guardrails.ledger import state_change_from_event
from guardrails.runway import Budget
from lambdas import budget
from lambdas.aws.assumed import AccountAccess, AccountSessions
from lambdas.aws.environment import ClientFactory, container_settings
from lambdas.aws.spoke_clients import hub_place_clients
from lambdas.aws.spoke_list import SpokeList
from lambdas.engines import metering, reconciling
from lambdas.ledger.store import LedgerStore, container_store

# The one-minute rule's own event: the clock asks EC2, in every place, whether any managed host runs.
CLOCK = {"source": "aws.events", "detail-type": "Scheduled Event"}


@dataclass(frozen=True)
class Context:
    """What Lambda passes the handler: the function's ARN names the hub's account."""

    invoked_function_arn: str = (
        f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{names.function_name(STACK, 'budget')}"
    )


def spoke(account: str) -> ClientFactory:
    return AccountSessions().clients(AccountAccess(account, (names.spoke_role_arn(STACK, account, REGION),)))


@pytest.fixture
def organisation(aws: str) -> Organisation:
    return Organisation(client_factory(aws))


@pytest.fixture
def budget_lambda(aws: str, ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The hub's budget Lambda as deployed with ``spokes: stackset``: the spokes parameter, no
    ``PARKBRAKE_MEMBER_ACCOUNTS`` (components/guardrail_functions.py, LEARN_MEMBER_ACCOUNTS)."""
    for name, value in {
        "PARKBRAKE_DATABASE_URL": ledger_url,
        "PARKBRAKE_STACK": STACK,
        "PARKBRAKE_REGIONS": REGION,
        "PARKBRAKE_SPOKES_PARAMETER": PARAMETER,
        "PARKBRAKE_SNS_TOPIC_ARN": client_factory(aws)("sns", REGION).create_topic(Name="alarms")["TopicArn"],
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(budget, "CONTAINER_SPOKES", SpokeList())
    container_settings.cache_clear()
    container_store.cache_clear()
    yield
    container_store().close()
    container_store.cache_clear()
    container_settings.cache_clear()


def meter_running(store: LedgerStore, clients: ClientFactory, *hosts: tuple[str, str]) -> None:
    """``hosts`` (instance id, account) metered running from T0, as the hub's meter meters them."""
    settings = hub_settings()
    changes = [
        state_change_from_event(state_change(instance_id, "running", at(0), account=account))
        for instance_id, account in hosts
    ]
    reach = hub_place_clients(clients, stack=STACK, own_account=ACCOUNT)
    metering.meter(
        changes, store=store, clients=clients, settings=settings, received_at=T0, place_clients=reach
    )


def over_budget(store: LedgerStore) -> None:
    """A $50 budget that stops: 50 minutes of two p4d hosts is about $55."""
    store.set_budget(Budget("research", Decimal(50), "month", actions=frozenset({"notify", "deny", "stop"})))


@pytest.mark.usefixtures("budget_lambda")
def test_the_budget_lambdas_clock_stops_a_tenants_host_in_an_account_of_the_stacksets_ou(
    aws: str, organisation: Organisation, store: LedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = client_factory(aws)
    (theirs,) = launch(spoke(organisation.research)("ec2", REGION), "p4d.24xlarge", managed_tags())
    (ours,) = launch(hub("ec2", None), "p4d.24xlarge", managed_tags())
    (outside,) = launch(spoke(organisation.elsewhere)("ec2", REGION), "p4d.24xlarge", managed_tags())
    meter_running(store, hub, (theirs, organisation.research), (ours, ACCOUNT))
    over_budget(store)
    monkeypatch.setattr(budget, "utc_now", lambda: at(50))
    result = budget.handler(CLOCK, Context())
    assert sorted(result["stopped"]) == sorted([theirs, ours]), result
    assert result["errors"] == []
    assert states(spoke(organisation.research)("ec2", REGION), [theirs]) == {theirs: "stopped"}
    assert states(hub("ec2", None), [ours]) == {ours: "stopped"}
    # An account outside the OU is no member: its host of the same tenant is not the hub's to stop.
    assert states(spoke(organisation.elsewhere)("ec2", REGION), [outside]) == {outside: "running"}


@pytest.mark.usefixtures("budget_lambda")
def test_the_clock_finds_a_member_accounts_host_when_the_hub_runs_none(
    aws: str, organisation: Organisation, store: LedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    (theirs,) = launch(spoke(organisation.research)("ec2", REGION), "p4d.24xlarge", managed_tags())
    (again,) = launch(spoke(organisation.research)("ec2", REGION), "p4d.24xlarge", managed_tags())
    meter_running(store, client_factory(aws), (theirs, organisation.research), (again, organisation.research))
    over_budget(store)
    monkeypatch.setattr(budget, "utc_now", lambda: at(50))
    result = budget.handler(CLOCK, Context())
    assert "idle" not in result  # the hub's own account is empty, the member's is not
    assert sorted(result["stopped"]) == sorted([theirs, again])


@pytest.mark.usefixtures("budget_lambda")
def test_an_unreadable_spokes_list_is_the_runs_error_and_the_hubs_own_host_is_stopped_all_the_same(
    aws: str, store: LedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = client_factory(aws)  # no spokes parameter: it cannot be read
    (ours,) = launch(hub("ec2", None), "p4d.24xlarge", managed_tags(), count=1)
    (second,) = launch(hub("ec2", None), "p4d.24xlarge", managed_tags(), count=1)
    meter_running(store, hub, (ours, ACCOUNT), (second, ACCOUNT))
    over_budget(store)
    monkeypatch.setattr(budget, "utc_now", lambda: at(50))
    result = budget.handler(CLOCK, Context())
    assert sorted(result["stopped"]) == sorted([ours, second])
    (error,) = result["errors"]
    assert error["action"] == "list-spokes"
    assert error["error"].startswith(f"cannot read the member accounts: cannot read {PARAMETER}: ")
    assert heartbeats(hub) == []  # withheld: the heartbeat's alarm pages


def test_the_reconciler_repairs_a_member_accounts_host_the_meter_never_heard_of(
    aws: str, organisation: Organisation, store: LedgerStore
) -> None:
    hub = client_factory(aws)
    (theirs,) = launch(
        spoke(organisation.research)("ec2", REGION), "g5.xlarge", managed_tags(tenant="vision")
    )
    outcome = reconciling.reconcile_ledger(
        store=store, clients=hub, settings=hub_settings(), now=RECEIVED,
        invoked_function_arn=TARGET_ARN, spokes=SpokeList(),
    )  # fmt: skip
    assert outcome["hosts"] == 1
    assert outcome["errors"] == []
    (interval,) = store.intervals()
    assert (interval.instance_id, interval.account, interval.attribution.tenant) == (
        theirs,
        organisation.research,
        "vision",
    )
    assert heartbeats(hub) != []


def test_a_member_account_the_reconciler_cannot_enter_is_an_error_and_its_hosts_are_not_forgotten(
    aws: str, organisation: Organisation, store: LedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = client_factory(aws)
    (theirs,) = launch(
        spoke(organisation.research)("ec2", REGION), "g5.xlarge", managed_tags(tenant="vision")
    )
    meter_running(store, hub, (theirs, organisation.research))
    with FaultProxy(aws) as proxy:
        proxy.fail("AssumeRole", "AccessDenied", "not authorized to perform: sts:AssumeRole", status=403)
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)  # where the spoke sessions call STS
        outcome = reconciling.reconcile_ledger(
            store=store, clients=client_factory(proxy.url), settings=hub_settings(), now=RECEIVED,
            invoked_function_arn=TARGET_ARN, spokes=SpokeList(),
        )  # fmt: skip
    (error,) = outcome["errors"]
    assert (error["action"], error["place"]) == ("list", f"{organisation.research}/{REGION}")
    assert "AccessDenied" in error["error"]
    assert outcome["repairs"] == []  # its open interval is not closed as a host EC2 forgot
    (interval,) = store.intervals()
    assert interval.is_open
    assert heartbeats(hub) == []
