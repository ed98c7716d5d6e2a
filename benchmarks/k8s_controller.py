"""Budget admission check benchmark: from a Workload's quota reservation to its check's write.

    python -m benchmarks.k8s_controller                  # 1,000 Workloads, 100 tenants, 4 workers
    python -m benchmarks.k8s_controller --rate 100       # quota reserved faster
    python -m benchmarks.k8s_controller --rounds 5 --load 2   # 5 rounds, both cores busy with spinners

The controller (``parkbrake k8s controller``'s own code, on lightkube) watches a FAKE API server in a
process of its own (tests/cli/k8s/fake_api_process.py; the server is tests/cli/k8s/fake_api_server.py:
HTTPS, list/watch, server-side apply), as a cluster's API server never shares the controller's
interpreter, and decides against a real ledger (``PARKBRAKE_DATABASE_URL``, else a throwaway pgserver;
every tenant with a budget). Kueue's part is played by the benchmark (the Kueue fake's whole-store
step is too slow for 1,000 objects): 1,000 Workloads wait in their tenants' queues and have their quota
reserved, each reserved object built before the clock starts; reserved at once (burst, outage), they
are written one after another in the fake's process (``put_all``), as Kueue's own process would, not
in the controller's interpreter.

Measured in ``--rounds`` rounds (default 3), in turn (benchmarks.rounds), each figure the median of
its rounds with their min–max and the one-minute load average beside it:

- the floor: the ledger's own ``LedgerStore.admit`` alone, the same requests on as many connections as
  the controller has workers (admissions/s at full speed; p99 at the steady phase's ``--rate``, the
  latency's floor), each connection warmed by one untimed admit as the controller's are;
- steady: ``--workloads`` Workloads a round, quota reserved ``--rate`` a second, the time from each
  reservation to its entry written (p99 — target ≤ 1 s; decisions/s, which ``--rate`` bounds), each
  against the floor of its round: the median of the rounds' ratios (controller/floor for decisions/s,
  floor p99/controller p99 for latency), flagged as a BROKEN CEILING where the controller beats the
  ledger's own admit alone (it cannot: each decision is one such admit).

Then once, each with the load average beside it:

- burst: 1,000 reserved at once, decisions/s until the last is written — target ≥ 0.5 x the floor's
  median;
- outage: 1,000 reserved while the ledger refuses connections (``ALLOW_CONNECTIONS false`` and the
  controller's sessions ended), then the ledger back: the time until every one is written — target
  ≤ one resync period (the controller's default, 3 minutes).

After the burst, the CPU each part used per decision, by process — the controller's (this process,
the benchmark's loops included), the fake API server's and the ledger's backends (where the ledger
runs on this machine) — and how many cores they kept busy on average (their CPU over the burst's
wall time), beside the CPU per admit of one more floor run: on a machine whose cores the floor keeps
busy, the ratio of the two totals bounds the burst's ratio, and the cores left idle say how far the
burst is from that bound.

Also asserted: never more ledger connections than ``--workers`` + 1 (the workers' connections, which the
controller's worker threads borrow for each ledger call, and one for the sweeps), sampled from
pg_stat_activity throughout.

The floor is the ledger's admit one request a transaction: ``LedgerStore.admit``, in its own
transaction. The controller's decision adds the lookup of an earlier reservation and the decision's
log entry to that transaction, and decides the Workloads waiting for a connection together
(``LedgerStore.admit_together``: one statement a step for the batch, one commit), which the floor does
not: under a burst a decision can cost the ledger less than an admit alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from benchmarks.rounds import Figure, alternate, busy_load, figure_line, ratio, warm_up_load
from cli.k8s.admission import BudgetCheck
from cli.k8s.controller import Controller
from cli.k8s.kube import client_from_options
from cli.k8s.workload import workload_request
from guardrails.launch import AdmissionRequest
from guardrails.pricing import load_price_table
from guardrails.runway import Budget
from lambdas.ledger.store import LedgerStore
from stacks.config import StackConfig, Tenant, load_stack_config
from stacks.kubernetes_config import flavor_name
from tests.cli.k8s.conftest import admission_check
from tests.cli.k8s.fake_api_process import fake_api_process
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
    tenant = document["metadata"]["namespace"]
    reserved = workload(
        document["metadata"]["name"], namespace=tenant, queue=document["spec"]["queueName"],
        uid=document["metadata"]["uid"], max_seconds=3600,
        flavor=flavor_name(tenant, f"{tenant}-training"),  # its tenant's pool (many_tenants), one flavor each
    )  # fmt: skip
    return reserved | {"metadata": document["metadata"]}


def load() -> str:
    return "load average " + " ".join(f"{value:.2f}" for value in os.getloadavg())


def sample_connections(url: str, stop: threading.Event, peak: list[int]) -> None:
    with psycopg.connect(url, autocommit=True) as watcher:
        while not stop.wait(0.05):
            (count,) = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (APPLICATION,)
            ).fetchone() or (0,)
            peak[0] = max(peak[0], int(count))


def writes_after(
    fake: Any, start: int, pending: list[dict[str, Any]], seconds: float = 900
) -> dict[str, float]:
    """Wait for every pending Workload's entry to be written after patch ``start``; name → when."""
    names = {document["metadata"]["name"] for document in pending}
    written: dict[str, float] = {}
    deadline = time.monotonic() + seconds
    seen = start  # each patch looked at once: the watcher shares the GIL with the controller it times
    while len(written) < len(names):
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(written)} of {len(names)} Workloads decided")
        patches = fake.patched_after(seen)
        seen += len(patches)
        for at, path in patches:
            name = path.split("/workloads/", 1)[-1].split("/", 1)[0]
            if name in names:
                written.setdefault(name, at)
        time.sleep(0.05)
    return written


