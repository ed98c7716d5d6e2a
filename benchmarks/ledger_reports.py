"""Month reports against their own SQL (issue 38): one tenant's month report with late lines, and the
FOCUS export of every tenant's month, each against the floor of running the report's SQL alone.

    python -m benchmarks.ledger_reports                    # 10 million events across 1,000 tenants
    python -m benchmarks.ledger_reports --events 1000000   # a quicker run

On the large ledger of ``benchmarks.ledger`` (generated in SQL), May is closed for every tenant and
``--late`` late events are appended into it (``benchmarks.ledger_late``); then, in the same run:

- *one tenant's report*: what ``parkbrake ledger report --tenant T --month 2036-06 --format
  markdown`` does (usage rows, invoice lines and forecast, the closed May's late lines, the
  markdown), for a random tenant each time, against its floor: the same statements run alone on
  one connection, rows fetched and nothing done with them (the usage rows and invoice lines of the
  month, the tenant's closes, May's invoice lines live, May's billed lines, the tenant's runway for
  the forecast); p50/p99 of each and the ratio floor ÷ report of the medians (target ≥ 0.5; p99 of
  the report ≤ 10 ms at 10 M events);
- *the FOCUS export of every tenant* (``--format focus`` without ``--tenant``), against its floor:
  the month's invoice lines of every tenant, every runway, every close, May's lines live and billed
  for every tenant, each statement run once; the ratio floor ÷ export (target ≥ 0.5).

The load average is printed beside each figure: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

from benchmarks.ledger import (
    NOW,
    fresh_database,
    generate_large_ledger,
    large_layout,
    seed_prices,
)
from benchmarks.ledger_late import CLOSED, OPEN_AFTER, late_event_figures
from guardrails.ledger import to_ms
from lambdas.ledger import queries as sql
from lambdas.ledger.closes import BILLED_FOR, CLOSES, period_window
from lambdas.ledger.store import LedgerStore
from tests.postgres import postgres_url


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def samples_ms(call: Callable[[], object], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return sorted(samples)


def figures(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": statistics.median(samples),
        "p99_ms": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
        "max_ms": samples[-1],
    }


def cli_report(store: LedgerStore, tenants: list[str], *, output: str) -> str:
    """What ``parkbrake ledger report --month OPEN_AFTER [--tenant T] --format OUTPUT`` computes and renders."""
    from cli.usage.invoices import report_invoices
    from guardrails.focus import invoices_focus
    from guardrails.invoice import invoices_markdown

    window = {"since": None, "until": None, "month": OPEN_AFTER, "zone": None}  # as the flags give it
    invoices, _ = report_invoices(store, tenants, window=window, now=NOW)
    return invoices_focus(invoices) if output == "focus" else invoices_markdown(invoices)


def report_floor(store: LedgerStore, tenants: list[str] | None) -> Callable[[], object]:
    """The report's statements alone, rows fetched: ``tenants`` None is every tenant."""
    open_since, open_until = period_window(OPEN_AFTER, "UTC")
    closed_since, closed_until = period_window(CLOSED, "UTC")
    window = {"now_ms": to_ms(NOW), "tenants": tenants}
    own = window | {"since_ms": to_ms(open_since), "until_ms": to_ms(open_until)}
    late = window | {"since_ms": to_ms(closed_since), "until_ms": to_ms(closed_until)}
    every_billed = f"{BILLED_FOR.split(' WHERE ')[0]} WHERE service_period = %s"
    one_billed = BILLED_FOR

    def run() -> object:
        with store.connections.connection() as connection:
            rows: list[Any] = connection.execute(sql.USAGE, own).fetchall()
            rows += connection.execute(sql.INVOICE_LINES, own).fetchall()
            rows += connection.execute(CLOSES, {"tenants": tenants}).fetchall()
            rows += connection.execute(sql.INVOICE_LINES, late).fetchall()
            if tenants is None:
                rows += connection.execute(every_billed, (CLOSED,)).fetchall()
            else:
                rows += connection.execute(one_billed, (tenants[0], CLOSED)).fetchall()
        rows += store.runways(now=NOW, default_cap=timedelta(0), tenants=tenants)
        return rows

    return run


