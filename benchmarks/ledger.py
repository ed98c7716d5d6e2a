"""Ledger benchmark: ingest throughput, and one tenant's runway query on a large ledger.

    python -m benchmarks.ledger                   # 10 million events across 1,000 tenants
    python -m benchmarks.ledger --events 200000   # a quick run
    python -m benchmarks.ledger --events 0 --load 2   # ingest only, both cores busy with spinners

Measures, on one PostgreSQL server (``PARKBRAKE_DATABASE_URL``, else a throwaway pgserver):
- ingest through ``LedgerStore.append``, in events per second: one event per transaction, alone,
  appended and settled in one call (``settled=True``, as the meter appends: the meter's whole path),
  and each followed by a separate settle call (``LedgerStore.settle``), and the one settle that
  derives the unsettled run's events at once; and in batches queued as ``parkbrake ledger ingest``
  queues them (``LedgerStore.queue_backfill``), then the one ``LedgerStore.settle`` that appends and
  derives the whole backfill (slice after slice: ``ledger_backfill_slice``), and both together;
- the fair ceilings, in the same run on the same server from the same client: the same rows into a
  plain table with the same columns (no keys, indexes or checks), one single-row INSERT per
  transaction, and one COPY of ``--batch-size`` rows per transaction, in rows per second; and
  the storage floor: that COPY into a copy of ``events`` (its keys, indexes and checks), then the
  intervals those events derive to (by the pure reference) inserted into a copy of ``intervals``:
  what storing the ledger's rows costs before any queueing, deriving or rollups. Every figure is
  measured in turn with the ceiling that bounds it (the one-event ways with the single-row INSERT,
  the backfill with the COPY and the storage floor), in ``--rounds`` rounds (default 5) each of a
  share of ``--single`` / ``--batched`` events (benchmarks.rounds): each figure is the median of its
  rounds with their min–max and the load average, a ratio the median of the rounds' ratios, flagged
  when it beats its ceiling (a broken ceiling) or moves with the load. ``--load N`` runs N busy
  processes throughout (load ≥ 2 on the 2-core machine: ``--load 2``);
- the latency of one tenant's runway query (``LedgerStore.runways``) and month report
  (``LedgerStore.usage_rows``) with ``--events`` events generated in SQL (``generate_series``)
  across ``--tenants`` tenants, and of a full exporter read (every tenant);
- closed months (``--late N``, default 1,000; 0 skips): a month closed for every tenant, then N
  late events into it against N in-order ones, and a closed month's report (benchmarks.ledger_late).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from benchmarks.ledger_ceilings import (
    ceiling_rows_per_second,
    meter_floor_rows_per_second,
    storage_floor,
)
from benchmarks.ledger_late import LargeLedger, late_event_figures, print_late
from benchmarks.rounds import (
    Figure,
    Ratio,
    alternate,
    busy_load,
    figure_line,
    per_round_loads,
    ratio,
    warm_up_load,
)
from guardrails.ledger import Attribution, Transition, to_ms
from guardrails.pricing import load_price_table
from lambdas.ledger.store import LedgerStore
from tests.postgres import postgres_url

BENCH_DATABASE = "parkbrake_bench"
TYPES = ("g5.xlarge", "g5.12xlarge", "p4d.24xlarge", "p5.48xlarge")
HOSTS_PER_TENANT = 20
EVENT_SPACING = timedelta(hours=17)  # ~500 events per host cover a year
# In the future, so the benchmark's price change three months back is not in the past (refused).
NOW = datetime(2036, 6, 15, 12, 0, tzinfo=UTC)
CAP = timedelta(minutes=90)
# The one-event ways, each compared with the single-row INSERT ceiling of its round.
SINGLE_WAYS = ("alone", "settled", "then_settled")


def fresh_database(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {BENCH_DATABASE}")
    return make_conninfo(url, dbname=BENCH_DATABASE)


def synthetic_transitions(count: int, prefix: str, hosts: int = 500) -> list[Transition]:
    """Alternating running/stopped events of ``hosts`` hosts, one minute apart."""
    prices = load_price_table()
    start = to_ms(NOW - timedelta(days=30))
    transitions = []
    for n in range(count):
        host, step = n % hosts, n // hosts
        instance_type = TYPES[host % len(TYPES)]
        who = Attribution(f"tenant-{host % 50}", "training", instance_type,
                          prices.instance(instance_type).accelerators, int(CAP.total_seconds() * 1000),
                          "us-east-1")  # fmt: skip
        state = "running" if step % 2 == 0 else "stopped"
        transitions.append(
            Transition(f"{prefix}-{n}", f"{prefix}-i-{host}", state, start + step * 60_000, who)
        )
    return transitions


@dataclass(frozen=True)
class IngestRates:
    """Events per second: appended, settled by the one settle after the last append, and both."""

    appended: float
    settled: float
    whole: float


def ingest_rate(
    store: LedgerStore,
    transitions: list[Transition],
    batch_size: int,
    append: Callable[[list[Transition]], object],
    *,
    settle: bool,
) -> IngestRates:
    """``append`` of ``transitions`` in batches (with ``settle``: each followed by a settle), then
    the one settle that derives what was left pending; each rate from its own timed run."""
    started = time.perf_counter()
    for start in range(0, len(transitions), batch_size):
        append(transitions[start : start + batch_size])
        if settle:
            store.settle()
    appending = time.perf_counter() - started
    started = time.perf_counter()
    pending = store.settle()
    settling = time.perf_counter() - started
    return IngestRates(
        len(transitions) / appending, pending / settling, len(transitions) / (appending + settling)
    )


def seed_prices(url: str) -> None:
    """The benchmark types' on-demand prices, in effect since always, and a p4d.24xlarge price change
    three months back: appends and queries price what they bill, as in production."""
    prices = load_price_table()
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO prices (instance_type, region, pricing_model, zone, valid_from, usd_per_hour, source) "
            "SELECT t, 'us-east-1', 'on-demand', '', '-infinity', p, 'bench' "
            "FROM unnest(%s::text[], %s::numeric[]) AS seed (t, p)",
            (list(TYPES), [prices.instance(name).usd_per_hour for name in TYPES]),
        )
        connection.execute(  # a price change: queries split intervals on it
            "INSERT INTO prices (instance_type, region, pricing_model, zone, valid_from, usd_per_hour, source) "
            "VALUES (%s, 'us-east-1', 'on-demand', '', %s, %s, 'bench')",
            (
                "p4d.24xlarge",
                NOW - timedelta(days=90),
                prices.instance("p4d.24xlarge").usd_per_hour * Decimal("0.9"),
            ),
        )


def generate_large_ledger(url: str, events: int, tenants: int) -> dict[str, float]:
    """``events`` transitions across ``tenants`` tenants' hosts, written by SQL, then the rollup."""
    hosts = tenants * HOSTS_PER_TENANT
    per_host = max(2, events // hosts)
    prices = load_price_table()
    start = NOW - EVENT_SPACING * per_host
    timings = {}
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("SET work_mem = '256MB'")
        connection.execute("SET maintenance_work_mem = '512MB'")
        connection.execute(
            "INSERT INTO tenants (tenant, actions) SELECT 'tenant-' || n, '{notify,deny,stop}' "
            "FROM generate_series(0, %s - 1) AS n",
            (tenants,),
        )
        connection.execute(
            "INSERT INTO budgets (tenant, period, limit_usd) SELECT tenant, 'month', 50000 FROM tenants"
        )
        started = time.perf_counter()
        # Host h alternates running/stopped every EVENT_SPACING; one host in ten never reports its
        # last stop, so it is running now.
        connection.execute(
            """
            INSERT INTO events (event_id, instance_id, state, event_time, tenant, pool, instance_type,
                                accelerators, cap_ms, region, source, received_at, at_ms, state_rank)
            SELECT event_id, instance_id, state, event_time, tenant, pool, instance_type, accelerators,
                   cap_ms, region, source, received_at, ledger_ms(event_time), ledger_state_rank(state)
            FROM (
                SELECT 'bench-' || n AS event_id,
                       'i-' || lpad(to_hex(n %% %(hosts)s), 8, '0') AS instance_id,
                       CASE WHEN (n / %(hosts)s) %% 2 = 0 THEN 'running' ELSE 'stopped' END AS state,
                       %(start)s::timestamptz + (n / %(hosts)s) * %(spacing)s::interval
                           + (n %% %(hosts)s) * interval '1 second' AS event_time,
                       'tenant-' || ((n %% %(hosts)s) %% %(tenants)s) AS tenant,
                       CASE WHEN (n %% %(hosts)s) %% 2 = 0 THEN 'training' ELSE 'inference' END AS pool,
                       (%(types)s::text[])[1 + (n %% %(hosts)s) %% 4] AS instance_type,
                       (%(accelerators)s::int[])[1 + (n %% %(hosts)s) %% 4] AS accelerators,
                       5400000 AS cap_ms, 'us-east-1' AS region, 'bench' AS source,
                       %(start)s::timestamptz AS received_at
                FROM generate_series(0, %(hosts)s::bigint * %(per_host)s - 1) AS n
                WHERE NOT (n / %(hosts)s = %(per_host)s - 1 AND (n %% %(hosts)s) %% 10 = 0)
            ) AS generated
            """,
            {
                "hosts": hosts,
                "per_host": per_host,
                "tenants": tenants,
                "start": start,
                "spacing": EVENT_SPACING,
                "types": list(TYPES),
                "accelerators": [prices.instance(name).accelerators for name in TYPES],
            },
        )
        timings["generate_events_s"] = time.perf_counter() - started
        started = time.perf_counter()
        connection.execute("SELECT ledger_rebuild()")
        timings["build_intervals_s"] = time.perf_counter() - started
        connection.execute("VACUUM ANALYZE")
        counts = connection.execute("SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM intervals)")
        events_total, intervals_total = counts.fetchone() or (0, 0)
        size = connection.execute("SELECT pg_database_size(current_database())").fetchone()
    timings |= {
        "events": events_total,
        "intervals": intervals_total,
        "database_mb": (size or (0,))[0] / 2**20,
    }
    return timings


def large_layout(events: int, tenants: int) -> LargeLedger:
    """Where generate_large_ledger put each host's events (the late-event figures need them)."""
    prices = load_price_table()
    hosts = tenants * HOSTS_PER_TENANT
    per_host = max(2, events // hosts)
    return LargeLedger(
        tenants, hosts, per_host, NOW - EVENT_SPACING * per_host, EVENT_SPACING, TYPES,
        [prices.instance(name).accelerators for name in TYPES], int(CAP.total_seconds() * 1000), NOW,
    )  # fmt: skip


def latencies_ms(call: Callable[[], object], repeats: int) -> dict[str, float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {
        "p50_ms": statistics.median(samples),
        "p95_ms": samples[min(len(samples) - 1, int(len(samples) * 0.95))],
        "p99_ms": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
        "max_ms": samples[-1],
    }


def query_latencies(url: str, tenants: int, repeats: int) -> dict[str, Any]:
    store = LedgerStore.connect(url)
    rng = random.Random(7)
    month = NOW.replace(day=1, hour=0, minute=0)
    picks = iter([f"tenant-{rng.randrange(tenants)}" for _ in range(repeats * 2)])
    one_tenant = latencies_ms(lambda: store.runways(now=NOW, default_cap=CAP, tenants=[next(picks)]), repeats)
    report = latencies_ms(lambda: store.usage_rows(now=NOW, since=month, tenants=[next(picks)]), repeats)
    scrape = latencies_ms(
        lambda: (store.usage_totals(now=NOW), store.runways(now=NOW, default_cap=CAP)), max(1, repeats // 20)
    )
    store.close()
    return {
        "runway_one_tenant": one_tenant,
        "month_report_one_tenant": report,
        "exporter_all_tenants": scrape,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"events_requested": args.events, "tenants": args.tenants, "load": args.load}
    with postgres_url("parkbrake-bench-pg-") as base_url, busy_load(args.load):
        warm_up_load(args.load)
        url = fresh_database(base_url)
        store = LedgerStore.connect(url)
        store.migrate()
        seed_prices(url)
        results["single"] = single_event_rounds(store, url, args)
        results["batched"] = batched_rounds(store, url, args)
        store.close()
        if args.events:
            large_url = fresh_database(base_url)
            LedgerStore.connect(large_url).migrate()
            seed_prices(large_url)
            results["large"] = generate_large_ledger(large_url, args.events, args.tenants)
            results["large"] |= query_latencies(large_url, args.tenants, args.repeats)
            if args.late:
                results["large"]["closed_months"] = late_event_figures(
                    large_url, large_layout(args.events, args.tenants), late=args.late, repeats=args.repeats
                )
    return results


def single_event_rounds(store: LedgerStore, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """One event per transaction, each way and the single-row INSERT ceiling in turn, round by round
    (a commit's cost drifts over a run: a ratio of rates measured minutes apart measured the drift)."""
    part = max(1, args.single // args.rounds)
    hosts = max(1, part * 500 // args.single)  # six events a host in all, as one run of 3,000 had
    one_settle = Figure()

    def alone(number: int) -> float:
        rates = ingest_rate(store, synthetic_transitions(part, f"single-r{number}", hosts), 1, _meter(store),
                            settle=False)  # fmt: skip
        one_settle.add(rates.settled)
        return rates.appended

    def settled(number: int) -> float:  # as the meter appends: settled in the same call
        events = synthetic_transitions(part, f"settled-r{number}", hosts)
        return ingest_rate(store, events, 1, _meter(store, settled=True), settle=False).whole

    def then_settled(number: int) -> float:
        events = synthetic_transitions(part, f"then-r{number}", hosts)
        return ingest_rate(store, events, 1, _meter(store), settle=True).appended

    def ceiling(number: int) -> float:
        return ceiling_rows_per_second(url, synthetic_transitions(part, f"ceiling-r{number}", hosts), 1, NOW)

    def meter_floor(number: int) -> float:
        return meter_floor_rows_per_second(url, synthetic_transitions(part, f"floor-r{number}", hosts), NOW)

    # The same two without waiting for the commit's WAL flush: what is left is the round trip and
    # the server's work (CPU), which other processes on the cores slow and the flush does not.
    def settled_unflushed(number: int) -> float:
        events = synthetic_transitions(part, f"unflushed-r{number}", hosts)
        with unflushed_commits(store):
            return ingest_rate(store, events, 1, _meter(store, settled=True), settle=False).whole

    def ceiling_unflushed(number: int) -> float:
        events = synthetic_transitions(part, f"ceiling-unflushed-r{number}", hosts)
        return ceiling_rows_per_second(url, events, 1, NOW, flushed=False)

    counted = meter_round_trips(store, synthetic_transitions(100, "counted", hosts))
    ways = {"alone": alone, "settled": settled, "then_settled": then_settled, "ceiling": ceiling}
    unflushed = {"settled_unflushed": settled_unflushed, "ceiling_unflushed": ceiling_unflushed}
    figures = alternate(ways | {"meter_floor": meter_floor} | unflushed, args.rounds)
    figures["one_settle"] = one_settle
    ratios = {name: ratio(figures[name], figures["ceiling"]) for name in (*SINGLE_WAYS, "meter_floor")}
    ratios["settled_vs_floor"] = ratio(figures["settled"], figures["meter_floor"])
    return {"figures": figures, "round_trips": counted, "ratios": ratios}


@contextmanager
def unflushed_commits(store: LedgerStore) -> Iterator[None]:
    """The store's commits not waiting for their WAL flush while the block runs."""
    with store.connections.connection() as connection:
        connection.execute("SET synchronous_commit = off")
    try:
        yield
    finally:
        with store.connections.connection() as connection:
            connection.execute("RESET synchronous_commit")


@dataclass(frozen=True)
class RoundTrips:
    """Per event of the meter's whole path, counted rather than timed."""

    round_trips: float  # the client's waits for the server (ReadyForQuery, from libpq's protocol trace)
    write_transactions: float  # transaction ids the server assigned (commits that wrote)


def meter_round_trips(store: LedgerStore, transitions: list[Transition]) -> RoundTrips:
    """Append ``transitions`` one by one as the meter does (settled in the call), counting round trips
    in the client's protocol trace and write transactions by the server's next transaction id."""
    append = _meter(store, settled=True)
    with store.connections.connection() as connection, tempfile.TemporaryFile("w+") as trace:
        next_xid = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"  # assigns no id itself
        (before,) = connection.execute(next_xid).fetchone() or (0,)
        connection.pgconn.trace(trace.fileno())
        connection.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        for transition in transitions:
            append([transition])
        connection.pgconn.untrace()
        (after,) = connection.execute(next_xid).fetchone() or (0,)
        trace.seek(0)
        waits = sum(1 for line in trace if "\tReadyForQuery" in line and line.startswith("B"))
    return RoundTrips(waits / len(transitions), (after - before) / len(transitions))


def flush_split(figures: dict[str, Figure]) -> str:
    """Per event, the meter's whole path and the single-row INSERT with and without waiting for the
    commit's flush (medians): the meter's path reaches 0.5 of the INSERT only when its work beyond
    the INSERT's (the unflushed difference) costs no more than one whole INSERT."""
    meter, insert = 1000 / figures["settled"].median, 1000 / figures["ceiling"].median
    meter_work, insert_work = (
        1000 / figures["settled_unflushed"].median,
        1000 / figures["ceiling_unflushed"].median,
    )
    return (f"per event: the meter's whole path {meter:.2f} ms ({meter_work:.2f} without waiting for the commit's flush), "
            f"the single-row INSERT {insert:.2f} ms ({insert_work:.2f}); the meter's work beyond the INSERT's "
            f"{meter_work - insert_work:.2f} ms against the {insert:.2f} ms it may cost for a ratio of 0.5 "
            f"(load {figures['settled_unflushed'].load_range()})")  # fmt: skip


def _meter(store: LedgerStore, *, settled: bool = False) -> Callable[[list[Transition]], object]:
    def append(batch: list[Transition]) -> object:
        return store.append(batch, source="meter", received_at=NOW, settled=settled)

    return append


def batched_rounds(store: LedgerStore, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The backfill (queued as ``parkbrake ledger ingest`` queues a batch, then settled), the COPY
    ceiling and the storage floor in turn, round by round, each round on its own events."""
    part = max(args.batch_size, args.batched // args.rounds)
    settle_rates, whole, events_table = Figure(), Figure(), Figure()

    def backfill(number: int) -> float:
        def queue(batch: list[Transition]) -> None:
            store.queue_backfill(batch, received_at=NOW)

        rates = ingest_rate(store, synthetic_transitions(part, f"batched-r{number}"), args.batch_size, queue,
                            settle=False)  # fmt: skip
        settle_rates.add(rates.settled)
        whole.add(rates.whole)
        return rates.appended

    def ceiling(number: int) -> float:
        return ceiling_rows_per_second(
            url, synthetic_transitions(part, f"copy-r{number}"), args.batch_size, NOW
        )

    def floor(number: int) -> float:
        measured = storage_floor(url, synthetic_transitions(part, f"floor-r{number}"), args.batch_size, NOW)
        events_table.add(measured.events_table_rows_per_s)
        return measured.floor_events_per_s

    figures = alternate({"queued": backfill, "ceiling": ceiling, "floor": floor}, args.rounds)
    figures |= {"settle": settle_rates, "whole": whole, "events_table": events_table}
    copy = figures["ceiling"]
    return {
        "figures": figures,
        "ratios": {
            "queued_vs_ceiling": ratio(figures["queued"], copy),
            "whole_vs_ceiling": ratio(whole, copy),
            "events_table_vs_ceiling": ratio(events_table, copy),
            "floor_vs_ceiling": ratio(figures["floor"], copy),
            "whole_vs_floor": ratio(whole, figures["floor"]),
        },
    }


def print_text(results: dict[str, Any], batch_size: int) -> None:
    single, batched = results["single"], results["batched"]
    figures, ratios = single["figures"], single["ratios"]
    print(f"each figure: the median of its rounds [min–max, one-minute load average over them]; "
          f"a ratio: the median of the rounds' ratios (--load {results['load']} busy processes)")  # fmt: skip
    print(figure_line("ingest, one event per transaction", figures["alone"], "events/s", ratios["alone"]))
    print(figure_line("  appended and settled in one call (the meter's whole path)", figures["settled"],
                      "events/s", ratios["settled"]))  # fmt: skip
    print(figure_line("  each followed by a settle call", figures["then_settled"], "events/s",
                      ratios["then_settled"]))  # fmt: skip
    print(figure_line("  the unsettled run, derived by one settle", figures["one_settle"], "events/s"))
    print(figure_line("  ceiling: single-row INSERT, same columns", figures["ceiling"], "rows/s"))
    print(figure_line("  the meter's floor: its event and interval stored, one statement", figures["meter_floor"],
                      "events/s", ratios["meter_floor"]))  # fmt: skip
    print(f"  the meter's whole path against its floor: {ratios['settled_vs_floor'].text()}")
    print(f"  {flush_split(figures)}")
    counted = single["round_trips"]
    print(f"  the meter's whole path per event: {counted.round_trips:.2f} round trips, "
          f"{counted.write_transactions:.2f} write transactions (its floor and the ceiling: 1 and 1)")  # fmt: skip
    print(f"  {per_round_loads(figures)}")
    figures, ratios = batched["figures"], batched["ratios"]
    print(figure_line(f"ingest, batches of {batch_size} queued as a backfill", figures["queued"], "events/s",
                      ratios["queued_vs_ceiling"]))  # fmt: skip
    print(figure_line("  the backfill appended and derived by one settle", figures["settle"], "events/s"))
    print(figure_line("  the whole backfill, queued and settled", figures["whole"], "events/s",
                      ratios["whole_vs_ceiling"]))  # fmt: skip
    print(figure_line(f"  ceiling: COPY of {batch_size} rows, same columns", figures["ceiling"], "rows/s"))
    print(figure_line("  that COPY into a copy of events (its keys, checks)", figures["events_table"], "rows/s",
                      ratios["events_table_vs_ceiling"]))  # fmt: skip
    print(figure_line("  storage floor: and its intervals into a copy of intervals", figures["floor"],
                      "events/s", ratios["floor_vs_ceiling"]))  # fmt: skip
    print(f"  the whole backfill against the storage floor: {ratios['whole_vs_floor'].text()}")
    print(f"  {per_round_loads(figures)}")
    if "large" not in results:
        return
    large = results["large"]
    print(f"large ledger: {large['events']:,} events, {large['intervals']:,} intervals, {results['tenants']:,} "
          f"tenants, {large['database_mb']:,.0f} MiB (generated in {large['generate_events_s']:.0f} s, "
          f"rollup built in {large['build_intervals_s']:.0f} s)")  # fmt: skip
    for name in ("runway_one_tenant", "month_report_one_tenant", "exporter_all_tenants"):
        latency = large[name]
        print(f"  {name:<26} p50 {latency['p50_ms']:8.2f} ms   p95 {latency['p95_ms']:8.2f} ms"
              f"   p99 {latency['p99_ms']:8.2f} ms   max {latency['max_ms']:8.2f} ms")  # fmt: skip
    if "closed_months" in large:
        print_late(large["closed_months"])


def _summary(value: object) -> Any:
    if isinstance(value, Figure | Ratio):
        return value.summary()
    if isinstance(value, RoundTrips):
        return {"round_trips": value.round_trips, "write_transactions": value.write_transactions}
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ledger", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--events", type=int, default=10_000_000, help="events in the large ledger (0: skip it)"
    )
    parser.add_argument("--tenants", type=int, default=1_000)
    parser.add_argument("--single", type=int, default=3_000, help="events appended one per transaction")
    parser.add_argument("--batched", type=int, default=100_000, help="events appended in batches")
    parser.add_argument("--batch-size", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=200, help="runway queries to time")
    parser.add_argument("--late", type=int, default=1_000, help="late events into a closed month (0: skip)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each way in turn (medians of them)")
    parser.add_argument("--load", type=int, default=0, help="busy processes spinning through the run")
    parser.add_argument("--output", choices=["text", "json"], default="text")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.load < 0:
        parser.error("--rounds must be at least 1 and --load at least 0")
    results = run(args)
    if args.output == "json":
        print(json.dumps(results, indent=2, default=_summary))
    else:
        print_text(results, args.batch_size)


if __name__ == "__main__":
    main()
