"""`parkbrake log --account` on the hub's decision log: 1k, 10k and 100k decisions, with and without
the index on the account (migration 0028, ``decisions_by_account``).

    python -m benchmarks.log_accounts               # 1k, 10k, 100k decisions, 7 rounds each
    python -m benchmarks.log_accounts --rounds 3

On one PostgreSQL server (``PARKBRAKE_DATABASE_URL``, else a throwaway pgserver), for each size the
decisions are generated in SQL as the central sweep writes them: 20 member accounts, a decision per
host per sweep, each with its host's account in ``details.account_id``; one account in a hundred
decisions names none (the hub's own guardrails), and one account, ``rare``, has 1 decision in
1,000. Measured, in milliseconds (median over ``--rounds``), with the one-minute load average beside
each figure (a shared machine):

- ``parkbrake log --account ID --output json`` run in-process (click's runner: the command's
  own connection, query and JSON), for a common account (5 % of the decisions) and the rare one;
- the same read by ``DecisionLedger.read`` alone (what the command's query costs);
- each again after ``DROP INDEX decisions_by_account``: the read without the index;

and the plan's first scan (EXPLAIN) for the rare account, with and without it. Not part of the tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
from click.testing import CliRunner
from psycopg.conninfo import make_conninfo

from lambdas.ledger.decisions import SELECT, DecisionLedger
from lambdas.ledger.store import LedgerStore
from tests.postgres import postgres_url

BENCH_DATABASE = "parkbrake_bench_log_accounts"
NOW = datetime(2036, 6, 15, 12, 0, tzinfo=UTC)
SIZES = (1_000, 10_000, 100_000)
MEMBERS = 20
COMMON = f"{100_000_000_001:012d}"  # member 1 of 20: 5 % of the decisions
RARE = "999999999999"  # 1 decision in 1,000

HISTORY = """
INSERT INTO decisions (decision_key, at, kind, actor, instance_id, tenant, reason, details)
SELECT 'history-' || n, %(now)s::timestamptz - (%(total)s - n) * interval '3 seconds',
       CASE WHEN n %% 97 = 0 THEN 'stop' ELSE 'skip' END, 'reaper', 'i-' || lpad((n %% 1000)::text, 17, '0'),
       'tenant-' || (n %% 50), 'within its 8h cap (pool): due at 2036-06-15T20:00:00Z, in 3h12m',
       CASE WHEN n %% 1000 = 500 THEN jsonb_build_object('rule', 'past-deadline', 'account_id', %(rare)s::text)
            WHEN n %% 100 = 0 THEN '{"rule": "past-deadline"}'::jsonb
            ELSE jsonb_build_object('rule', 'past-deadline',
                                    'account_id', lpad((100000000000 + n %% %(members)s)::text, 12, '0'))
       END
FROM generate_series(1, %(total)s) AS n
"""


def fresh_database(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {BENCH_DATABASE}")
    return make_conninfo(url, dbname=BENCH_DATABASE)


def median_ms(run: Callable[[], Any], rounds: int) -> tuple[float, float]:
    """The median of ``rounds`` runs in milliseconds, and the one-minute load average after them."""
    run()  # warm: the first connection, the imports, the plan cache
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        timings.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(timings), 2), os.getloadavg()[0]


def first_scan(url: str, account: str) -> str:
    """The plan's innermost scan of the read for ``account`` (EXPLAIN, the command's own query)."""
    parameters = {"instance_id": None, "tenant": None, "since": None, "kinds": None,
                  "accounts": [account], "limit": 200}  # fmt: skip
    with psycopg.connect(url) as connection:
        lines = [row[0] for row in connection.execute("EXPLAIN " + SELECT, parameters).fetchall()]
    scans = [line.strip().removeprefix("->").strip() for line in lines if "Scan" in line]
    return scans[-1].split("  (")[0] if scans else "?"


def measure(url: str, rounds: int) -> list[tuple[str, float, float]]:
    """Every figure of one size, as (what, milliseconds, load average)."""
    from cli.main import parkbrake

    store = LedgerStore.connect(url)
    log = DecisionLedger.of(store)
    runner = CliRunner()
    rows = []
    for label, account in (("common", COMMON), ("rare", RARE)):

        def command(account: str = account) -> None:
            result = runner.invoke(parkbrake, ["log", "--account", account, "--output", "json"])
            assert result.exit_code == 0, result.output

        rows.append((f"log --account ({label})", *median_ms(command, rounds)))
        rows.append(
            (f"  its read alone ({label})", *median_ms(lambda a=account: log.read(accounts=[a]), rounds))
        )
    store.close()
    return rows


def one_size(server: str, total: int, rounds: int) -> None:
    url = fresh_database(server)
    store = LedgerStore.connect(url)
    store.migrate()
    store.close()
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute(HISTORY, {"now": NOW, "total": total, "members": MEMBERS, "rare": RARE})
        # As a log some hours old is: its rows' hint bits set, so no first read pays for writing them.
        owner.execute("VACUUM (ANALYZE) decisions")
    os.environ["PARKBRAKE_DATABASE_URL"] = url
    print(f"{total:,} decisions, {MEMBERS} member accounts; median ms over {rounds} rounds (load 1m)")
    indexed, plan_with = measure(url, rounds), first_scan(url, RARE)
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute("DROP INDEX decisions_by_account")
        owner.execute("VACUUM (ANALYZE) decisions")
    scanned, plan_without = measure(url, rounds), first_scan(url, RARE)
    for (what, with_ms, with_load), (_, without_ms, without_load) in zip(indexed, scanned, strict=True):
        print(
            f"  {what:<28} index {with_ms:>8.2f} (load {with_load:5.2f})"
            f"  none {without_ms:>8.2f} (load {without_load:5.2f})"
        )
    print(f"  plan (rare), index: {plan_with}")
    print(f"  plan (rare), none:  {plan_without}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="decisions logged")
    options = parser.parse_args()
    with postgres_url() as server:
        for total in options.sizes:
            one_size(server, total, options.rounds)
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")


if __name__ == "__main__":
    main()
