"""The service's settings, from its environment; every bad value is reported at once, by name."""

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
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
DURATIONS = {
    "LEASE": "60s",  # an unfinished claim lapses after this (a worker died mid-request)
    "RETENTION": "24h",  # completed responses are replayed for this long
    "WAIT": "10s",  # a request whose key is in progress waits this long for the result, then 409
    "DRAIN": "30s",  # SIGTERM: in-flight requests get this long to finish (the ALB's deregistration delay)
    "SWEEP_EVERY": "60s",  # the retention sweeper's period
}
INTEGERS = {
    "RATE_LIMIT": 20,  # requests per second per API key (sustained)
    "BURST": 40,  # requests a key may send at once
    "MAX_INPUTS": 2048,  # inputs per request, OpenAI's limit
    "MAX_REQUEST_BYTES": 4 * 1024 * 1024,
    "MAX_STORED_BYTES": DEFAULT_MAX_STORED_BYTES,
    "SWEEP_BATCH": 1000,
    "DATABASE_POOL": 16,
    "THREADS": 0,  # ONNX Runtime intra-op threads; 0 lets it choose
}


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
    redis_url: str | None = None  # the idempotency store on Redis/Valkey; None: PostgreSQL


def settings_from_environment(environ: Mapping[str, str]) -> ServiceSettings:
    problems: list[str] = []
    durations: dict[str, timedelta] = {}
    for name, default in DURATIONS.items():
        value = environ.get(PREFIX + name, default)
        try:
            durations[name] = parse_duration(value)
        except DurationError as error:
            problems.append(f"{PREFIX}{name}: {error}")
    integers: dict[str, int] = {}
    for name, fallback in INTEGERS.items():
        text = environ.get(PREFIX + name, str(fallback)).strip()
        minimum = 0 if name == "THREADS" else 1
        # ASCII digits, and few of them: "²" is a digit to str.isdigit, and int() refuses 4,300 digits.
        if not (text.isascii() and text.isdigit() and len(text) <= 12) or int(text) < minimum:
            problems.append(f"{PREFIX}{name}: {text!r} is not a whole number ≥ {minimum}")
        else:
            integers[name] = int(text)
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
    )
