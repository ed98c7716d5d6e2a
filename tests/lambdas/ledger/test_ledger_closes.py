"""Closed months never change; usage that arrives after its month closed is billed in the next open
month, marked late, for the difference, so every month's invoice sums to the live total."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_streams import step, who
from psycopg.conninfo import make_conninfo

from guardrails.errors import InputError
from guardrails.invoice import Invoice
from guardrails.ledger import to_ms
from lambdas.ledger.closes import (
    CLOSE_KIND,
    PeriodCloses,
    close_after_grace,
    late_lines,
    next_period,
    parse_period,
    period_window,
    previous_period,
)
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore

NOVEMBER = datetime(2036, 11, 1, tzinfo=UTC)
AFTER_ALL = datetime(2037, 1, 5, tzinfo=UTC)  # every month below has ended; every event is in its past
G5 = Decimal("1.006")  # the tests' g5.xlarge price (conftest.TEST_ON_DEMAND)
PERIODS = ("2036-10", "2036-11", "2036-12", "2037-01")


def nov(day: int, hour: int = 0) -> int:
    return to_ms(NOVEMBER + timedelta(days=day - 1, hours=hour))


def hours_on(store: LedgerStore, host: str, tenant: str, start_ms: int, hours: int) -> None:
    events = [
        step(f"{host}-run", host, "running", start_ms, who(tenant)),
        step(f"{host}-stop", host, "stopped", start_ms + hours * 3_600_000, who(tenant)),
    ]
    store.append(events, source="meter", received_at=AFTER_ALL)


def totals(invoice: Invoice) -> tuple[int, Decimal]:
    return sum(line.accelerator_ms for line in invoice.lines), sum(
        (line.usd_hour_ms for line in invoice.lines), Decimal(0)
    )


def invoice_of(store: LedgerStore, tenant: str, period: str) -> Invoice:
    closes = PeriodCloses(store)
    return closes.invoice(tenant=tenant, period=period, zone="UTC", now=AFTER_ALL, closes=closes.closes())[0]


def test_a_closed_november_stays_and_its_late_usage_is_billed_in_december(store: LedgerStore) -> None:
    hours_on(store, "i-a", "research", nov(10), 2)
    closes = PeriodCloses(store)
    (outcome,) = closes.close(period="2036-11", zones={"research": "UTC"}, now=AFTER_ALL, actor="ops@example")
    assert outcome.outcome == "closed"
    closed = invoice_of(store, "research", "2036-11")
    assert totals(closed) == (2 * 3_600_000, G5 * 2 * 3_600_000)

    hours_on(store, "i-late", "research", nov(20), 3)  # arrives after November closed
    hours_on(store, "i-dec", "research", nov(35), 1)  # December's own usage

    assert invoice_of(store, "research", "2036-11") == closed  # never changes
    december = invoice_of(store, "research", "2036-12")
    late = [line for line in december.lines if line.late]
    own = [line for line in december.lines if not line.late]
    assert [(line.service_period, line.accelerator_ms) for line in late] == [("2036-11", 3 * 3_600_000)]
    assert [(line.service_period, line.accelerator_ms) for line in own] == [("2036-12", 3_600_000)]
    live = store.invoice_lines(now=AFTER_ALL, since=NOVEMBER, until=datetime(2037, 1, 1, tzinfo=UTC))
    assert totals(closed)[1] + totals(december)[1] == sum((line.usd_hour_ms for line in live), Decimal(0))

    # Once December closes, its late lines are part of what November billed: nothing is billed twice.
    closes.close(period="2036-12", zones={"research": "UTC"}, now=AFTER_ALL, actor="ops@example")
    january = invoice_of(store, "research", "2037-01")
    assert january.lines == ()


def test_closing_twice_is_an_answer_not_an_error_and_one_decision(store: LedgerStore) -> None:
    hours_on(store, "i-a", "research", nov(3), 1)
    closes = PeriodCloses(store)
    first = closes.close(period="2036-11", zones={"research": "UTC"}, now=AFTER_ALL, actor="ops@example")
    hours_on(store, "i-b", "research", nov(4), 1)
    second = closes.close(
        period="2036-11", zones={"research": "UTC"}, now=AFTER_ALL + timedelta(days=1), actor="someone-else"
    )
    assert [o.outcome for o in first + second] == ["closed", "already-closed"]
    assert second[0].close == first[0].close  # the first close stands, its actor and time
    assert second[0].invoice == first[0].invoice
    logged = DecisionLedger.of(store).read(kinds=[CLOSE_KIND])
    assert [(d.decision.actor, d.decision.tenant, d.decision.details["period"]) for d in logged] == [
        ("ops@example", "research", "2036-11")
    ]


def test_a_month_that_has_not_ended_cannot_close_and_a_dry_run_records_nothing(store: LedgerStore) -> None:
    hours_on(store, "i-a", "research", nov(3), 1)
    closes = PeriodCloses(store)
    with pytest.raises(
        InputError, match=r"--period: 2036-11 has not ended for research \(America/Los_Angeles"
    ):
        closes.close(
            period="2036-11", zones={"research": "America/Los_Angeles"},
            now=datetime(2036, 12, 1, 2, tzinfo=UTC), actor="ops",  # over in UTC, not in California
        )  # fmt: skip
    (dry,) = closes.close(period="2036-11", zones={"research": "UTC"}, now=AFTER_ALL, actor="x", dry_run=True)
    assert dry.outcome == "would-close"
    assert len(dry.invoice.lines) == 1
    assert closes.closes() == {}
    assert DecisionLedger.of(store).read(kinds=[CLOSE_KIND]) == []


def test_a_month_closes_in_the_tenants_time_zone(store: LedgerStore) -> None:
    # 30 Nov 23:30 UTC is 1 Dec in Berlin: not November's for a Berlin tenant.
    hours_on(store, "i-a", "research", nov(30, 23), 1)
    (outcome,) = PeriodCloses(store).close(
        period="2036-11", zones={"research": "Europe/Berlin"}, now=AFTER_ALL, actor="ops"
    )
    assert outcome.close.since == datetime(2036, 10, 31, 23, tzinfo=UTC)
    assert outcome.close.until == datetime(2036, 11, 30, 23, tzinfo=UTC)
    assert outcome.invoice.lines == ()


def test_the_reconciler_closes_last_month_once_the_grace_is_over(store: LedgerStore) -> None:
    hours_on(store, "i-a", "research", nov(3), 1)
    within = close_after_grace(store, now=datetime(2036, 12, 3, tzinfo=UTC), grace=timedelta(days=3))
    assert within == []
    assert close_after_grace(store, now=AFTER_ALL, grace=None) == []
    done = close_after_grace(store, now=datetime(2036, 12, 4, 1, tzinfo=UTC), grace=timedelta(days=3))
    assert [(o.close.tenant, o.close.period, o.close.actor, o.outcome) for o in done] == [
        ("research", "2036-11", "reconciler", "closed")
    ]
    again = close_after_grace(store, now=datetime(2036, 12, 4, 2, tzinfo=UTC), grace=timedelta(days=3))
    assert again == []  # closed already: left alone
    assert len(DecisionLedger.of(store).read(kinds=[CLOSE_KIND])) == 1


def test_bad_periods_name_the_flag_and_months_step_across_years() -> None:
    assert parse_period("2026-11") == "2026-11"
    for bad in ("2026-13", "2026-1", "november", ""):
        with pytest.raises(InputError, match=r"--period: .* is not a month; give YYYY-MM"):
            parse_period(bad)
    assert next_period("2036-12") == "2037-01"
    assert previous_period("2037-01") == "2036-12"
    assert period_window("2036-02", "UTC") == (
        datetime(2036, 2, 1, tzinfo=UTC),
        datetime(2036, 3, 1, tzinfo=UTC),
    )


def test_late_lines_are_the_difference_and_a_credit_when_less_is_billed_now(store: LedgerStore) -> None:
    hours_on(store, "i-a", "research", nov(3), 2)
    live = store.invoice_lines(now=AFTER_ALL, since=NOVEMBER, until=datetime(2036, 12, 1, tzinfo=UTC))
    assert late_lines(live, live, "2036-11") == []
    (credit,) = late_lines([], live, "2036-11")
    assert credit.late
    assert credit.accelerator_ms == -2 * 3_600_000
    assert credit.usd_hour_ms < 0


@pytest.fixture
def app_store(ledger_url: str) -> Iterator[tuple[LedgerStore, str]]:
    """The store as the app role (the CLI's and the reconciler's), and the owner's URL."""
    name = f"parkbrake_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ledger_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN IN ROLE parkbrake_app")
    store = LedgerStore.connect(make_conninfo(ledger_url, user=name))
    yield store, ledger_url
    store.close()
    with psycopg.connect(ledger_url, autocommit=True) as admin:
        admin.execute(f"DROP OWNED BY {name}")
        admin.execute(f"DROP ROLE {name}")


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE period_closes SET actor = 'nobody'",
        "DELETE FROM period_closes",
        "TRUNCATE period_closes CASCADE",
        "UPDATE closed_invoice_lines SET usd_hour_ms = 0",
        "DELETE FROM closed_invoice_lines",
        "TRUNCATE closed_invoice_lines",
    ],
)
def test_a_close_cannot_be_rewritten_by_the_app_role_or_the_owner(
    app_store: tuple[LedgerStore, str], statement: str
) -> None:
    store, owner_url = app_store
    hours_on(store, "i-a", "research", nov(3), 1)
    (outcome,) = PeriodCloses(store).close(
        period="2036-11", zones={"research": "UTC"}, now=AFTER_ALL, actor="ops"
    )
    assert outcome.outcome == "closed"  # the app role may close
    for url in (None, owner_url):
        with (
            psycopg.connect(url, autocommit=True) if url else store.connections.connection() as connection,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            connection.execute(statement)
    assert invoice_of(store, "research", "2036-11") == outcome.invoice


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32 - 1), batches=st.integers(1, 4))
def test_every_invoice_sums_to_the_live_total_and_a_closed_month_never_changes(
    store: LedgerStore, seed: int, batches: int
) -> None:
    rng = random.Random(seed)
    tenant = f"t{uuid.uuid4().hex[:8]}"  # each example's own tenant
    october = datetime(2036, 10, 1, tzinfo=UTC)
    events = []
    for host in range(rng.randint(1, 6)):
        start = to_ms(october) + rng.randint(0, 90 * 86_400_000)  # Oct 1 to Dec 29
        instance = f"{tenant}-i{host}"
        events.append(step(f"{instance}-run", instance, "running", start, who(tenant)))
        if rng.random() < 0.9:  # some never stop: billed to each month's end, corrected by their stop
            stop = start + rng.randint(1_000, 20 * 86_400_000)
            events.append(
                step(f"{instance}-stop", instance, "stopped", min(stop, to_ms(AFTER_ALL) - 1), who(tenant))
            )
    rng.shuffle(events)
    cuts = sorted(rng.sample(range(len(events) + 1), min(batches, len(events) + 1)))
    closes = PeriodCloses(store)
    snapshots: dict[str, Invoice] = {}
    for begin, end in zip([0, *cuts], [*cuts, len(events)], strict=True):
        store.append(events[begin:end], source="meter", received_at=AFTER_ALL)
        for period in PERIODS[:3]:
            if period not in snapshots and rng.random() < 0.4:
                (outcome,) = closes.close(period=period, zones={tenant: "UTC"}, now=AFTER_ALL, actor="test")
                snapshots[period] = outcome.invoice
        for period, snapshot in snapshots.items():
            assert invoice_of(store, tenant, period) == snapshot  # whatever arrived since
    billed = [totals(invoice_of(store, tenant, period)) for period in PERIODS]
    live = store.invoice_lines(
        now=AFTER_ALL, since=october, until=datetime(2037, 2, 1, tzinfo=UTC), tenants=[tenant]
    )
    assert sum(ms for ms, _ in billed) == sum(line.accelerator_ms for line in live)
    assert sum((usd for _, usd in billed), Decimal(0)) == sum((line.usd_hour_ms for line in live), Decimal(0))


def test_the_reconcilers_run_closes_last_month_after_the_stacks_grace(store: LedgerStore, aws: str) -> None:
    from guardrail_fleet import client_factory, guardrail_settings

    from lambdas.engines import reconciling

    hours_on(store, "i-a", "research", nov(3), 1)
    clients = client_factory(aws)
    run = {"store": store, "clients": clients, "now": datetime(2036, 12, 4, 1, tzinfo=UTC)}
    assert (
        reconciling.run_reconciler(settings=guardrail_settings(), **run)["closed_periods"] == []
    )  # no grace
    outcome = reconciling.run_reconciler(settings=guardrail_settings(close_grace=timedelta(days=3)), **run)
    assert outcome["closed_periods"] == ["research 2036-11"]
    (logged,) = DecisionLedger.of(store).read(kinds=[CLOSE_KIND])
    assert (logged.decision.actor, logged.decision.tenant) == ("reconciler", "research")
    assert logged.decision.reason == "closed after the grace of 3d (guardrails.close_grace)"
