"""A closed month keeps its own bounds when the tenant's budget zone changes after the close: the
open months next to it start where it ended and end where it began, so for every pair of zones the
months tile time and their invoices sum to the true usage, never an hour twice nor one lost
(issue 38: a host of 72 true hours billed 86, 60 or 73 over November and December)."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_streams import step, who

from cli.main import parkbrake
from guardrails.invoice import Invoice
from guardrails.ledger import to_ms
from lambdas.ledger.closes import PeriodCloses, open_bounds, period_window
from lambdas.ledger.store import LedgerStore

NOVEMBER = datetime(2036, 11, 1, tzinfo=UTC)
AFTER_ALL = datetime(2037, 3, 5, tzinfo=UTC)
HOUR_MS = 3_600_000
# The zones at the extremes of the offsets (+14, −12), one with DST, and UTC.
ZONES = ("UTC", "Pacific/Kiritimati", "Etc/GMT+12", "Europe/Berlin", "America/Los_Angeles")
EXAMPLES = itertools.count()
MONTHS = ("2036-10", "2036-11", "2036-12", "2037-01")


def run(store: LedgerStore, host: str, start: datetime, hours: int, tenant: str = "research") -> None:
    events = [
        step(f"{host}-run", host, "running", to_ms(start), who(tenant)),
        step(f"{host}-stop", host, "stopped", to_ms(start) + hours * HOUR_MS, who(tenant)),
    ]
    store.append(events, source="meter", received_at=AFTER_ALL)


def accelerator_ms(invoice: Invoice) -> int:
    return sum(line.accelerator_ms for line in invoice.lines)


def every_month(store: LedgerStore, zone: str, tenant: str = "research") -> dict[str, Invoice]:
    closes = PeriodCloses(store)
    known = closes.closes()
    return {
        month: closes.invoice(tenant=tenant, period=month, zone=zone, now=AFTER_ALL, closes=known)[0]
        for month in MONTHS
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    closed_in=st.sampled_from(ZONES),
    zone_now=st.sampled_from(ZONES),
    start_hour=st.integers(-60, 60),  # hours from 1 December 00:00 UTC
    hours=st.integers(1, 72),
    late_hour=st.integers(-60, 60),
)
def test_the_months_sum_to_the_true_usage_whatever_zone_the_budget_moves_to(
    store: LedgerStore, *, closed_in: str, zone_now: str, start_hour: int, hours: int, late_hour: int
) -> None:
    tenant = f"t{next(EXAMPLES)}"  # each example its own tenant: the ledger is append-only
    december = NOVEMBER + timedelta(days=30)
    run(store, f"i-{tenant}", december + timedelta(hours=start_hour), hours, tenant)
    closes = PeriodCloses(store)
    (outcome,) = closes.close(period="2036-11", zones={tenant: closed_in}, now=AFTER_ALL, actor="ops")
    closed = outcome.close
    run(store, f"i-late-{tenant}", december + timedelta(hours=late_hour), 2, tenant)  # after the close

    months = every_month(store, zone_now, tenant)

    assert sum(accelerator_ms(invoice) for invoice in months.values()) == (hours + 2) * HOUR_MS
    assert (months["2036-11"].since, months["2036-11"].until) == (closed.since, closed.until)
    assert months["2036-10"].until == closed.since  # October ends where the closed month began
    assert months["2036-12"].since == closed.until  # December starts where it ended
    assert months["2036-12"].until == months["2037-01"].since == period_window("2036-12", zone_now)[1]


def test_a_december_closed_after_the_zone_moved_starts_where_november_ended(store: LedgerStore) -> None:
    run(store, "i-a", NOVEMBER + timedelta(days=29, hours=20), 72)  # 30 Nov 20:00 UTC to 3 Dec
    closes = PeriodCloses(store)
    closes.close(period="2036-11", zones={"research": "UTC"}, now=AFTER_ALL, actor="ops")
    (december,) = closes.close(
        period="2036-12", zones={"research": "Pacific/Kiritimati"}, now=AFTER_ALL, actor="ops"
    )
    assert december.close.since == NOVEMBER + timedelta(days=30)  # not 30 Nov 10:00 UTC (+14)
    months = every_month(store, "Pacific/Kiritimati")
    assert sum(accelerator_ms(invoice) for invoice in months.values()) == 72 * HOUR_MS  # not 86
    assert (
        open_bounds("research", "2037-01", "Pacific/Kiritimati", closes.closes())[0] == december.close.until
    )


def test_the_closed_months_json_bounds_never_change_and_december_does_not_overlap_them(
    aws: str, store: LedgerStore, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    monkeypatch.setattr("cli.usage.closes.closing_now", lambda: AFTER_ALL)
    run(store, "i-a", NOVEMBER + timedelta(days=29, hours=12), 72)

    def report(month: str) -> dict[str, object]:
        result = CliRunner().invoke(
            parkbrake, ["ledger", "report", "--tenant", "research", "--month", month, "-o", "json"]
        )
        assert result.exit_code == 0, result.output
        document: dict[str, object] = json.loads(result.stdout)
        return document

    budget = ["ledger", "budget", "research", "--limit-usd", "5000"]
    assert CliRunner().invoke(parkbrake, [*budget, "--timezone", "UTC"]).exit_code == 0
    assert CliRunner().invoke(parkbrake, ["ledger", "close", "--period", "2036-11", "--yes"]).exit_code == 0
    before = report("2036-11")
    assert CliRunner().invoke(parkbrake, [*budget, "--timezone", "Pacific/Kiritimati"]).exit_code == 0

    after = report("2036-11")
    december = report("2036-12")

    assert (after["since"], after["until"]) != ("", "")
    assert datetime.fromisoformat(str(after["since"])) == datetime.fromisoformat(str(before["since"]))
    assert datetime.fromisoformat(str(after["until"])) == datetime.fromisoformat(str(before["until"]))
    assert datetime.fromisoformat(str(december["since"])) == datetime(2036, 12, 1, tzinfo=UTC)
    seconds = [
        Decimal(str(line["accelerator_seconds"]))
        for document in (after, december)
        for tenant in document["tenants"]  # type: ignore[attr-defined]
        for line in tenant["invoice"]["lines"]
    ]
    assert sum(seconds) == 72 * 3600


def test_the_budget_of_the_month_after_a_close_starts_where_the_close_ended(store: LedgerStore) -> None:
    from guardrails.runway import Budget

    run(store, "i-a", NOVEMBER + timedelta(days=29, hours=12), 24)  # 30 Nov 12:00 to 1 Dec 12:00 UTC
    PeriodCloses(store).close(period="2036-11", zones={"research": "UTC"}, now=AFTER_ALL, actor="ops")
    store.set_budget(Budget("research", Decimal(5000), timezone="Pacific/Kiritimati"))
    mid_december = datetime(2036, 12, 15, tzinfo=UTC)
    (status,) = store.runways(now=mid_december, default_cap=timedelta(0), tenants=["research"])
    assert status.period_start == datetime(2036, 12, 1, tzinfo=UTC)  # not 30 Nov 10:00 UTC (+14)
    assert status.spent_usd == Decimal("12.072000")  # December's 12 hours of g5.xlarge, not 14 more
    west = Budget("research", Decimal(5000), timezone="Etc/GMT+12")
    store.set_budget(west)
    (status,) = store.runways(now=mid_december, default_cap=timedelta(0), tenants=["research"])
    assert status.period_start == datetime(2036, 12, 1, tzinfo=UTC)  # not 1 Dec 12:00 UTC: no gap
    assert status.spent_usd == Decimal("12.072000")