def run_phase(fake: Any, reserved: list[dict[str, Any]], rate: float | None) -> tuple[list[float], float]:
    """Write every ``reserved`` Workload (Kueue's objects, built by the caller before the clock and
    the CPU meter: ``reserve``), ``rate`` a second (None: at once); each one's seconds from its
    reservation to its write, and the seconds from the first reservation to the last write."""
    start = fake.patch_count()
    reserved_at: dict[str, float] = {}
    if rate:
        for document in reserved:
            reserved_at[document["metadata"]["name"]] = time.monotonic()
            fake.put("workloads", document)
            time.sleep(1 / rate)
    else:  # at once: written one after another in the fake's process, as Kueue's own would
        names = [document["metadata"]["name"] for document in reserved]
        reserved_at = dict(zip(names, fake.put_all("workloads", reserved), strict=True))
    written = writes_after(fake, start, reserved)
    first = min(reserved_at.values())
    return [written[name] - reserved_at[name] for name in written], max(written.values()) - first


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds process ``pid`` has used (Linux ``/proc``); None where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ledger_backends(stores: list[LedgerStore]) -> list[int]:
    """The server processes of ``stores``' connections, where the ledger runs on this machine."""
    pids = []
    for store in stores:
        with store.connections.connection() as connection:
            pid = connection.info.backend_pid
        try:
            if b"postgres" in Path(f"/proc/{pid}/cmdline").read_bytes():
                pids.append(pid)
        except OSError:
            continue  # a ledger elsewhere (PARKBRAKE_DATABASE_URL): its CPU is not read
    return pids


class CpuMeter:
    """CPU seconds each part of a phase used, by process: the phase's ``parts`` name → pids."""

    def __init__(self, parts: dict[str, list[int]]) -> None:
        self.parts = parts
        self.before = self._now()

    def _now(self) -> dict[str, float | None]:
        read = {name: [cpu_seconds(pid) for pid in pids] for name, pids in self.parts.items()}
        return {
            name: sum(v for v in values if v is not None) if values and None not in values else None
            for name, values in read.items()
        }

    def per(self, count: int) -> dict[str, float | None]:
        """Milliseconds of CPU per item, each part, since the meter was made."""
        after = self._now()
        return {
            name: None if after[name] is None or self.before[name] is None
            else round((after[name] - self.before[name]) * 1000 / count, 2)  # type: ignore[operator]
            for name in self.parts
        }  # fmt: skip


