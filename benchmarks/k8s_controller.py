"""Budget admission check benchmark: from a Workload's quota reservation to its check state.

    python -m benchmarks.k8s_controller                  # 1,000 Workloads, 100 tenants, 4 workers
    python -m benchmarks.k8s_controller --rate 100       # quota reserved faster

The controller (``parkbrake k8s controller``'s own code) watches a FAKE API server in this process
(tests/cli/k8s/fake_api_server.py: HTTPS, list/watch/patch) and decides against a real ledger
(``PARKBRAKE_DATABASE_URL``, else a throwaway pgserver; every tenant with a budget). 1,000 Workloads
wait in their tenants' queues; Kueue's part is played by the benchmark, reserving their quota
``--rate`` a second. Measured per Workload: the time from the reservation written to the fake to the
check's state patched back (p50, p99, max), against the ledger's admission alone
(``LedgerStore.admit`` for the same requests on one connection: the cost to beat), then every
Workload reserved at once (the burst: how long the backlog takes). Asserted: p99 ≤ 1 s at the rate,
and never more ledger connections than workers (one each, and one for the budget sweep), sampled from
pg_stat_activity throughout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from cli.k8s.admission import BudgetCheck
from cli.k8s.api import KubernetesApi
from cli.k8s.controller import Controller
from cli.k8s.workload import workload_request
from guardrails.launch import AdmissionRequest
from guardrails.pricing import load_price_table
from guardrails.runway import Budget
from lambdas.ledger.store import LedgerStore
from stacks.config import StackConfig, Tenant, load_stack_config
from tests.cli.k8s.fake_api_server import TOKEN, FakeApiServer, fake_api_server
from tests.cli.k8s.workloads import workload
from tests.postgres import postgres_url

BENCH_DATABASE = "parkbrake_bench_k8s"
APPLICATION = "parkbrake-k8s-bench"
REPOSITORY = Path(__file__).resolve().parent.parent


def many_tenants(count: int) -> StackConfig:
    """The eks stack with ``count`` tenants, each with a g5.12xlarge training pool."""
    eks = load_stack_config("eks", REPOSITORY)
    training = eks.pools["training"]
    tenants = {f"tenant-{n:03d}": Tenant(f"tenant-{n:03d}", 100_000) for n in range(count)}
    pools = {f"{name}-training": replace(training, name=f"{name}-training", tenant=name) for name in tenants}
    return replace(eks, tenants=tenants, pools=pools)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary_ms(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values) * 1000, 1),
        "p99_ms": round(percentile(values, 0.99) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1),
    }


def reserve(document: dict[str, Any]) -> dict[str, Any]:
    """Kueue reserving a Workload's quota: admission and QuotaReserved written to its status."""
    reserved = workload(
        document["metadata"]["name"], namespace=document["metadata"]["namespace"],
        queue=document["spec"]["queueName"], uid=document["metadata"]["uid"], max_seconds=3600,
    )  # fmt: skip
    return reserved | {"metadata": document["metadata"]}


def sample_connections(url: str, stop: threading.Event, peak: list[int]) -> None:
    with psycopg.connect(url, autocommit=True) as watcher:
        while not stop.wait(0.05):
            (count,) = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (APPLICATION,)
            ).fetchone() or (0,)
            peak[0] = max(peak[0], int(count))


