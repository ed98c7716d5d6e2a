"""One total, whatever the format: over generated ledgers (hosts of several tenants, pools and types,
late lines of a closed month both ways), the text, csv, json, markdown and FOCUS renderings of the
same invoices agree on every tenant's total and every line's amount, and with guardrails.ledger's
pure reference (usage_by_key over the same intervals and prices, plus the late lines); and the
month-end forecast starts from what the month has billed, late lines included; every CSV text cell
is neutralised against spreadsheet formulas while amounts stay numbers; a text report names each
tenant's zone where they differ."""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_streams import us_east_book, who

from cli.table import render
from cli.usage.invoices import finished_invoices, invoices_table, report_json
from guardrails.csv_cells import FORMULA_STARTS
from guardrails.focus import invoices_focus
from guardrails.invoice import (
    AMOUNT_COLUMNS,
    FORECAST_BASIS,
    Invoice,
    InvoiceLine,
    invoices_csv,
    invoices_markdown,
    month_end_forecast,
)
from guardrails.ledger import Interval, PriceBook, to_ms, usage_by_key, usd
from lambdas.ledger.store import LedgerStore

DECEMBER = (datetime(2036, 12, 1, tzinfo=UTC), datetime(2037, 1, 1, tzinfo=UTC))
PRICES = {"g5.xlarge": Decimal("1.006"), "p4d.24xlarge": Decimal("32.7726")}
BOOK: PriceBook = us_east_book([(kind, None, price) for kind, price in PRICES.items()])
TENANTS = ("research", "vision", "product")
POOLS = ("training", "inference", "=cmd")  # a formula-like pool: neutralised text, same amounts

hosts = st.lists(
    st.tuples(
        st.sampled_from(TENANTS),
        st.sampled_from(POOLS),
        st.sampled_from(sorted(PRICES)),
        st.integers(min_value=0, max_value=29 * 24 * 3_600_000),  # start within December
        st.integers(min_value=1, max_value=40 * 3_600_000),  # how long it ran
    ),
    max_size=12,
)
lates = st.lists(
    st.tuples(
        st.sampled_from(TENANTS),
        st.sampled_from(POOLS),
        st.integers(min_value=-(10 * 3_600_000), max_value=10 * 3_600_000).filter(bool),
    ),
    max_size=4,
)


def ledger_invoices(
    host_list: list[tuple[str, str, str, int, int]], late_list: list[tuple[str, str, int]]
) -> tuple[list[Invoice], dict[str, Decimal]]:
    """The invoices of a generated ledger and, per tenant, the reference total."""
    start_ms = to_ms(DECEMBER[0])
    intervals = [
        Interval(f"e{n}", f"i-{n}", who(tenant, pool, kind), start_ms + offset, start_ms + offset + length)
        for n, (tenant, pool, kind, offset, length) in enumerate(host_list)
    ]
    usage = usage_by_key(intervals, BOOK, now_ms=to_ms(DECEMBER[1]), until_ms=to_ms(DECEMBER[1]))
    lines: dict[str, list[InvoiceLine]] = defaultdict(list)
    exact: dict[str, Decimal] = defaultdict(Decimal)
    for (tenant, pool, kind), used in sorted(usage.items()):
        price = PRICES[kind]
        billed_ms = int(used.usd_hour_ms / price)
        lines[tenant].append(
            InvoiceLine(tenant, pool, kind, "us-east-1", "on-demand", price, "prices.json", None, billed_ms,
                        used.accelerator_ms, used.usd_hour_ms, "on-demand", service_period="2036-12")
        )  # fmt: skip
        exact[tenant] += used.usd_hour_ms
    for tenant, pool, billed_ms in late_list:  # usage of a closed November billed now, or credited
        price = PRICES["g5.xlarge"]
        lines[tenant].append(
            InvoiceLine(tenant, pool, "g5.xlarge", "us-east-1", "on-demand", price, "prices.json", None, billed_ms,
                        billed_ms, price * billed_ms, "on-demand", late=True, service_period="2036-11")
        )  # fmt: skip
        exact[tenant] += price * billed_ms
    invoices = [
        Invoice(tenant, *DECEMBER, tuple(lines[tenant]), draft=True, billing_period=DECEMBER)
        for tenant in sorted(lines)
    ]
    return invoices, {tenant: usd(total) for tenant, total in exact.items()}