def report_figures(url: str, tenants: int, repeats: int) -> dict[str, Any]:
    store = LedgerStore.connect(url)
    rng = random.Random(38)
    with store.connections.connection() as connection:  # the tenants whose June bills late lines
        rows = connection.execute("SELECT DISTINCT tenant FROM events WHERE event_id LIKE 'bench-late-%'")
        late_tenants = sorted(row[0] for row in rows.fetchall())
    assert late_tenants, "no late events: the benchmark would measure reports without late lines"
    picks = [rng.choice(late_tenants) for _ in range(repeats)]
    # In turn, report then floor, so both see the same drift.
    report_ms: list[float] = []
    floor_ms: list[float] = []
    for tenant in picks:
        report_ms += samples_ms(partial(cli_report, store, [tenant], output="markdown"), 1)
        floor_ms += samples_ms(report_floor(store, [tenant]), 1)
    one: dict[str, Any] = {
        "report": figures(sorted(report_ms)),
        "floor": figures(sorted(floor_ms)),
        "load": load(),
    }
    one["floor_vs_report"] = one["floor"]["p50_ms"] / one["report"]["p50_ms"]
    export_s, export_floor_s = [], []
    for _ in range(3):
        export_s += [value / 1000 for value in samples_ms(lambda: cli_report(store, [], output="focus"), 1)]
        export_floor_s += [value / 1000 for value in samples_ms(report_floor(store, None), 1)]
    export: dict[str, Any] = {
        "export_s": statistics.median(export_s),
        "floor_s": statistics.median(export_floor_s),
        "rows": cli_report(store, [], output="focus").count("\n") - 1,
        "load": load(),
    }
    export["floor_vs_export"] = export["floor_s"] / export["export_s"]
    store.close()
    return {"one_tenant_month_report": one, "focus_export_every_tenant": export}


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"events_requested": args.events, "tenants": args.tenants}
    with postgres_url("parkbrake-bench-pg-") as base_url:
        url = fresh_database(base_url)
        LedgerStore.connect(url).migrate()
        seed_prices(url)
        results["large"] = generate_large_ledger(url, args.events, args.tenants)
        results["large"]["load"] = load()
        late = late_event_figures(url, large_layout(args.events, args.tenants), late=args.late, repeats=20)
        results["late_events"] = late["late_events"]
        results |= report_figures(url, args.tenants, args.repeats)
    return results


def print_text(results: dict[str, Any]) -> None:
    large = results["large"]
    print(
        f"large ledger: {large['events']:,} events, {large['intervals']:,} intervals, {results['tenants']:,} tenants, "
        f"{large['database_mb']:,.0f} MiB (generated in {large['generate_events_s']:.0f} s, rollup built in "
        f"{large['build_intervals_s']:.0f} s; {large['load']}); May closed, {results['late_events']} late events into it"
    )
    one = results["one_tenant_month_report"]
    for name in ("report", "floor"):
        shown = one[name]
        print(f"  one tenant's June, markdown, with late lines: {name:<6} p50 {shown['p50_ms']:7.2f} ms   "
              f"p99 {shown['p99_ms']:7.2f} ms   max {shown['max_ms']:7.2f} ms")  # fmt: skip
    print(
        f"  floor / report (medians): {one['floor_vs_report']:.2f} (target ≥ 0.5; p99 ≤ 10 ms)   {one['load']}"
    )
    export = results["focus_export_every_tenant"]
    print(f"  FOCUS export of every tenant's June ({export['rows']:,} rows): {export['export_s']:.2f} s, its SQL alone "
          f"{export['floor_s']:.2f} s: floor / export {export['floor_vs_export']:.2f} (target ≥ 0.5)   {export['load']}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ledger_reports", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--events", type=int, default=10_000_000, help="events in the large ledger")
    parser.add_argument("--tenants", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=200, help="one-tenant reports to time")
    parser.add_argument("--late", type=int, default=1_000, help="late events into the closed May")
    parser.add_argument("--output", choices=["text", "json"], default="text")
    args = parser.parse_args(argv)
    results = run(args)
    print(json.dumps(results, indent=2) if args.output == "json" else "", end="")
    if args.output == "text":
        print_text(results)


if __name__ == "__main__":
    main()