def cpu_line(label: str, per_item: dict[str, float | None], busy: str = "") -> str:
    shown = [f"{name} {'?' if ms is None else f'{ms:.2f}'}" for name, ms in per_item.items()]
    known = [ms for ms in per_item.values() if ms is not None]
    return f"{label}: {', '.join(shown)} = {sum(known):.2f} ms of CPU each{busy} ({load()})"


def cores_busy(per_item: dict[str, float | None], count: int, seconds: float) -> float:
    """How many of the machine's cores the parts kept busy on average: their CPU over the wall time."""
    return sum(ms for ms in per_item.values() if ms is not None) * count / 1000 / seconds


def floor(
    setup_url: str,
    options: argparse.Namespace,
    now: datetime,
    rate: float | None = None,
    cpu: dict[str, float | None] | None = None,
) -> tuple[float, list[float]]:
    """The ledger's admit alone on ``workers`` connections: admissions/s and each one's seconds; at
    full speed (``rate`` None) or started ``rate`` a second in all, as the steady phase reserves."""
    stores = [LedgerStore.connect(setup_url) for _ in range(options.workers)]
    requests = [
        AdmissionRequest(f"tenant-{n % options.tenants:03d}", "g5.12xlarge", 1, timedelta(hours=1))
        for n in range(options.workloads)
    ]

    # One untimed admit on each fresh connection first, as the controller's long-lived ones have had:
    # a connection's first statements pay for its catalog lookups, 4 of them above the p99 of 300.
    for index, store in enumerate(stores):
        store.admit(requests[index], now=now, default_cap=timedelta(minutes=90), lease=timedelta(minutes=30))
    begun = time.perf_counter()

    def admit_share(index: int) -> list[float]:
        times = []
        for number, request in enumerate(requests[index :: options.workers]):
            if rate:  # request n of all starts n / rate seconds in, as the steady phase's reservations
                time.sleep(max(0.0, begun + (number * options.workers + index) / rate - time.perf_counter()))
            started = time.perf_counter()
            stores[index].admit(
                request, now=now, default_cap=timedelta(minutes=90), lease=timedelta(minutes=30)
            )
            times.append(time.perf_counter() - started)
        return times

    meter = CpuMeter({"benchmark": [os.getpid()], "ledger": ledger_backends(stores)})
    started = time.perf_counter()
    with ThreadPoolExecutor(options.workers) as pool:
        times = [t for share in pool.map(admit_share, range(options.workers)) for t in share]
    elapsed = time.perf_counter() - started
    if cpu is not None:
        cpu.update(meter.per(len(requests)))
    for store in stores:
        store.close()
    return len(requests) / elapsed, times