def text_amounts(invoices: list[Invoice]) -> tuple[dict[str, Decimal], dict[str, list[Decimal]]]:
    plain = render(invoices_table(invoices, *DECEMBER, "UTC"), None).text.plain
    totals, lines = {}, defaultdict(list)
    for row in plain.splitlines()[3:]:  # after the title, the header and its rule
        if match := re.match(r"(\S+)\s+total\s+(-?[\d.]+)", row):
            totals[match[1]] = Decimal(match[2])
        elif cells := row.split():
            lines[cells[0]].append(Decimal(cells[6]))
    return totals, lines


def markdown_amounts(invoices: list[Invoice]) -> tuple[dict[str, Decimal], dict[str, list[Decimal]]]:
    totals, lines, tenant = {}, defaultdict(list), ""
    for row in invoices_markdown(invoices).splitlines():
        if heading := re.match(r"## (\S+):", row):
            tenant = heading[1]
        elif total := re.match(r"\*\*Total: (-?[\d.]+) USD\*\*", row):
            totals[tenant] = Decimal(total[1])
        elif row.startswith("| ") and not row.startswith("| pool"):
            lines[tenant].append(Decimal(row.split(" | ")[8]))
    return totals, lines


def rows_amounts(rows: list[dict[str, str]], tenant: str, amount: str) -> dict[str, list[Decimal]]:
    lines = defaultdict(list)
    for row in rows:
        lines[row[tenant]].append(Decimal(row[amount]))
    return lines


@settings(max_examples=60, deadline=None)
@given(host_list=hosts, late_list=lates)
def test_the_five_renderings_tell_the_reference_totals_line_by_line(
    host_list: list[tuple[str, str, str, int, int]], late_list: list[tuple[str, str, int]]
) -> None:
    invoices, reference = ledger_invoices(host_list, late_list)
    expected_lines = {invoice.tenant: [line.subtotal_usd for line in invoice.lines] for invoice in invoices}
    assert {invoice.tenant: invoice.total_usd for invoice in invoices} == reference

    text_totals, text_lines = text_amounts(invoices)
    markdown_totals, markdown_lines = markdown_amounts(invoices)
    document = json.loads(report_json(invoices, *DECEMBER))["tenants"]
    csv_lines = rows_amounts(
        list(csv.DictReader(io.StringIO(invoices_csv(invoices)))), "tenant", "subtotal_usd"
    )
    focus_rows = list(csv.DictReader(io.StringIO(invoices_focus(invoices))))
    focus_lines = rows_amounts(focus_rows, "BillingAccountId", "BilledCost")

    assert text_totals == markdown_totals == reference
    assert {entry["tenant"]: Decimal(entry["cost_usd"]) for entry in document} == reference
    assert {entry["tenant"]: Decimal(entry["invoice"]["total_usd"]) for entry in document} == reference
    json_lines = {
        entry["tenant"]: [Decimal(line["subtotal_usd"]) for line in entry["invoice"]["lines"]]
        for entry in document
    }
    for lines in (text_lines, markdown_lines, json_lines, csv_lines, focus_lines):
        assert dict(lines) == expected_lines
    # A tenant's total is the exact sum rounded once: the lines, each rounded, may differ from it
    # by at most half a micro-dollar each; every format prints that same total.
    for tenant, total in reference.items():
        slack = Decimal("0.0000005") * len(expected_lines[tenant])
        assert abs(sum(expected_lines[tenant], Decimal(0)) - total) <= slack
    # Amounts in JSON: exact decimal strings everywhere.
    for entry in document:
        assert isinstance(entry["cost_usd"], str)
        assert all(isinstance(pool["cost_usd"], str) for pool in entry["by_pool"])


