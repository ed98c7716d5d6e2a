"""The server: two listening sockets (the API, ``/metrics``), readiness, SIGTERM drain, the
retention sweeper, and the console script.

HTTP is uvicorn (httptools' parser, uvloop when installed) serving the Starlette apps of
``services/inference/app.py`` through the connection limits of ``services/inference/protocol.py``.
The event loop only moves bytes; the database calls and the model pass run in worker threads
(ONNX Runtime releases the GIL while it runs), at most ``PARKBRAKE_INFERENCE_WORKERS`` at once.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

import anyio
import click
import uvicorn
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from guardrails.clock import SystemClock
from guardrails.errors import ParkbrakeError
from lambdas.ledger.connections import Connections, LedgerUnavailable, PooledConnections, database_url
from services.inference.api import EmbeddingsApi
from services.inference.app import api_app, by_port, metrics_app
from services.inference.fairness import TenantSlots
from services.inference.idempotency import IdempotencyStore, PostgresIdempotencyStore
from services.inference.keys import ApiKeyStore
from services.inference.metrics import ServiceMetrics
from services.inference.model import Embedder
from services.inference.protocol import protocol_for
from services.inference.redis_store import RedisIdempotencyStore, redis_client
from services.inference.settings import (
    MAX_PORT,
    METRICS_PORT_VARIABLE,
    ServiceSettings,
    settings_from_environment,
)

log = logging.getLogger("parkbrake.inference")
MAX_SWEEP_BATCHES = 100  # per round: a backlog is worked off over several rounds, never in one long lock
# The listen backlog: a burst of retries opens many connections at once, and past the backlog the
# kernel resets them.
LISTEN_BACKLOG = 2048
# After the drain: what uvicorn gives connections still open before it cancels their tasks.
CLOSE_SECONDS = 1.0


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, with SIGTERM and SIGINT starting the service's drain instead of its shutdown
    (which closes the listening socket at once: the load balancer's health check must see 503)."""

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_signal = on_signal

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_signal()


def listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


