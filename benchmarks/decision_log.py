"""Decision log benchmark: what logging a sweep's decisions costs, and `parkbrake log`'s reads on a
large log.

    python -m benchmarks.decision_log                      # 2 million decisions already logged
    python -m benchmarks.decision_log --decisions 200000   # a quick run

On one PostgreSQL server (``PARKBRAKE_DATABASE_URL``, else a throwaway pgserver), with
``--decisions`` rows generated in SQL (``generate_series``: ``--hosts`` hosts, one decision each per
five-minute sweep, newest last), measures:
- one sweep's decisions appended through ``DecisionLedger.append`` (one call per sweep, as the
  reaper and the meter append), and the same sweep appended again (a retried invocation: every key
  a duplicate), in milliseconds;
- ``DecisionLedger.read`` as ``parkbrake log`` runs it: one host's decisions, one tenant's of the
  last seven days, and the newest 200 overall, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from guardrails.decisions import Decision
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore
from tests.postgres import postgres_url

BENCH_DATABASE = "parkbrake_bench_decisions"
NOW = datetime(2036, 6, 15, 12, 0, tzinfo=UTC)
SWEEP_EVERY = timedelta(minutes=5)
TENANTS = 50

HISTORY = """
INSERT INTO decisions (decision_key, at, kind, actor, instance_id, tenant, reason, details)
SELECT 'history-' || n, %(now)s::timestamptz - (%(total)s - n) / %(hosts)s * interval '5 minutes',
       CASE WHEN n %% 97 = 0 THEN 'stop' ELSE 'skip' END, 'reaper', 'i-' || lpad((n %% %(hosts)s)::text, 17, '0'),
       'tenant-' || (n %% %(hosts)s %% %(tenants)s),
       'within its 8h cap (pool): due at 2036-06-15T20:00:00Z, in 3h12m',
       '{"rule": "past-deadline", "state": "running"}'::jsonb
FROM generate_series(1, %(total)s) AS n
"""


def fresh_database(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {BENCH_DATABASE}")
    return make_conninfo(url, dbname=BENCH_DATABASE)


def sweep(hosts: int, at: datetime) -> list[Decision]:
    """One full sweep's decisions: a verdict per running host, a stop now and then."""
    return [
        Decision(
            "stop" if host % 97 == 0 else "skip",
            "reaper",
            "within its 8h cap (pool): due at 2036-06-15T20:00:00Z, in 3h12m",
            at,
            f"i-{host:017d}",
            f"tenant-{host % TENANTS}",
            {"rule": "past-deadline", "state": "running"},
        )
        for host in range(hosts)
    ]


def median_ms(run: Callable[[], Any], rounds: int) -> float:
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        timings.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(timings), 2)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--decisions", type=int, default=2_000_000, help="decisions logged before measuring")
    parser.add_argument("--hosts", type=int, default=1_000, help="running hosts per sweep")
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    with postgres_url() as server:
        url = fresh_database(server)
        store = LedgerStore.connect(url)
        store.migrate()
        started = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as owner:
            owner.execute(
                HISTORY, {"now": NOW, "total": options.decisions, "hosts": options.hosts, "tenants": TENANTS}
            )
            owner.execute("ANALYZE decisions")
        filled_s = time.perf_counter() - started
        log = DecisionLedger.of(store)
        sweeps = iter(range(1, 10_000))

        def append_new_sweep() -> None:
            log.append(sweep(options.hosts, NOW), origin=f"sweep-{next(sweeps)}")

        def append_retried_sweep() -> None:
            log.append(sweep(options.hosts, NOW), origin="sweep-1")

        figures = {
            "decisions_logged": options.decisions,
            "hosts_per_sweep": options.hosts,
            "history_generated_s": round(filled_s, 1),
            "append_one_sweep_ms": median_ms(append_new_sweep, options.rounds),
            "append_retried_sweep_ms": median_ms(append_retried_sweep, options.rounds),
            "read_one_host_ms": median_ms(lambda: log.read(instance_id=f"i-{7:017d}"), options.rounds),
            "read_one_tenant_7d_ms": median_ms(
                lambda: log.read(tenant="tenant-7", since=NOW - timedelta(days=7)), options.rounds
            ),
            "read_newest_200_ms": median_ms(lambda: log.read(limit=200), options.rounds),
        }
        store.close()
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
