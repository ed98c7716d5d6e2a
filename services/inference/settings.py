"""The service's settings, from its environment; every bad value is reported at once, by name.

The one module that reads the service's environment: the server, the HTTP layer and the API take a
:class:`ServiceSettings` and never look at ``os.environ`` themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from guardrails.durations import DurationError, parse_duration
from guardrails.errors import InputError
from guardrails.idempotency import Lease
from services.inference.idempotency import DEFAULT_MAX_STORED_BYTES

PREFIX = "PARKBRAKE_INFERENCE_"
REVISION = "PARKBRAKE_REVISION"
METRICS_PORT_VARIABLE = PREFIX + "METRICS_PORT"  # also the --metrics-port flag, which wins
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
DURATIONS = {
    "LEASE": "60s",  # an unfinished claim lapses after this (a worker died mid-request)
    "RETENTION": "24h",  # completed responses are replayed for this long
    "WAIT": "10s",  # a request whose key is in progress waits this long for the result, then 409
    "DRAIN": "30s",  # SIGTERM: in-flight requests get this long to finish (the ALB's deregistration delay)
    "SWEEP_EVERY": "60s",  # the retention sweeper's period
    "HEADER_TIMEOUT": "10s",  # a connection's request line and headers must arrive within this
    "BODY_TIMEOUT": "30s",  # and the body within this, once the API key checked out
    # An idle keep-alive connection is closed after this; above the ALB's 60 s idle timeout, so the
    # load balancer, not the service, closes idle connections (no race that answers a client 502).
    "KEEP_ALIVE": "65s",
}
INTEGERS = {
    "RATE_LIMIT": 20,  # requests per second per API key (sustained)
    "BURST": 40,  # requests a key may send at once
    "MAX_INPUTS": 2048,  # inputs per request, OpenAI's limit
    "MAX_REQUEST_BYTES": 4 * 1024 * 1024,
    "MAX_STORED_BYTES": DEFAULT_MAX_STORED_BYTES,
    "SWEEP_BATCH": 1000,
    "DATABASE_POOL": 16,
    # ONNX Runtime intra-op threads per run (0 lets it choose one per core). One: each request's run
    # is its own worker thread, and the OS shares the cores between requests; with a pool, a short
    # run queues behind a long one's parallel sections (a one-sentence request took 2.3x longer
    # beside a long request: docs/inference.md).
    "THREADS": 1,
    "BATCH_SIZE": 32,  # inputs per model run: a request's memory is bounded by a batch, not its size
    "MAX_REQUEST_TOKENS": 300_000,  # tokens (after truncation) per request, OpenAI's limit
    "WORKERS": 32,  # requests doing database or model work at once; more wait their turn
    # Model runs one tenant may have at once (at most WORKERS): the rest of its requests wait on the
    # event loop, holding no worker, so other tenants always find workers free.
    "TENANT_WORKERS": 8,
    "MAX_CONNECTIONS": 1024,  # open connections; past it a new one gets 503 and is closed
    "METRICS_PORT": 9464,  # /metrics only, never behind the load balancer; 0 picks a free port
}
ZERO_ALLOWED = ("THREADS", "METRICS_PORT")
MAX_PORT = 65535


@dataclass(frozen=True)
class ServiceSettings:
    revision: str
    model_file: Path | None
    lease: Lease
    wait: timedelta
    drain: timedelta
    sweep_every: timedelta
    rate_limit: int
    burst: int
    max_inputs: int
    max_request_bytes: int
    max_stored_bytes: int
    sweep_batch: int
    database_pool: int
    threads: int
    require_idempotency_key: bool
    batch_size: int = 32
    max_request_tokens: int = 300_000
    workers: int = 32
    tenant_workers: int = 8
    max_connections: int = 1024
    metrics_port: int = 9464
    header_timeout: timedelta = timedelta(seconds=10)
    body_timeout: timedelta = timedelta(seconds=30)
    keep_alive: timedelta = timedelta(seconds=65)
    redis_url: str | None = None  # the idempotency store on Redis/Valkey; None: PostgreSQL


def _durations(environ: Mapping[str, str], problems: list[str]) -> dict[str, timedelta]:
    """Each of :data:`DURATIONS` from the environment, or its default; what cannot be read goes to ``problems``."""
    durations: dict[str, timedelta] = {}
    for name, default in DURATIONS.items():
        value = environ.get(PREFIX + name, default)
        try:
            durations[name] = parse_duration(value)
        except DurationError as error:
            problems.append(f"{PREFIX}{name}: {error}")
        except OverflowError:  # past timedelta's range (e.g. 9999999999d)
            problems.append(
                f"{PREFIX}{name}: {value!r} is too long a duration; use seconds, minutes, hours or a few days"
            )
    return durations


def _integers(environ: Mapping[str, str], problems: list[str]) -> dict[str, int]:
    """Each of :data:`INTEGERS` from the environment, or its default; what cannot be read goes to ``problems``."""
    integers: dict[str, int] = {}
    for name, fallback in INTEGERS.items():
        text = environ.get(PREFIX + name, str(fallback)).strip()
        minimum = 0 if name in ZERO_ALLOWED else 1
        # ASCII digits, and few of them: "²" is a digit to str.isdigit, and int() refuses 4,300 digits.
        if not (text.isascii() and text.isdigit() and len(text) <= 12) or int(text) < minimum:
            problems.append(f"{PREFIX}{name}: {text!r} is not a whole number ≥ {minimum}")
        elif name == "METRICS_PORT" and int(text) > MAX_PORT:
            problems.append(f"{PREFIX}{name}: {text} is not a TCP port (0–{MAX_PORT})")
        else:
            integers[name] = int(text)
    return integers


def settings_from_environment(environ: Mapping[str, str]) -> ServiceSettings:
    problems: list[str] = []
    durations = _durations(environ, problems)
    integers = _integers(environ, problems)
    require = environ.get(PREFIX + "REQUIRE_IDEMPOTENCY_KEY", "false").strip().lower()
    if require not in ("true", "false"):
        problems.append(f"{PREFIX}REQUIRE_IDEMPOTENCY_KEY: {require!r} is not true or false")
    model = environ.get(PREFIX + "MODEL", "").strip()
    if model and not Path(model).is_file():
        problems.append(f"{PREFIX}MODEL: {model} is not a file; unset it to build the graph at start-up")
    redis_url = environ.get(PREFIX + "REDIS_URL", "").strip()
    if redis_url and not redis_url.startswith(REDIS_SCHEMES):
        problems.append(
            f"{PREFIX}REDIS_URL: {redis_url.split('://')[0]!r} is not a Redis URL; use redis://host:6379/0, "
            "rediss:// (TLS) or unix:///path, or unset it to keep idempotency rows in PostgreSQL"
        )
    if problems:
        raise InputError("the inference service's settings are wrong:\n  " + "\n  ".join(problems))
    return ServiceSettings(
        revision=environ.get(REVISION, "").strip() or "unknown",
        model_file=Path(model) if model else None,
        lease=Lease(lease=durations["LEASE"], retention=durations["RETENTION"]),
        wait=durations["WAIT"],
        drain=durations["DRAIN"],
        sweep_every=durations["SWEEP_EVERY"],
        rate_limit=integers["RATE_LIMIT"],
        burst=integers["BURST"],
        max_inputs=integers["MAX_INPUTS"],
        max_request_bytes=integers["MAX_REQUEST_BYTES"],
        max_stored_bytes=integers["MAX_STORED_BYTES"],
        sweep_batch=integers["SWEEP_BATCH"],
        database_pool=integers["DATABASE_POOL"],
        threads=integers["THREADS"],
        require_idempotency_key=require == "true",
        redis_url=redis_url or None,
        batch_size=integers["BATCH_SIZE"],
        max_request_tokens=integers["MAX_REQUEST_TOKENS"],
        workers=integers["WORKERS"],
        tenant_workers=min(integers["TENANT_WORKERS"], integers["WORKERS"]),
        max_connections=integers["MAX_CONNECTIONS"],
        metrics_port=integers["METRICS_PORT"],
        header_timeout=durations["HEADER_TIMEOUT"],
        body_timeout=durations["BODY_TIMEOUT"],
        keep_alive=durations["KEEP_ALIVE"],
    )