class InferenceServer:
    def __init__(
        self,
        settings: ServiceSettings,
        connections: Connections,
        *,
        loader: Callable[[], Embedder],
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.settings = settings
        self.metrics = ServiceMetrics()
        self.clock = SystemClock()
        self.keys = ApiKeyStore(connections)
        self.store = idempotency_store(settings, connections, self.keys)
        self.api = EmbeddingsApi(
            settings=settings,
            embedder=self._loaded,
            keys=self.keys,
            store=self.store,
            metrics=self.metrics,
            now=self.clock.now,
        )
        self._loader = loader
        self._embedder: Embedder | None = None
        self.load_error: BaseException | None = None
        self._state = threading.Condition()
        self._in_flight = 0
        self.draining = False
        self._stopped = threading.Event()
        # Bound now, so the URLs are known (and connections queue in the backlog) before serve().
        self._sockets = [listening_socket(host, port), listening_socket(host, settings.metrics_port)]
        self.workers = anyio.CapacityLimiter(settings.workers)
        # Storing a sent response has threads of its own: requests waiting for that very response
        # (a retry racing the original) may hold every worker, and must not keep it from being stored.
        self.completions = anyio.CapacityLimiter(settings.workers)
        self.tenant_slots = TenantSlots(settings.tenant_workers, self.metrics.waiting.labels("tenant_slot"))
        config = uvicorn.Config(
            by_port(api_app(self), metrics_app(self), lambda: self.metrics_port),
            http=protocol_for(
                header_timeout=settings.header_timeout.total_seconds(),
                max_connections=settings.max_connections,
            ),
            lifespan="off",
            log_config=None,
            access_log=False,
            # Without versions: the header says what answers, not what to look up exploits for.
            server_header=False,
            headers=[("Server", "parkbrake-inference")],
            timeout_keep_alive=int(settings.keep_alive.total_seconds()),
            timeout_graceful_shutdown=int(CLOSE_SECONDS),
            backlog=LISTEN_BACKLOG,
        )
        self._uvicorn = _Uvicorn(config, self.begin_drain)

    @property
    def url(self) -> str:
        host, port = self._sockets[0].getsockname()[:2]
        return f"http://{host!s}:{port}"

    @property
    def metrics_port(self) -> int:
        return int(self._sockets[1].getsockname()[1])

    @property
    def metrics_url(self) -> str:
        host = self._sockets[1].getsockname()[0]
        return f"http://{host!s}:{self.metrics_port}"

    @property
    def loaded(self) -> bool:
        return self._embedder is not None

    @property
    def ready(self) -> bool:
        return self._embedder is not None and not self.draining

    def _loaded(self) -> Embedder:
        assert self._embedder is not None, "requests reach the model only once it is loaded"
        return self._embedder

    def serve(self) -> None:
        """Load the model and sweep in the background; serve until drained (blocks)."""
        threading.Thread(target=self._load, name="model-loader", daemon=True).start()
        threading.Thread(target=self._sweep_forever, name="retention-sweeper", daemon=True).start()
        try:
            self._uvicorn.run(sockets=self._sockets)
        finally:
            self._stopped.set()
            self.api.leases.stop()
            self.api.long_runs.shutdown()
            for sock in self._sockets:
                sock.close()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Whether :meth:`serve` returned (drained or stopped) within ``timeout`` seconds."""
        return self._stopped.wait(timeout)

    def stop(self) -> None:
        """Stop serving now, without a drain (tests; the drain ends with this too)."""
        self._uvicorn.should_exit = True

    def _load(self) -> None:
        try:
            embedder = self._loader()
            embedder.warm()
        except BaseException as error:  # reported by main() as a non-zero exit
            log.exception("the model failed to load")
            self.load_error = error
            self.stop()
            return
        self._embedder = embedder
        self.metrics.ready.set(0 if self.draining else 1)
        log.info("model loaded on %s; ready", embedder.device)

    def begin_drain(self) -> None:
        """SIGTERM: refuse new requests, let in-flight ones finish (up to the drain time), then stop."""
        with self._state:
            if self.draining:
                return
            self.draining = True
        self.metrics.ready.set(0)
        log.info("draining: %d request(s) in flight", self._in_flight)
        threading.Thread(target=self._drain, name="drain", daemon=True).start()

    def _drain(self) -> None:
        deadline = time.monotonic() + self.settings.drain.total_seconds()
        with self._state:
            while self._in_flight and time.monotonic() < deadline:
                self._state.wait(timeout=max(0.0, deadline - time.monotonic()))
            left = self._in_flight
        if left:
            log.error("drain time over with %d request(s) still in flight; their claims will lapse", left)
        self.stop()

    def enter(self) -> bool:
        """Count a request in, unless draining (checked under the same lock the drain waits on)."""
        with self._state:
            if self.draining:
                return False
            self._in_flight += 1
            self.metrics.in_flight.inc()
            return True

    def leave(self) -> None:
        with self._state:
            self._in_flight -= 1
            self.metrics.in_flight.dec()
            self._state.notify_all()

    def _sweep_forever(self) -> None:
        while not self._stopped.wait(self.settings.sweep_every.total_seconds()):
            self.sweep_once()

    def sweep_once(self) -> int:
        deleted = 0
        try:
            for _ in range(MAX_SWEEP_BATCHES):
                batch = self.store.sweep(self.clock.now(), batch=self.settings.sweep_batch)
                deleted += batch
                if batch < self.settings.sweep_batch:
                    break
        except LedgerUnavailable:
            self.metrics.sweep_errors.inc()
            log.exception("the retention sweep failed")
        self.metrics.swept.inc(deleted)
        return deleted


def idempotency_store(
    settings: ServiceSettings, connections: Connections, keys: ApiKeyStore
) -> IdempotencyStore:
    """PostgreSQL's, beside the API keys (one round trip on the way in); Redis/Valkey's when configured."""
    if settings.redis_url is None:
        return PostgresIdempotencyStore(connections, settings.lease, settings.max_stored_bytes)
    client = redis_client(settings.redis_url, pool_size=settings.database_pool)
    return RedisIdempotencyStore(client, keys, settings.lease, settings.max_stored_bytes)


def service_connections(url: str, *, pool_size: int) -> PooledConnections:
    """The service's pool. Its writes are idempotency rows only, committed without waiting for the WAL
    flush (``synchronous_commit=off``): a PostgreSQL crash may lose the last fraction of a second of
    claims, which costs at most one extra model run on retry, while every claim saves an fsync.
    Connections are not checked with a round trip at each checkout (it doubled every statement's
    cost): one the server closed fails its request with 503 and the pool replaces it."""
    parts = conninfo_to_dict(url)
    options = f"{parts.get('options') or ''} -c synchronous_commit=off".strip()
    return PooledConnections(make_conninfo(url, options=options), max_size=pool_size, check=False)


class OneLineUsageErrors(click.Command):
    """A bad flag is one line, ``error: …``, exit 2, like a bad setting (click would add its usage lines)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as error:
            click.echo(f"error: {error.format_message()}", err=True)
            ctx.exit(2)


class TcpPort(click.ParamType):
    """A port flag: digits only, 0 to 65535 (0 picks a free port), or one line naming the flag."""

    name = "port"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        # ASCII digits, as the settings read them: "²" is a digit to str.isdigit.
        if not (text.isascii() and text.isdigit() and len(text) <= 5) or int(text) > MAX_PORT:
            self.fail(f"{text!r} is not a TCP port (0–{MAX_PORT}; 0 picks a free one)", param, ctx)
        return int(text)


TCP_PORT = TcpPort()


@click.command(cls=OneLineUsageErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 in a container)."
)
@click.option(
    "--port", default=8080, show_default=True, type=TCP_PORT, help="The API's port; 0 picks a free port."
)
@click.option(
    "--metrics-port",
    type=TCP_PORT,
    help=f"/metrics' own port (default: ${METRICS_PORT_VARIABLE}, else 9464; the flag wins); 0 picks a free port.",
)
def main(host: str, port: int, metrics_port: int | None) -> None:
    """Serve all-MiniLM-L6-v2 embeddings (OpenAI's /v1/embeddings) with API keys and idempotent retries.

    Database from PARKBRAKE_DATABASE_URL (tables: `parkbrake ledger migrate`; a local one: `parkbrake
    dev database`); revision from PARKBRAKE_REVISION; tuning from PARKBRAKE_INFERENCE_*
    (docs/inference.md). /metrics is on its own port, never the API's: --metrics-port.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    environ = dict(os.environ)
    if metrics_port is not None:  # the flag wins over the variable (a bad variable is then moot)
        environ[METRICS_PORT_VARIABLE] = str(metrics_port)
    try:
        settings = settings_from_environment(environ)
        connections = service_connections(database_url(os.environ), pool_size=settings.database_pool)
    except ParkbrakeError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(error.exit_code)
    server = InferenceServer(
        settings,
        connections,
        loader=lambda: Embedder.load(settings.model_file, threads=settings.threads),
        host=host,
        port=port,
    )
    # SIGTERM and SIGINT start the drain (uvicorn's signal handlers call begin_drain).
    listening = {"listening": server.url, "metrics": server.metrics_url, "revision": settings.revision}
    click.echo(json.dumps(listening), nl=True)
    sys.stdout.flush()
    try:
        server.serve()
    finally:
        connections.close()
    if server.load_error is not None:
        click.echo(f"error: the model failed to load: {server.load_error}", err=True)
        sys.exit(1)