def run_phase(fake: FakeApiServer, pending: list[dict[str, Any]], rate: float | None) -> list[float]:
    """Reserve every pending Workload (``rate`` a second, None: at once); each one's seconds to its state."""
    start = len(fake.patches)
    reserved_at: dict[str, float] = {}
    for document in pending:
        reserved_at[f"/{document['metadata']['name']}/status"] = time.monotonic()
        fake.put("workloads", reserve(document))
        if rate:
            time.sleep(1 / rate)
    deadline = time.monotonic() + 600
    while len(fake.patches) - start < len(pending):
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(fake.patches) - start} of {len(pending)} Workloads decided")
        time.sleep(0.05)
    return [
        at - reserved_at[path[path.rindex("/", 0, path.rindex("/")) :]]
        for at, path, _ in fake.patches[start:]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", type=int, default=1_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rate", type=float, default=50.0, help="quota reservations a second")
    options = parser.parse_args()
    config, prices = many_tenants(options.tenants), load_price_table()
    now = datetime.now(UTC)
    with postgres_url() as server:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {BENCH_DATABASE}")
        url = make_conninfo(server, dbname=BENCH_DATABASE)
        setup = LedgerStore.connect(url)
        setup.migrate()
        setup.sync_prices(prices, source="prices.json")
        for tenant in config.tenants:
            setup.set_budget(Budget(tenant, Decimal(1_000_000), "month", (), frozenset({"deny"}), "UTC"))
        # The cost to beat: the ledger's admission alone, one connection, the same requests.
        alone = []
        for n in range(200):
            started = time.perf_counter()
            setup.admit(
                AdmissionRequest(f"tenant-{n % options.tenants:03d}", "g5.12xlarge", 1, timedelta(hours=1)),
                now=now, default_cap=timedelta(minutes=90), lease=timedelta(minutes=30),
            )  # fmt: skip
            alone.append(time.perf_counter() - started)
        controller_url = make_conninfo(url, application_name=APPLICATION)
        stores = [LedgerStore.connect(controller_url) for _ in range(options.workers + 1)]
        checks = [BudgetCheck(s, default_cap=timedelta(minutes=90), region=config.region) for s in stores]
        peak, stop = [0], threading.Event()
        sampler = threading.Thread(target=sample_connections, args=(url, stop, peak), daemon=True)
        sampler.start()
        with fake_api_server() as fake:
            api = KubernetesApi(fake.url, token=TOKEN, ca_file=str(fake.ca_file))
            controller = Controller(api, config, prices, checks)

            def queued(phase: str) -> list[dict[str, Any]]:
                pending = []
                for n in range(options.workloads):
                    tenant = f"tenant-{n % options.tenants:03d}"
                    document = workload(f"{phase}-{n:04d}", namespace=tenant, queue=tenant, uid=str(uuid.uuid4()),
                                        reserved=False, conditions=())  # fmt: skip
                    pending.append(fake.put("workloads", document))
                return pending

            first, second = queued("steady"), queued("burst")
            controller.start(stop, stop_every=timedelta(hours=1))
            for _ in range(
                len(first) + len(second)
            ):  # the first list: every Workload seen, none reserved yet
                controller.outcomes.get(timeout=300)
            steady = run_phase(fake, first, options.rate)
            burst_started = time.monotonic()
            burst = run_phase(fake, second, None)
            burst_s = time.monotonic() - burst_started
            states = [body["status"]["admissionChecks"][0]["state"] for _, _, body in fake.patches]
            stop.set()
            fake.drop_watches()
            controller.stop()
        sampler.join()
        for s in [*stores, setup]:
            s.close()
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")
    assert workload_request(reserve(first[0]), config, prices).hosts == 1
    figures = {
        "workloads": options.workloads,
        "tenants": options.tenants,
        "workers": options.workers,
        "rate_per_s": options.rate,
        "reservation_to_state": summary_ms(steady),
        "ledger_admit_alone": summary_ms(alone),
        "burst_all_at_once": {"drained_s": round(burst_s, 1), **summary_ms(burst)},
        "states": {state: states.count(state) for state in sorted(set(states))},
        "peak_ledger_connections": peak[0],
        "ledger_connections_allowed": options.workers + 1,
    }
    print(json.dumps(figures, indent=2))
    assert peak[0] <= options.workers + 1, f"{peak[0]} ledger connections for {options.workers} workers"
    assert percentile(steady, 0.99) <= 1.0, f"p99 {percentile(steady, 0.99):.3f} s > 1 s"


if __name__ == "__main__":
    main()
