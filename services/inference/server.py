"""The HTTP server: routes, readiness, SIGTERM drain, the retention sweeper, and the console script.

A thread per connection (``ThreadingHTTPServer``): the model call releases the GIL inside ONNX Runtime
and the database calls block on sockets, so threads give real concurrency without an event loop.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import click
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from guardrails.clock import SystemClock
from guardrails.errors import ParkbrakeError
from lambdas.ledger.connections import Connections, LedgerUnavailable, PooledConnections, database_url
from services.inference.api import EMBEDDINGS_PATH, EmbeddingsApi, Request, Response
from services.inference.idempotency import IdempotencyStore, PostgresIdempotencyStore
from services.inference.keys import ApiKeyStore
from services.inference.metrics import ServiceMetrics
from services.inference.model import Embedder
from services.inference.redis_store import RedisIdempotencyStore, redis_client
from services.inference.settings import ServiceSettings, settings_from_environment

log = logging.getLogger("parkbrake.inference")
NOT_READY_RETRY_AFTER = "5"
MAX_SWEEP_BATCHES = 100  # per round: a backlog is worked off over several rounds, never in one long lock


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
        self.http = _HttpServer((host, port), _handler(self))

    @property
    def url(self) -> str:
        host, port = self.http.server_address[:2]
        return f"http://{host!s}:{port}"

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
            self.http.serve_forever(poll_interval=0.1)
        finally:
            self._stopped.set()
            self.http.server_close()

    def _load(self) -> None:
        try:
            embedder = self._loader()
            embedder.warm()
        except BaseException as error:  # reported by main() as a non-zero exit
            log.exception("the model failed to load")
            self.load_error = error
            threading.Thread(target=self.http.shutdown, daemon=True).start()
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
        self.http.shutdown()

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


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    # The socket's listen backlog (socketserver's default is 5): a burst of retries opens many
    # connections at once, and past the backlog the kernel resets them.
    request_queue_size = 512


def service_connections(url: str, *, pool_size: int) -> PooledConnections:
    """The service's pool. Its writes are idempotency rows only, committed without waiting for the WAL
    flush (``synchronous_commit=off``): a PostgreSQL crash may lose the last fraction of a second of
    claims, which costs at most one extra model run on retry, while every claim saves an fsync.
    Connections are not checked with a round trip at each checkout (it doubled every statement's
    cost): one the server closed fails its request with 503 and the pool replaces it."""
    parts = conninfo_to_dict(url)
    options = f"{parts.get('options') or ''} -c synchronous_commit=off".strip()
    return PooledConnections(make_conninfo(url, options=options), max_size=pool_size, check=False)


def _handler(server: InferenceServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "parkbrake-inference"

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes; without this, Nagle's algorithm holds the body
            # back until the client's delayed ACK (tens of milliseconds on every keep-alive response).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            started = time.perf_counter()
            if self.path == "/healthz":
                if server.ready:
                    response = Response.json(200, {"status": "ok"})
                else:
                    state = "draining" if server.draining else "loading the model"
                    response = Response.json(503, {"status": state}, Retry_After=NOT_READY_RETRY_AFTER)
            elif self.path == "/version":
                response = Response.json(200, {"revision": server.settings.revision})
            elif self.path == "/metrics":
                response = Response(
                    200, generate_latest(server.metrics.registry), {"Content-Type": CONTENT_TYPE_LATEST}
                )
            else:
                response = Response.error(404, f"no route GET {self.path}", "not_found")
            self._send(response, started)

        def do_POST(self) -> None:
            started = time.perf_counter()
            if self.path != EMBEDDINGS_PATH:
                self._discard_body()
                return self._send(Response.error(404, f"no route POST {self.path}", "not_found"), started)
            if not server.enter():
                self._discard_body()
                refusal = Response.error(
                    503,
                    "this host is shutting down; retry (another host will answer)",
                    "draining",
                    Retry_After="1",
                )
                return self._send(refusal, started, close=True)
            try:
                response = self._embeddings()
                try:
                    self._send(response, started)
                finally:  # also when the client hung up first: its retry gets the replay
                    if response.then is not None:
                        self._after_sending(response.then)
            finally:
                server.leave()

        def _after_sending(self, then: Callable[[], None]) -> None:
            # A failure here leaves the claim running until its lease lapses (a retry within it
            # waits, then gets 409; after it, runs once): counted and logged.
            try:
                then()
            except Exception:
                server.metrics.store_errors.inc()
                log.exception("the response was sent but could not be stored for replays")

        def _embeddings(self) -> Response:
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self.close_connection = True
                return Response.error(411, "Content-Length is required", "invalid_request_error")
            if int(length) > server.settings.max_request_bytes:
                self.close_connection = True
                limit = server.settings.max_request_bytes
                return Response.error(
                    413, f"the body is {length} bytes; the limit is {limit}", "request_too_large"
                )
            body = self.rfile.read(int(length))
            if server._embedder is None:
                return Response.error(
                    503, "the model is still loading", "not_ready", Retry_After=NOT_READY_RETRY_AFTER
                )
            headers = {name.lower(): value for name, value in self.headers.items()}
            try:
                return server.api.handle(Request("POST", self.path, headers, body))
            except LedgerUnavailable as error:
                log.error("%s", error)
                return Response.error(
                    503,
                    "the service's database is unavailable; retry shortly",
                    "unavailable",
                    Retry_After="2",
                )
            except Exception:
                log.exception("request failed")
                return Response.error(500, "the request failed inside the service; retry", "server_error")

        def _discard_body(self) -> None:
            length = self.headers.get("Content-Length", "0")
            if length.isdigit() and int(length) <= server.settings.max_request_bytes:
                self.rfile.read(int(length))
            else:
                self.close_connection = True

        def _send(self, response: Response, started: float, *, close: bool = False) -> None:
            route = (
                self.path if self.path in (EMBEDDINGS_PATH, "/healthz", "/version", "/metrics") else "other"
            )
            self.send_response(response.status)
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            if close or server.draining:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(response.body)
            server.metrics.requests.labels(route, str(response.status)).inc()
            server.metrics.latency.labels(route).observe(time.perf_counter() - started)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

    return Handler


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 in a container)."
)
@click.option(
    "--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port."
)
def main(host: str, port: int) -> None:
    """Serve all-MiniLM-L6-v2 embeddings (OpenAI's /v1/embeddings) with API keys and idempotent retries.

    Database from PARKBRAKE_DATABASE_URL (tables: `parkbrake ledger migrate`); revision from
    PARKBRAKE_REVISION; tuning from PARKBRAKE_INFERENCE_* (docs/inference.md).
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = settings_from_environment(os.environ)
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
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: server.begin_drain())
    click.echo(json.dumps({"listening": server.url, "revision": settings.revision}), nl=True)
    sys.stdout.flush()
    try:
        server.serve()
    finally:
        connections.close()
    if server.load_error is not None:
        click.echo(f"error: the model failed to load: {server.load_error}", err=True)
        sys.exit(1)
