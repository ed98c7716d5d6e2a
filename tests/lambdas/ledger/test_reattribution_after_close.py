"""``ledger attribute`` after ``ledger close``: usage a closed month billed as ``unattributed``,
attributed to its tenant afterwards, leaves the closed month's report as it was; the first open
month bills it late, a credit for ``unattributed`` and a charge for the tenant, with the closed
month as service period; and every tenant's invoices, summed, are its true usage."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from click.testing import CliRunner, Result
from ledger_streams import step, who

from cli.main import parkbrake
from guardrails.focus_spec import row_problems
from guardrails.ledger import UNATTRIBUTED, to_ms
from lambdas.ledger.store import LedgerStore

NOVEMBER = datetime(2036, 11, 1, tzinfo=UTC)
AFTER_ALL = datetime(2037, 1, 5, tzinfo=UTC)
PERIODS = ("2036-11", "2036-12", "2037-01")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(parkbrake, list(args))


def hours_on(store: LedgerStore, host: str, day: int, hours: int, tenant: str) -> None:
    start = to_ms(NOVEMBER + timedelta(days=day - 1))
    attribution = who(tenant, tenant if tenant == UNATTRIBUTED else "training")
    events = [
        step(f"{host}-{day}-run", host, "running", start, attribution),
        step(f"{host}-{day}-stop", host, "stopped", start + hours * 3_600_000, attribution),
    ]
    store.append(events, source="meter", received_at=AFTER_ALL)


def invoiced(period: str) -> dict[str, dict[str, object]]:
    result = invoke("ledger", "report", "--period", period, "--format", "json")
    assert result.exit_code == 0, result.output
    return {row["tenant"]: row for row in json.loads(result.stdout)["tenants"]}


def totals(tenant: str) -> tuple[Decimal, Decimal]:
    """A tenant's accelerator-seconds and USD, summed over every month's invoice."""
    seconds, usd = Decimal(0), Decimal(0)
    for period in PERIODS:
        if row := invoiced(period).get(tenant):
            invoice = row["invoice"]
            assert isinstance(invoice, dict)
            seconds += sum((Decimal(line["accelerator_seconds"]) for line in invoice["lines"]), Decimal(0))
            usd += Decimal(invoice["total_usd"])
    return seconds, usd


@pytest.fixture
def closed_november(
    aws: str, store: LedgerStore, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> LedgerStore:
    """Research's 2 hours and an untagged host's 3 hours in November, the month closed."""
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    monkeypatch.setattr("cli.usage.closes.closing_now", lambda: AFTER_ALL)
    hours_on(store, "i-a", 10, 2, "research")
    hours_on(store, "i-untagged", 20, 3, UNATTRIBUTED)
    closed = invoke("ledger", "close", "--period", "2036-11", "--yes")
    assert closed.exit_code == 0, closed.output
    return store


@pytest.mark.parametrize("tenant", ["research", "newco"])  # one with a November close, one without
def test_attributing_a_closed_months_usage_bills_it_late_and_leaves_the_month_as_closed(
    closed_november: LedgerStore, tenant: str
) -> None:
    before = invoke("ledger", "report", "--period", "2036-11", "--format", "json").stdout
    true_usage = {name: totals(name) for name in ("research", UNATTRIBUTED)}
    assert true_usage[UNATTRIBUTED][0] == 3 * 3600

    done = invoke("ledger", "attribute", "i-untagged", "--tenant", tenant, "--since", "2036-11-20",
                  "--until", "2036-11-21", "--reason", "untagged by mistake; OPS-7", "--yes")  # fmt: skip
    assert done.exit_code == 0, done.output

    assert invoke("ledger", "report", "--period", "2036-11", "--format", "json").stdout == before
    december = invoiced("2036-12")
    late = {
        name: [
            (line["late"], line["service_period"], line["accelerator_seconds"])
            for line in row["invoice"]["lines"]
        ]  # type: ignore[index]
        for name, row in december.items()
    }
    assert late[UNATTRIBUTED] == [(True, "2036-11", "-10800.000")]
    assert late[tenant] == [(True, "2036-11", "10800.000")]
    # Each tenant's invoices, summed over the months, are its true usage: seconds and cost.
    moved_usd = true_usage[UNATTRIBUTED][1]
    assert totals(UNATTRIBUTED) == (Decimal(0), Decimal(0))
    research = true_usage["research"]
    if tenant == "research":
        assert totals("research") == (research[0] + 3 * 3600, research[1] + moved_usd)
    else:
        assert totals("research") == research
        assert totals("newco") == (Decimal(3 * 3600), moved_usd)

    focus = list(
        csv.DictReader(io.StringIO(invoke("ledger", "report", "--period", "2036-12", "-o", "focus").stdout))
    )
    assert {(row["BillingAccountId"], row["ChargeClass"], row["BilledCost"][0] == "-") for row in focus} == {
        (UNATTRIBUTED, "Correction", True), (tenant, "Correction", False),
    }  # fmt: skip
    assert [row_problems(row, "1.3") for row in focus] == [[], []]
