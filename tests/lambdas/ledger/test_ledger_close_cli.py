"""``parkbrake ledger close`` and ``ledger report --period`` end to end: a closed November prints the
same forever; its late usage is December's late lines in JSON, CSV, markdown, FOCUS and text."""

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
from guardrails.ledger import to_ms
from lambdas.ledger.store import LedgerStore

NOVEMBER = datetime(2036, 11, 1, tzinfo=UTC)
AFTER_ALL = datetime(2037, 1, 5, tzinfo=UTC)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(parkbrake, list(args))


def hours_on(store: LedgerStore, host: str, day: int, hours: int) -> None:
    start = to_ms(NOVEMBER + timedelta(days=day - 1))
    events = [
        step(f"{host}-run", host, "running", start, who("research")),
        step(f"{host}-stop", host, "stopped", start + hours * 3_600_000, who("research")),
    ]
    store.append(events, source="meter", received_at=AFTER_ALL)


@pytest.fixture
def november(aws: str, store: LedgerStore, ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> LedgerStore:
    """Two hours of research's in November; the CLI closes at the tests' virtual time, in 2037."""
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    monkeypatch.setattr("cli.usage.closes.closing_now", lambda: AFTER_ALL)
    hours_on(store, "i-a", 10, 2)
    return store


def test_a_closed_november_prints_the_same_after_late_usage_which_december_bills_late(
    november: LedgerStore,
) -> None:
    closed = invoke("ledger", "close", "--period", "2036-11", "--yes", "--output", "json")
    assert closed.exit_code == 0, closed.output
    (outcome,) = json.loads(closed.stdout)
    assert (outcome["tenant"], outcome["period"], outcome["outcome"], outcome["lines"]) == (
        "research", "2036-11", "closed", 1,
    )  # fmt: skip
    assert outcome["actor"].startswith("arn:aws:")  # the caller, from STS
    before = invoke("ledger", "report", "--period", "2036-11", "--format", "json")
    assert before.exit_code == 0, before.output

    hours_on(november, "i-late", 20, 3)  # arrives after the close
    hours_on(november, "i-dec", 35, 1)  # December's own

    after = invoke("ledger", "report", "--period", "2036-11", "--format", "json")
    assert after.stdout == before.stdout
    assert json.loads(after.stdout)["tenants"][0]["accelerator_seconds"] == "7200.000"
    again = invoke("ledger", "close", "--period", "2036-11", "--yes")
    assert again.exit_code == 0, again.output
    assert "research 2036-11 (UTC): already closed, 1 line (0 late)" in again.stdout

    december = json.loads(invoke("ledger", "report", "--period", "2036-12", "--format", "json").stdout)
    lines = december["tenants"][0]["invoice"]["lines"]
    assert [(line["late"], line["service_period"], line["accelerator_seconds"]) for line in lines] == [
        (False, "2036-12", "3600.000"),
        (True, "2036-11", "10800.000"),
    ]
    rows = list(
        csv.DictReader(io.StringIO(invoke("ledger", "report", "--period", "2036-12", "-o", "csv").stdout))
    )
    assert [(row["late"], row["service_period"]) for row in rows] == [
        ("false", "2036-12"),
        ("true", "2036-11"),
    ]
    markdown = invoke("ledger", "report", "--period", "2036-12", "--format", "markdown").stdout
    assert "| late (2036-11) |" in markdown
    focus = list(
        csv.DictReader(io.StringIO(invoke("ledger", "report", "--period", "2036-12", "-o", "focus").stdout))
    )
    assert [row["ChargeClass"] for row in focus] == ["", "Correction"]
    assert "late usage of 2036-11" in focus[1]["ChargeDescription"]
    assert [row_problems(row, "1.3") for row in focus] == [
        [],
        [],
    ]  # FOCUS 1.3's rules (guardrails.focus_spec)
    assert [(row["ChargePeriodStart"], row["BillingPeriodStart"]) for row in focus] == [
        ("2036-12-01T00:00:00Z", "2036-12-01T00:00:00Z"),
        ("2036-11-01T00:00:00Z", "2036-12-01T00:00:00Z"),  # charged in November, billed in December
    ]
    text = invoke("ledger", "report", "--period", "2036-12", "--wide").stdout
    assert "late, 2036-11" in text


def test_closing_asks_first_and_refuses_bad_or_unfinished_months(november: LedgerStore) -> None:
    unasked = invoke("ledger", "close", "--period", "2036-11")
    assert unasked.exit_code == 2
    assert "Refusing without --yes" in unasked.output
    for bad in ("2036-13", "11/2036"):
        result = invoke("ledger", "close", "--period", bad, "--yes")
        assert result.exit_code == 2
        assert f"--period: '{bad}' is not a month; give YYYY-MM" in result.output
    unfinished = invoke("ledger", "close", "--period", "2037-01", "--yes")
    assert unfinished.exit_code == 2
    assert "--period: 2037-01 has not ended for research (UTC" in unfinished.output
    dry = invoke("ledger", "close", "--period", "2036-11", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "research 2036-11 (UTC): would close, 1 line (0 late)" in dry.stdout
    report = json.loads(invoke("ledger", "report", "--period", "2036-11", "--format", "json").stdout)
    hours_on(november, "i-more", 11, 1)  # the month is still open: the report is live
    later = json.loads(invoke("ledger", "report", "--period", "2036-11", "--format", "json").stdout)
    assert (
        Decimal(later["tenants"][0]["accelerator_seconds"])
        == Decimal(report["tenants"][0]["accelerator_seconds"]) + 3600
    )


def test_a_tenant_with_nothing_but_late_usage_this_month_is_still_billed_it(november: LedgerStore) -> None:
    assert invoke("ledger", "close", "--period", "2036-11", "--yes").exit_code == 0
    hours_on(november, "i-late", 20, 3)  # November's, after the close; research has no December usage
    december = json.loads(invoke("ledger", "report", "--period", "2036-12", "--format", "json").stdout)
    (research,) = december["tenants"]
    assert research["tenant"] == "research"
    assert research["accelerator_seconds"] == "10800.000"  # no usage of December's own: the late lines'
    assert [(line["late"], line["subtotal_usd"]) for line in research["invoice"]["lines"]] == [
        (True, "3.018000")
    ]
    assert research["invoice"]["period_start"] == "2036-12-01T00:00:00+00:00"


def test_focus_leaves_out_an_unpriced_line_and_says_so(november: LedgerStore) -> None:
    start = to_ms(NOVEMBER + timedelta(days=3))
    unpriced = who("research", instance_type="p4d.24xlarge", region="af-south-1")  # no price recorded there
    november.append(
        [step("u-run", "i-u", "running", start, unpriced), step("u-stop", "i-u", "stopped", start + 3_600_000, unpriced)],
        source="meter", received_at=AFTER_ALL,
    )  # fmt: skip
    result = CliRunner().invoke(parkbrake, ["ledger", "report", "--period", "2036-11", "-o", "focus"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [row["SkuId"] for row in rows] == ["g5.xlarge"]  # i-a's; the unpriced p4d.24xlarge left out
    assert [row_problems(row, "1.3") for row in rows] == [[]]
    assert "1 unpriced line, 1.000000 instance-hours, left out until priced" in result.stderr


def test_a_line_means_the_same_before_and_after_closing_and_an_open_month_is_a_draft_everywhere(
    november: LedgerStore,
) -> None:
    def renderings() -> dict[str, str]:
        return {
            output: invoke("ledger", "report", "--period", "2036-11", "-o", output).stdout
            for output in ("text", "csv", "json", "markdown", "focus")
        }

    draft = renderings()
    assert "draft" in draft["text"]
    assert [(row["status"], row["service_period"]) for row in csv.DictReader(io.StringIO(draft["csv"]))] == [
        ("draft", "2036-11")
    ]
    document = json.loads(draft["json"])["tenants"][0]
    assert (document["status"], document["invoice"]["lines"][0]["service_period"]) == ("draft", "2036-11")
    assert "**draft**" in draft["markdown"]
    assert [row["x_InvoiceStatus"] for row in csv.DictReader(io.StringIO(draft["focus"]))] == ["draft"]

    assert invoke("ledger", "close", "--period", "2036-11", "--yes").exit_code == 0
    final = renderings()
    assert "draft" not in final["text"]
    assert "draft" not in final["markdown"]
    closed_rows = list(csv.DictReader(io.StringIO(final["csv"])))
    assert [(row["status"], row["service_period"]) for row in closed_rows] == [("final", "2036-11")]
    # Apart from its status, the line is the same line with the same id.
    drafted = list(csv.DictReader(io.StringIO(draft["csv"])))
    assert [row | {"status": ""} for row in drafted] == [row | {"status": ""} for row in closed_rows]
    assert json.loads(final["json"])["tenants"][0]["invoice"]["invoice_id"] == "research-2036-11"
