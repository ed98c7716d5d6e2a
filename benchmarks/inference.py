"""Inference service benchmark: a retry storm, the idempotency layer's latency, throughput vs the runtime.

    python -m benchmarks.inference                  # 200 unique requests, each sent 3 times
    python -m benchmarks.inference --unique 50      # a quick run

Runs the real service (``parkbrake-inference``, its own process, the baked ONNX file) on 127.0.0.1
against one PostgreSQL server (``PARKBRAKE_DATABASE_URL``, else a throwaway pgserver), and measures:
- retry storm: every unique request sent 3 times, two of them at once (a retry racing the original)
  and one after; model passes per unique request, read from the service's own
  ``parkbrake_inference_model_passes_total`` (target exactly 1.00);
- the idempotency layer's added latency: the same request (one sentence; again with 16) sequentially,
  alternately with a fresh ``Idempotency-Key`` (key lookup and claim in one statement, run, store
  after sending) and without one (key lookup, run: the same service, the layer skipped); the ratio of
  the medians (target ≤ 1.05), and a replay's median. Each fresh-key request is followed by an
  unmeasured retry of it, which returns once the response is stored, and every request by
  ``--gap-ms``: the store's work after a response never lands on the next measured request;
- the one-sentence series again with the idempotency rows in a real Valkey/Redis server (when one is
  installed: the key lookup stays in PostgreSQL, so a keyed request makes two round trips);
- the one-sentence series again with the model and the database on separate cores (a *model* of the
  production layout, where the database is another machine: the service on CPU 0 with one ONNX
  Runtime thread, PostgreSQL and the client on CPU 1), so the database's background work (the WAL
  writer a commit wakes) does not share the model pass's cores;
- the layer's database statements timed on their own, in this process (key lookup; lookup and claim;
  completion with compression);
- throughput in embeddings per second through the service (batches of ``--batch`` sentences, two
  clients) against the same ONNX Runtime session called directly in this process, in the same run.

    python -m benchmarks.inference --compare /tmp/inference-baseline --rounds 3

``--compare CHECKOUT`` measures this service against the one in another checkout of the repository
(a git worktree of an earlier commit, run with ``PYTHONPATH=CHECKOUT``) in the same run: each round
starts both services in turn, alternating which goes first, and measures throughput, the one-sentence
latency series and the separate-cores series of each; the figures are this ÷ that, per round. Each
round also reads each service's own CPU time (``/proc/PID/stat``) per request (``GET /healthz``, and
the one-sentence series): less stretched by the machine's load than wall-clock latency.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from psycopg.conninfo import make_conninfo

from guardrails.idempotency import Lease, fingerprint
from lambdas.ledger.connections import SingleConnection
from lambdas.ledger.store import LedgerStore
from services.inference.export import build_model
from services.inference.idempotency import PostgresIdempotencyStore, Scope, StoredResponse
from services.inference.keys import ApiKeyStore
from services.inference.model import Embedder
from services.inference.server import service_connections
from tests.postgres import postgres_url
from tests.services.inference.redis_server import SERVERS, redis_server

BENCH_DATABASE = "parkbrake_bench_inference"
REPOSITORY = Path(__file__).resolve().parents[1]
SENTENCE = "The sweep stopped the GPU host at its deadline and the ledger billed 90 seconds."


@contextmanager
def database() -> Iterator[str]:
    with postgres_url("parkbrake-bench-inference-") as url:
        import psycopg

        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {BENCH_DATABASE}")
        bench_url = make_conninfo(url, dbname=BENCH_DATABASE)
        store = LedgerStore.connect(bench_url)
        store.migrate()
        store.close()
        yield bench_url


@dataclass(frozen=True)
class Endpoints:
    url: str
    metrics_url: str  # /metrics: its own port (the API port for a service from before the split)
    pid: int = 0  # the service's process (taskset execs it: the same pid)


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far, all its threads, user and system (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_request(endpoints: Endpoints, api_key: str, samples: int, gap: float) -> dict[str, float]:
    """The service's own CPU time per request, which the machine's load does not stretch as it does
    wall-clock latency: ``GET /healthz`` (the HTTP stack alone) and the one-sentence latency series
    (4 requests a sample: without a key, with a fresh one, its retry, a replay; the model included)."""
    before = cpu_seconds(endpoints.pid)
    for _ in range(samples):
        get(endpoints.url, "/healthz")
    middle = cpu_seconds(endpoints.pid)
    overhead(endpoints.url, api_key, samples, 1, gap)
    after = cpu_seconds(endpoints.pid)
    sent = 4 * samples + 11  # the series' own warm-up: one replay key, five pairs
    return {
        "cpu_ms_per_healthz": round((middle - before) * 1000 / samples, 3),
        "cpu_ms_per_embeddings_request": round((after - middle) * 1000 / sent, 3),
    }


@contextmanager
def service(
    database_url: str,
    onnx_file: Path,
    *,
    cpu: int | None = None,
    checkout: Path | None = None,
    **settings: str,
) -> Iterator[Endpoints]:
    """The service in its own process; on ``cpu`` alone when given (``taskset``, before it starts any
    thread); from ``checkout`` (another copy of the repository) when given."""
    environment = (
        os.environ
        | settings
        | {
            "PARKBRAKE_DATABASE_URL": database_url,
            "PARKBRAKE_INFERENCE_MODEL": str(onnx_file),
            "PARKBRAKE_INFERENCE_RATE_LIMIT": "100000",
            "PARKBRAKE_INFERENCE_BURST": "100000",
            "PARKBRAKE_INFERENCE_METRICS_PORT": "0",
            "PARKBRAKE_REVISION": "bench",
        }
        # This checkout's code when none is given: the console script alone would import the copy
        # the virtual environment was installed from, which need not be this one (a git worktree).
        | {"PYTHONPATH": str(checkout if checkout is not None else REPOSITORY)}
    )
    script = Path(sys.executable).with_name("parkbrake-inference")
    pinned = ["taskset", "--cpu-list", str(cpu)] if cpu is not None else []
    process = subprocess.Popen(
        [*pinned, str(script), "--port", "0"], env=environment, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        listening = json.loads(process.stdout.readline())
        url = listening["listening"]
        for _ in range(1200):
            if get(url, "/healthz")[0] == 200:
                break
            time.sleep(0.05)
        yield Endpoints(url, listening.get("metrics", url), process.pid)
    finally:
        process.terminate()
        process.wait(timeout=60)


def get(url: str, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url + path, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def post(url: str, api_key: str, inputs: list[str], idempotency_key: str | None = None) -> tuple[int, float]:
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    body = json.dumps({"model": "all-MiniLM-L6-v2", "input": inputs}).encode()
    request = urllib.request.Request(url + "/v1/embeddings", data=body, headers=headers)
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()
        return response.status, time.perf_counter() - started


def model_passes(url: str) -> float:
    for line in get(url, "/metrics")[1].decode().splitlines():
        if line.startswith("parkbrake_inference_model_passes_total "):
            return float(line.split()[1])
    return 0.0


def retry_storm(endpoints: Endpoints, api_key: str, unique: int) -> dict[str, float]:
    url = endpoints.url
    before = model_passes(endpoints.metrics_url)

    def one(index: int) -> list[int]:
        key, inputs = str(uuid.uuid4()), [f"{SENTENCE} (request {index})"]
        racing: list[int] = []
        threads = [
            threading.Thread(target=lambda: racing.append(post(url, api_key, inputs, key)[0]))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [*racing, post(url, api_key, inputs, key)[0]]

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=4) as pool:
        statuses = [status for result in pool.map(one, range(unique)) for status in result]
    elapsed = time.perf_counter() - started
    passes = model_passes(endpoints.metrics_url) - before
    return {
        "unique_requests": unique,
        "requests_sent": len(statuses),
        "non_200": sum(status != 200 for status in statuses),
        "model_passes": passes,
        "passes_per_unique_request": passes / unique,
        "seconds": round(elapsed, 2),
    }


def overhead(url: str, api_key: str, samples: int, sentences: int, gap: float) -> dict[str, float]:
    with_key: list[float] = []
    without_key: list[float] = []
    replays: list[float] = []
    inputs = [f"{SENTENCE} ({n})" for n in range(sentences)]
    replay_key = str(uuid.uuid4())
    post(url, api_key, inputs, replay_key)

    def measure(series: list[float], idempotency_key: str | None, *, fresh: bool = False) -> None:
        series.append(post(url, api_key, inputs, idempotency_key)[1])
        if fresh:
            # The service stores a response after sending it. A retry of it (not measured) returns
            # only once it is stored, so that work never lands on the next measured request of
            # either series instead of its own.
            post(url, api_key, inputs, idempotency_key)
        time.sleep(gap)

    for _ in range(5):  # warm connections and caches on both paths
        post(url, api_key, inputs), post(url, api_key, inputs, str(uuid.uuid4()))
    for index in range(samples):  # alternated (and which goes first too), so load drift hits both alike
        pair = [lambda: measure(without_key, None), lambda: measure(with_key, str(uuid.uuid4()), fresh=True)]
        for send in pair if index % 2 else reversed(pair):
            send()
        measure(replays, replay_key)
    p50_with, p50_without = statistics.median(with_key), statistics.median(without_key)
    return {
        "sentences_per_request": sentences,
        "samples": samples,
        "p50_ms_without_idempotency": round(p50_without * 1000, 2),
        "p50_ms_with_idempotency": round(p50_with * 1000, 2),
        "p50_ratio": round(p50_with / p50_without, 3),
        "p50_ms_replay": round(statistics.median(replays) * 1000, 2),
    }


def store_costs(database_url: str, api_key: str, embedder: Embedder, samples: int) -> dict[str, float]:
    """The layer's database work, timed in this process against the service's database: the key
    lookup a request without the header makes, the lookup-and-claim that replaces it, and the
    completion (compression included) that runs after the response is sent."""
    connections = service_connections(database_url, pool_size=1)
    keys = ApiKeyStore(connections)
    store = PostgresIdempotencyStore(connections, Lease(timedelta(seconds=60), timedelta(hours=24)))
    inputs = [SENTENCE]
    body = json.dumps({"model": "all-MiniLM-L6-v2", "input": inputs}).encode()
    vector = [float(value) for value in embedder.embed(inputs).vectors[0]]
    response = json.dumps({"object": "list", "data": [{"embedding": vector}]}).encode()
    timings: dict[str, list[float]] = {"key_lookup": [], "lookup_and_claim": [], "completion": []}
    try:
        for _ in range(samples):
            started = time.perf_counter()
            keys.tenant_of(api_key)
            timings["key_lookup"].append(time.perf_counter() - started)
            key, now = str(uuid.uuid4()), datetime.now(UTC)
            started = time.perf_counter()
            request_fingerprint = fingerprint("POST", "/v1/embeddings", body)
            admission = store.admit(api_key, "POST /v1/embeddings", key, request_fingerprint, now)
            timings["lookup_and_claim"].append(time.perf_counter() - started)
            assert admission is not None
            assert admission.claim.owner is not None
            scope = Scope(admission.tenant, "POST /v1/embeddings", key)
            stored = StoredResponse(200, {"Content-Type": "application/json"}, response)
            started = time.perf_counter()
            store.complete(scope, admission.claim.owner, stored, now)
            timings["completion"].append(time.perf_counter() - started)
    finally:
        connections.close()
    return {f"p50_ms_{name}": round(statistics.median(values) * 1000, 3) for name, values in timings.items()}


def throughput(url: str, api_key: str, embedder: Embedder, batch: int, batches: int) -> dict[str, float]:
    inputs = [f"{SENTENCE} ({n})" for n in range(batch)]
    embedder.embed(inputs)
    started = time.perf_counter()
    for _ in range(batches):
        embedder.embed(inputs)
    direct = batch * batches / (time.perf_counter() - started)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda _: post(url, api_key, inputs), range(batches)))
    served = batch * batches / (time.perf_counter() - started)
    return {
        "batch": batch,
        "embeddings_per_s_runtime_direct": round(direct, 1),
        "embeddings_per_s_through_service": round(served, 1),
        "service_vs_direct": round(served / direct, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--unique", type=int, default=200, help="unique requests in the retry storm")
    parser.add_argument("--samples", type=int, default=200, help="sequential requests per latency series")
    parser.add_argument("--batch", type=int, default=32, help="sentences per request in the throughput run")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument(
        "--gap-ms", type=float, default=2.0, help="pause after each request of the latency series"
    )
    parser.add_argument(
        "--compare", type=Path, default=None, help="another checkout of the repository to measure against"
    )
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds with --compare")
    parser.add_argument(
        "--fairness", action="store_true", help="only another tenant's latency under one tenant's retry storm"
    )
    parser.add_argument("--long-inputs", type=int, default=256, help="inputs of the storm's long request")
    parser.add_argument("--largest", action="store_true", help="only the largest request the ceiling admits")
    arguments = parser.parse_args()
    gap = arguments.gap_ms / 1000
    with tempfile.TemporaryDirectory() as folder, database() as database_url:
        onnx_file = Path(folder) / "all-MiniLM-L6-v2.onnx"
        onnx_file.write_bytes(build_model().SerializeToString())
        connections = SingleConnection(database_url)
        api_key = ApiKeyStore(connections).create("bench", datetime.now(UTC)).key
        connections.close()
        if arguments.fairness or arguments.largest:
            print(json.dumps(fairness_and_largest(arguments, database_url, onnx_file), indent=2))
            return
        embedder = Embedder.load(onnx_file)
        if arguments.compare is not None:
            print(
                json.dumps(
                    compare(
                        arguments=arguments,
                        database_url=database_url,
                        onnx_file=onnx_file,
                        api_key=api_key,
                        embedder=embedder,
                        gap=gap,
                    ),
                    indent=2,
                )
            )
            return
        with service(database_url, onnx_file) as endpoints:
            url = endpoints.url
            figures = {
                "device": embedder.device,
                "cpus": os.cpu_count(),
                "load_average_at_start": os.getloadavg()[0],
                "retry_storm": retry_storm(endpoints, api_key, arguments.unique),
                "latency": overhead(url, api_key, arguments.samples, 1, gap),
                "latency_batch_of_16": overhead(url, api_key, max(20, arguments.samples // 4), 16, gap),
                "store_round_trips": store_costs(database_url, api_key, embedder, arguments.samples),
                "throughput": throughput(url, api_key, embedder, arguments.batch, arguments.batches),
            }
        figures["latency_redis_store"] = redis_overhead(
            database_url, onnx_file, api_key, arguments.samples, gap
        )
        figures["latency_separate_cores"] = separate_cores_overhead(
            database_url, onnx_file, api_key, arguments.samples, gap
        )
        figures["load_average_at_end"] = os.getloadavg()[0]
    print(json.dumps(figures, indent=2))


def fairness_and_largest(arguments: argparse.Namespace, database_url: str, onnx_file: Path) -> dict[str, Any]:
    """``--fairness`` (this service, and ``--compare``'s when given) and ``--largest``
    (benchmarks/inference_fairness.py)."""
    from benchmarks.inference_fairness import fairness, largest
    from services.inference.settings import INTEGERS

    connections = SingleConnection(database_url)
    keys = ApiKeyStore(connections)
    retrying, other = (keys.create(tenant, datetime.now(UTC)).key for tenant in ("retrying", "other"))
    connections.close()
    figures: dict[str, Any] = {"cpus": os.cpu_count()}
    checkouts = {"this": None} | ({"baseline": arguments.compare.resolve()} if arguments.compare else {})
    for label, checkout in checkouts.items():
        with service(database_url, onnx_file, checkout=checkout) as endpoints:
            if arguments.fairness:
                figures[f"fairness_{label}"] = fairness(
                    endpoints.url,
                    retrying,
                    other,
                    samples=arguments.samples,
                    long_inputs=arguments.long_inputs,
                )
            if arguments.largest and checkout is None:
                figures["largest_request"] = largest(endpoints.url, other, INTEGERS["MAX_REQUEST_TOKENS"])
    return figures


def redis_overhead(
    database_url: str, onnx_file: Path, api_key: str, samples: int, gap: float
) -> dict[str, float] | str:
    """The one-sentence latency series again, with the idempotency rows in a real Valkey/Redis server."""
    if not any(shutil.which(name) for name in SERVERS):
        return "skipped: no valkey-server or redis-server installed"
    with (
        redis_server() as redis_url,
        service(database_url, onnx_file, PARKBRAKE_INFERENCE_REDIS_URL=redis_url) as endpoints,
    ):
        return overhead(endpoints.url, api_key, samples, 1, gap)


def postgres_server_processes(database_url: str) -> list[int]:
    """The server's postmaster and every process it started (read from /proc: Linux)."""
    import psycopg

    with psycopg.connect(database_url) as connection:
        (backend,) = connection.execute("SELECT pg_backend_pid()").fetchone() or (0,)
    postmaster = parent_of(backend)
    children = [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    return [postmaster, *(pid for pid in children if parent_of(pid) == postmaster)]


def parent_of(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # exited while the list was read
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state; the name may hold spaces


def separate_cores_overhead(
    database_url: str,
    onnx_file: Path,
    api_key: str,
    samples: int,
    gap: float,
    *,
    checkout: Path | None = None,
) -> dict[str, float] | str:
    """The one-sentence series with the model and the database on separate cores, a model of the
    database on its own machine (as Aurora is in production): the service on CPU 0 with one ONNX
    Runtime thread, every PostgreSQL process (and this client) on CPU 1. Run last: they stay pinned."""
    if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2 or not shutil.which("taskset"):
        return "skipped: needs Linux, taskset and two CPUs"
    for pid in [os.getpid(), *postgres_server_processes(database_url)]:
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(pid, {1})
    with service(
        database_url, onnx_file, cpu=0, checkout=checkout, PARKBRAKE_INFERENCE_THREADS="1"
    ) as endpoints:
        return overhead(endpoints.url, api_key, samples, 1, gap)


def compare(
    *,
    arguments: argparse.Namespace,
    database_url: str,
    onnx_file: Path,
    api_key: str,
    embedder: Embedder,
    gap: float,
) -> dict[str, Any]:
    """This service against ``arguments.compare``'s, round by round, alternating which goes first.

    Shared cores first (throughput, the one-sentence series); then, in a second pass of rounds, the
    separate-cores series (it pins PostgreSQL and this process to CPU 1 for the rest of the run)."""
    services = {"this": None, "baseline": arguments.compare.resolve()}
    rounds: list[dict[str, Any]] = []
    for index in range(arguments.rounds):
        order = list(services) if index % 2 == 0 else list(reversed(services))
        figures: dict[str, Any] = {"order": order, "load_average": os.getloadavg()[0]}
        for label in order:
            with service(database_url, onnx_file, checkout=services[label]) as endpoints:
                figures[label] = {
                    "throughput": throughput(
                        endpoints.url, api_key, embedder, arguments.batch, arguments.batches
                    ),
                    "latency": overhead(endpoints.url, api_key, arguments.samples, 1, gap),
                    "retry_storm": retry_storm(endpoints, api_key, arguments.unique),
                    "cpu": cpu_per_request(endpoints, api_key, arguments.samples, gap),
                }
        rounds.append(figures)
    separate: list[dict[str, Any]] = []
    for index in range(arguments.rounds):
        order = list(services) if index % 2 == 0 else list(reversed(services))
        figures = {"order": order, "load_average": os.getloadavg()[0]}
        for label in order:
            figures[label] = separate_cores_overhead(
                database_url, onnx_file, api_key, arguments.samples, gap, checkout=services[label]
            )
        separate.append(figures)

    def ratio(round_: dict[str, Any], *path: str) -> float:
        this, that = round_["this"], round_["baseline"]
        for key in path:
            this, that = this[key], that[key]
        return round(this / that, 3)

    return {
        "device": embedder.device,
        "cpus": os.cpu_count(),
        "baseline": str(arguments.compare),
        "rounds": rounds,
        "separate_cores": separate,
        "throughput_this_vs_baseline": [
            ratio(r, "throughput", "embeddings_per_s_through_service") for r in rounds
        ],
        "p50_without_key_this_vs_baseline": [
            ratio(r, "latency", "p50_ms_without_idempotency") for r in rounds
        ],
        "p50_with_key_this_vs_baseline": [ratio(r, "latency", "p50_ms_with_idempotency") for r in rounds],
        "cpu_ms_per_healthz_this_vs_baseline": [ratio(r, "cpu", "cpu_ms_per_healthz") for r in rounds],
        "cpu_ms_per_embeddings_request_this_vs_baseline": [
            ratio(r, "cpu", "cpu_ms_per_embeddings_request") for r in rounds
        ],
        "fresh_key_ratio_separate_cores": {
            label: [r[label]["p50_ratio"] if isinstance(r[label], dict) else r[label] for r in separate]
            for label in services
        },
        "passes_per_unique_request": {
            label: [r[label]["retry_storm"]["passes_per_unique_request"] for r in rounds]
            for label in services
        },
        "load_average_at_end": os.getloadavg()[0],
    }


if __name__ == "__main__":
    main()