def test_the_forecast_counts_what_the_month_billed_late_lines_included_and_says_so(
    store: LedgerStore,
) -> None:
    now = datetime(2036, 12, 11, tzinfo=UTC)  # 21 days, 504 hours, of December left
    own = InvoiceLine("research", "training", "g5.xlarge", "us-east-1", "on-demand", PRICES["g5.xlarge"],
                      "prices.json", None, 3_600_000, 3_600_000, PRICES["g5.xlarge"] * 3_600_000, "on-demand")  # fmt: skip
    late = replace(own, billed_ms=-7_200_000, usd_hour_ms=PRICES["g5.xlarge"] * -7_200_000, late=True,
                   service_period="2036-11")  # fmt: skip
    burn = Decimal("2")  # what the running hosts cost an hour
    forecast = month_end_forecast(own.subtotal_usd, burn, now, DECEMBER[1])
    live = Invoice("research", DECEMBER[0], now, (own, late), forecast_usd=forecast)
    (shown,) = finished_invoices(store, [live], period="2036-12", zone="UTC", billing=DECEMBER, now=now)
    # 1.006 billed, 2.012 credited late, and 2 USD/h for the 504 hours left.
    assert shown.forecast_usd == Decimal("1.006") - Decimal("2.012") + 2 * 504
    assert shown.total_usd == Decimal("-1.006000")
    assert shown.as_dict()["forecast_basis"] == FORECAST_BASIS
    assert "late lines included" in FORECAST_BASIS
    assert f"Month-end forecast: {shown.forecast_usd} USD ({FORECAST_BASIS})" in invoices_markdown([shown])
    assert (shown.draft, shown.lines[0].service_period) == (True, "2036-12")


@settings(max_examples=150, deadline=None)
@given(
    pool=st.text(min_size=1, max_size=10),
    source=st.text(min_size=1, max_size=10),
    billed_ms=st.integers(min_value=-(10**9), max_value=10**9),
)
def test_no_csv_text_cell_starts_a_formula_and_amounts_stay_numbers(
    pool: str, source: str, billed_ms: int
) -> None:
    price = PRICES["g5.xlarge"]
    line = InvoiceLine("research", pool, "g5.xlarge", "us-east-1", "on-demand", price, source, None, billed_ms,
                       billed_ms, price * billed_ms, "on-demand", late=billed_ms < 0, service_period="2036-12")  # fmt: skip
    (row,) = csv.DictReader(io.StringIO(invoices_csv([Invoice("research", *DECEMBER, (line,))])))
    for column, value in row.items():
        if column in AMOUNT_COLUMNS:
            assert Decimal(value) == Decimal(line.as_dict()[column])  # a number, a leading "-" included
        else:
            assert not value.startswith(FORMULA_STARTS), (column, value)
    assert row["pool"] == ("'" + pool if pool.startswith(FORMULA_STARTS) else pool)
    assert row["price_source"] == ("'" + source if source.startswith(FORMULA_STARTS) else source)


def test_a_text_report_names_each_tenants_zone_when_they_differ() -> None:
    line = InvoiceLine("research", "training", "g5.xlarge", "us-east-1", "on-demand", PRICES["g5.xlarge"],
                       "prices.json", None, 60_000, 60_000, PRICES["g5.xlarge"] * 60_000, "on-demand")  # fmt: skip
    berlin = (datetime(2036, 11, 30, 23, tzinfo=UTC), datetime(2036, 12, 31, 23, tzinfo=UTC))
    invoices = [
        Invoice("research", *DECEMBER, (line,)),
        Invoice("vision", *berlin, (replace(line, tenant="vision"),), zone="Europe/Berlin", draft=True),
    ]
    plain = render(invoices_table(invoices, *DECEMBER, "UTC"), None).text.plain
    assert "2036-12-01 00:00 – 2037-01-01 00:00 UTC" in plain
    assert "2036-12-01 00:00 – 2037-01-01 00:00 Europe/Berlin; draft" in plain
    alone = render(invoices_table(invoices[1:], *berlin, "Europe/Berlin"), None).text.plain
    assert alone.splitlines()[0] == (
        "GPU usage 2036-12-01 00:00 – 2037-01-01 00:00 Europe/Berlin, draft (the month is not closed)"
    )