def steady_rounds(
    fake: Any,
    url: str,
    options: argparse.Namespace,
    now: datetime,
    batches: list[list[dict[str, Any]]],
) -> dict[str, Any]:
    """The floor and the controller's steady phase in turn, one batch a round: each figure per round,
    the ratios per round, the lines printed, and their JSON under ``"json"``."""  # fmt: skip
    p99_ms: dict[str, Figure] = {"floor": Figure(), "steady": Figure()}

    def floor_round(_: int) -> float:
        return floor(url, options, now)[0]

    def paced_floor_round(_: int) -> float:
        # The latency's floor: the admit alone at the steady phase's pace (at full speed each admit
        # waits behind the others', which the steady phase's do not).
        _, times = floor(url, options, now, options.rate)
        p99_ms["floor"].add(percentile(times, 0.99) * 1000)
        return 0.0

    def steady_round(number: int) -> float:
        times, elapsed = run_phase(fake, [reserve(document) for document in batches[number]], options.rate)
        p99_ms["steady"].add(percentile(times, 0.99) * 1000)
        return len(times) / elapsed

    ways = {"floor": floor_round, "paced floor": paced_floor_round, "steady": steady_round}
    per_s = alternate(ways, options.rounds)
    throughput = ratio(per_s["steady"], per_s["floor"])
    latency = ratio(p99_ms["floor"], p99_ms["steady"])  # speed over speed: the floor's p99 over ours
    print(f"{options.rounds} rounds in turn; each figure: the median of its rounds [min–max, one-minute "
          f"load average over them]; a ratio: the median of the rounds' ratios (--load {options.load})")  # fmt: skip
    labels = ["floor: ledger admit alone", f"floor: admit alone {options.rate:g}/s, p99", f"steady: {options.rate:g}/s reserved",
              "steady: reservation→write, p99"]  # fmt: skip
    width = max(map(len, labels))
    print(figure_line(labels[0].ljust(width), per_s["floor"], "admissions/s"))
    print(figure_line(labels[1].ljust(width), p99_ms["floor"], "ms"))
    print(figure_line(labels[2].ljust(width), per_s["steady"], "decisions/s", throughput))
    print(figure_line(labels[3].ljust(width), p99_ms["steady"], "ms", latency))
    return {
        "floor_per_s": per_s["floor"],
        "steady_p99_ms": p99_ms["steady"],
        "json": {
            "floor_ledger_admit_alone": {
                "per_s": per_s["floor"].summary(),
                "p99_ms_at_steady_rate": p99_ms["floor"].summary(),
            },
            "steady_reservation_to_write": {
                "rate_per_s": options.rate,
                "decisions_per_s": per_s["steady"].summary(),
                "p99_ms": p99_ms["steady"].summary(),
                "decisions_per_s_of_floor": throughput.summary(),
                "floor_p99_over_steady_p99": latency.summary(),
            },
        },
    }


def outage(fake: Any, admin_url: str, pending: list[dict[str, Any]], down_s: float) -> float:
    """Reserve ``pending`` while the ledger refuses connections; seconds from its return to the last write."""
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {BENCH_DATABASE} ALLOW_CONNECTIONS false")
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (APPLICATION,),
        )
        start = fake.patch_count()
        fake.put_all("workloads", [reserve(document) for document in pending])
        time.sleep(down_s)
        assert not fake.patched_after(start), "a Workload was decided while the ledger was down"
        admin.execute(f"ALTER DATABASE {BENCH_DATABASE} ALLOW_CONNECTIONS true")
        back = time.monotonic()
    written = writes_after(fake, start, pending)
    return max(written.values()) - back


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", type=int, default=1_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rate", type=float, default=50.0, help="quota reservations a second (steady)")
    parser.add_argument("--outage", type=float, default=20.0, help="seconds the ledger is down")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of floor and steady in turn (medians of them)"
    )
    parser.add_argument("--load", type=int, default=0, help="busy processes spinning through the run")
    options = parser.parse_args()
    if options.rounds < 1 or options.load < 0:
        parser.error("--rounds must be at least 1 and --load at least 0")
    with busy_load(options.load):
        warm_up_load(options.load)
        run(options)


