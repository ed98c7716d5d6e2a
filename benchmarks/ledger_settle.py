"""Ledger settle benchmark: a backfill's settle at 1k, 10k and 100k events per host, attributed and
unattributed, and the meter's append latency while a large unattributed backfill settles.

    python -m benchmarks.ledger_settle                       # 3 hosts × 1k, 10k, 100k; meter p99 during 100k
    python -m benchmarks.ledger_settle --sizes 1000 10000    # a quick run

Measures, on one PostgreSQL server (``PARKBRAKE_DATABASE_URL``, else a throwaway pgserver), each in a
fresh ledger database:
- the settle of a backfill of ``--hosts`` hosts × N events (alternating running/stopped a minute
  apart) queued as ``parkbrake ledger ingest`` queues it (``LedgerStore.queue_backfill``), then
  settled slice by slice (``LedgerStore.settle``): seconds, and microseconds per event, which stays
  flat as N grows when the settle is O(n log n) (it grew with N: the square of a host's
  unattributed events, 337 s for 3 × 4,000), and its ratio to the same events attributed, the
  baseline settled in the same run. Attributed events carry a tenant; unattributed ones
  carry ``unattributed``, and half of each unattributed host's launches have one attributed event
  (the launch's attribution found for the others), the mix of a backfill of untagged hosts;
- the meter's append (``LedgerStore.append(..., settled=True)``, one event of a tagged host, its
  whole path) in a loop while ``--backfill`` unattributed events settle in another connection:
  p50, p99 and max in milliseconds, beside the same appends with nothing settling (the baseline,
  measured in the same run).
The load average is printed beside each figure: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from guardrails.ledger import UNATTRIBUTED, Attribution, Transition, to_ms
from guardrails.pricing import load_price_table
from lambdas.ledger.store import LedgerStore
from tests.postgres import postgres_url

BENCH_DATABASE = "parkbrake_bench_settle"
START = datetime(2026, 1, 1, tzinfo=UTC)
RECEIVED = START + timedelta(days=400)
KNOWN = Attribution("research", "training", "g5.xlarge", 1, 5_400_000, "us-east-1")
UNKNOWN = Attribution(UNATTRIBUTED, UNATTRIBUTED, "g5.xlarge", 1, 5_400_000, "us-east-1")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def fresh_store(url: str) -> LedgerStore:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {BENCH_DATABASE}")
    store = LedgerStore.connect(make_conninfo(url, dbname=BENCH_DATABASE))
    store.migrate()
    store.sync_prices(load_price_table(), source="bench")
    return store


def backfill(hosts: int, per_host: int, *, unattributed: bool, prefix: str = "b") -> list[Transition]:
    """Alternating running/stopped events a minute apart; unattributed: every event of tenant
    ``unattributed`` but the stop of every other launch."""
    start = to_ms(START)
    events = []
    for host in range(hosts):
        for n in range(per_host):
            state = "running" if n % 2 == 0 else "stopped"
            who = UNKNOWN if unattributed and not (state == "stopped" and n % 4 == 3) else KNOWN
            events.append(
                Transition(f"{prefix}-{host}-{n}", f"i-{prefix}-{host}", state, start + n * 60_000, who)
            )
    return events


def settle_figure(url: str, hosts: int, per_host: int, *, unattributed: bool) -> dict[str, Any]:
    store = fresh_store(url)
    try:
        events = backfill(hosts, per_host, unattributed=unattributed)
        for first in range(0, len(events), 10_000):
            store.queue_backfill(events[first : first + 10_000], received_at=RECEIVED)
        started = time.perf_counter()
        derived = store.settle()
        seconds = time.perf_counter() - started
    finally:
        store.close()
    return {"events": derived, "seconds": round(seconds, 3),
            "us_per_event": round(seconds / max(derived, 1) * 1e6, 1), "load": load()}  # fmt: skip


def meter_latencies_ms(
    store: LedgerStore, count: int, stop: threading.Event | None, offset: int
) -> list[float]:
    """One settled append per event of one tagged host, timed each; until ``stop`` is set (at least
    ``count``), or ``count`` of them."""
    latencies = []
    base = to_ms(START + timedelta(days=300))
    n = 0
    while n < count or (stop is not None and not stop.is_set()):
        event = Transition(f"m-{offset}-{n}", f"i-meter-{offset}", "running" if n % 2 == 0 else "stopped",
                           base + n * 1_000, KNOWN)  # fmt: skip
        started = time.perf_counter()
        store.append([event], source="meter", received_at=RECEIVED, settled=True)
        latencies.append((time.perf_counter() - started) * 1000)
        n += 1
        time.sleep(0.005)
    return latencies


def summary(latencies: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies)
    return {"appends": len(ordered), "p50_ms": round(statistics.median(ordered), 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
            "max_ms": round(ordered[-1], 2), "load": load()}  # fmt: skip


def meter_during_backfill(url: str, hosts: int, events: int) -> dict[str, Any]:
    store = fresh_store(url)
    settler = LedgerStore.connect(make_conninfo(url, dbname=BENCH_DATABASE))
    try:
        baseline = summary(meter_latencies_ms(store, 200, None, 0))
        queued = backfill(hosts, events // hosts, unattributed=True)
        for first in range(0, len(queued), 10_000):
            store.queue_backfill(queued[first : first + 10_000], received_at=RECEIVED)
        done, settle_seconds = threading.Event(), [0.0]

        def settle() -> None:
            started = time.perf_counter()
            settler.settle()
            settle_seconds[0] = time.perf_counter() - started
            done.set()

        thread = threading.Thread(target=settle)
        thread.start()
        during = summary(meter_latencies_ms(store, 1, done, 1))
        thread.join()
    finally:
        settler.close()
        store.close()
    return {"backfill_events": len(queued), "backfill_settle_s": round(settle_seconds[0], 2),
            "baseline": baseline, "during_backfill": during}  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    with postgres_url() as url:
        settles = [
            {"per_host": per_host, "kind": kind}
            | settle_figure(url, args.hosts, per_host, unattributed=kind == "unattributed")
            for per_host in args.sizes
            for kind in ("attributed", "unattributed")
        ]
        attributed = {f["per_host"]: f["us_per_event"] for f in settles if f["kind"] == "attributed"}
        for figure in settles:  # the baseline: the same events attributed, settled in the same run
            figure["vs_attributed"] = round(figure["us_per_event"] / attributed[figure["per_host"]], 2)
            print(f"settle {args.hosts} hosts × {figure['per_host']:>7,} {figure['kind']:<12} "
                  f"{figure['events']:>8,} events {figure['seconds']:>8.2f} s "
                  f"{figure['us_per_event']:>6.1f} µs/event  {figure['vs_attributed']:>5.2f}× attributed  "
                  f"({figure['load']})", flush=True)  # fmt: skip
        meter = meter_during_backfill(url, args.hosts, args.backfill) if args.backfill else None
    if meter:
        for name in ("baseline", "during_backfill"):
            figure = meter[name]
            print(f"meter append {name:<16} {figure['appends']:>5} appends p50 {figure['p50_ms']:>7.2f} ms "
                  f"p99 {figure['p99_ms']:>7.2f} ms max {figure['max_ms']:>7.2f} ms  ({figure['load']})")  # fmt: skip
        print(f"(the backfill of {meter['backfill_events']:,} unattributed events settled in "
              f"{meter['backfill_settle_s']} s meanwhile)")  # fmt: skip
    return {"settles": settles, "meter": meter}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000, 10_000, 100_000],
                        help="Events per host, each size a settle of its own.")  # fmt: skip
    parser.add_argument("--backfill", type=int, default=100_000,
                        help="Unattributed events settling while the meter appends (0 skips).")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON as well.")
    args = parser.parse_args(argv)
    results = run(args)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