def run(options: argparse.Namespace) -> None:
    config, prices = many_tenants(options.tenants), load_price_table()
    now = datetime.now(UTC)
    figures: dict[str, Any] = {
        "workloads": options.workloads,
        "tenants": options.tenants,
        "workers": options.workers,
        "rounds": options.rounds,
        "busy_processes": options.load,
    }
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
        controller_url = make_conninfo(url, application_name=APPLICATION)
        stores = [LedgerStore.connect(controller_url) for _ in range(options.workers + 1)]
        checks = [BudgetCheck(s, default_cap=timedelta(minutes=90), region=config.region) for s in stores]
        peak, stop = [0], threading.Event()
        sampler = threading.Thread(target=sample_connections, args=(url, stop, peak), daemon=True)
        sampler.start()
        with fake_api_process() as fake:
            fake.put("admissionchecks", admission_check())
            url_of_fake, token_file, ca_file = fake.address()
            client = client_from_options(url_of_fake, Path(token_file), Path(ca_file))
            controller = Controller(client, config, prices, checks)

            def queued(phase: str) -> list[dict[str, Any]]:
                pending = []
                for n in range(options.workloads):
                    tenant = f"tenant-{n % options.tenants:03d}"
                    document = workload(f"{phase}-{n:04d}", namespace=tenant, queue=tenant, uid=str(uuid.uuid4()),
                                        reserved=False, conditions=())  # fmt: skip
                    pending.append(fake.put("workloads", document))
                return pending

            steady_batches = [queued(f"steady{number}") for number in range(options.rounds)]
            batches = [*steady_batches, queued("burst"), queued("outage")]
            controller.start(stop)
            for _ in range(sum(map(len, batches))):  # the first list: every Workload seen, none reserved yet
                controller.outcomes.get(timeout=300)
            measured = steady_rounds(fake, url, options, now, steady_batches)
            figures.update(measured.pop("json"))
            floor_rate = measured["floor_per_s"].median
            steady_p99s = measured["steady_p99_ms"].values
            # CPU by process: the controller's (this one, the benchmark's loops included), the fake
            # API server's, and the ledger's backends (on a 2-core machine, what bounds both rates).
            reserved = [reserve(document) for document in batches[-2]]
            meter = CpuMeter({"controller": [os.getpid()], "API server fake": [fake.pid()],
                              "ledger": ledger_backends(stores)})  # fmt: skip
            burst, burst_s = run_phase(fake, reserved, None)
            burst_rate = len(burst) / burst_s
            burst_cpu = meter.per(len(burst))
            floor_cpu: dict[str, float | None] = {}
            floor(url, options, now, cpu=floor_cpu)
            busy = cores_busy(burst_cpu, len(burst), burst_s)
            figures["cpu_ms_each"] = {
                "burst_decision": burst_cpu, "admit_alone": floor_cpu,
                "burst_cores_busy": {"busy": round(busy, 2), "cores": os.cpu_count()},
            }  # fmt: skip
            print(
                cpu_line("CPU per burst decision", burst_cpu, f"; {busy:.2f} of {os.cpu_count()} cores busy")
            )
            print(cpu_line("CPU per admit alone (once more)", floor_cpu))
            figures["burst_all_at_once"] = {
                "decisions_per_s": round(burst_rate, 1), "of_floor_median": round(burst_rate / floor_rate, 2),
                "drained_s": round(burst_s, 1), **summary_ms(burst), "load": load(),
            }  # fmt: skip
            print(f"burst, {len(burst)} at once (once): {burst_rate:,.1f} decisions/s = {burst_rate / floor_rate:.2f} "
                  f"of the floor's median, p99 {percentile(burst, 0.99) * 1000:,.0f} ms ({load()})")  # fmt: skip
            recovered_s = outage(fake, server, batches[-1], options.outage)
            figures["outage_all_redecided_after_ledger_back_s"] = {
                "seconds": round(recovered_s, 1), "resync_period_s": controller.resync.total_seconds(),
                "down_s": options.outage, "load": load(),
            }  # fmt: skip
            print(f"outage (once): all {len(batches[-1])} written {recovered_s:.1f} s after the ledger came back "
                  f"(down {options.outage:g} s; resync {controller.resync.total_seconds():g} s) ({load()})")  # fmt: skip
            states = [
                body["status"]["admissionChecks"][0]["state"]
                for _, _, body in fake.patches_after(0)
                if "admissionChecks" in body.get("status", {})
            ]
            figures["states"] = {state: states.count(state) for state in sorted(set(states))}
            stop.set()
            fake.drop_watches()
            controller.stop()
        sampler.join()
        for s in [*stores, setup]:
            s.close()
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")
    assert workload_request(reserve(batches[0][0]), config, prices).hosts == 1
    figures["peak_ledger_connections"] = peak[0]
    figures["ledger_connections_allowed"] = options.workers + 1
    print(json.dumps(figures, indent=2))
    assert peak[0] <= options.workers + 1, f"{peak[0]} ledger connections for {options.workers} workers"
    assert max(steady_p99s) <= 1000, f"steady p99 {max(steady_p99s):.1f} ms > 1 s in a round"
    assert burst_rate >= 0.5 * floor_rate, (
        f"{burst_rate:.1f} decisions/s < 0.5 x the floor's median {floor_rate:.1f}"
    )
    assert recovered_s <= controller.resync.total_seconds(), f"{recovered_s:.1f} s > one resync period"


if __name__ == "__main__":
    main()
