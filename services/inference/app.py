"""The service's ASGI applications (Starlette): the API on one port, ``/metrics`` on another.

``POST /v1/embeddings`` is an ASGI endpoint of its own, because what it does depends on the order it
meets the request in: the route and the drain first, then ``Content-Length`` (required, at most
``PARKBRAKE_INFERENCE_MAX_REQUEST_BYTES``), then the API key, rate limit and ``Idempotency-Key``
from the headers alone, and only then the body, within ``PARKBRAKE_INFERENCE_BODY_TIMEOUT``. A body
that does not arrive whole (the client hung up, stalled, or sent fewer bytes than it announced) is
never processed: no claim is taken and nothing is stored under its key, so the full retry runs.

The database and the model are blocking calls; they run in worker threads, at most
``PARKBRAKE_INFERENCE_WORKERS`` at once (the total concurrency bound), and at most
``PARKBRAKE_INFERENCE_TENANT_WORKERS`` model runs of one tenant (services/inference/fairness.py). A
request waiting for its headers, its body, a worker, its tenant's slot, or the response of another
request holding its ``Idempotency-Key`` holds no thread: it waits on the event loop (the last polls
the store in a worker between sleeps, one round trip each).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as StarletteRequest
from starlette.responses import Response as StarletteResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from guardrails.idempotency import wait_intervals
from lambdas.ledger.connections import LedgerUnavailable
from services.inference.api import EMBEDDINGS_PATH, MODEL_ALIASES, Caller, Request, Response, Run, Waiting
from services.inference.model import MODEL_NAME

if TYPE_CHECKING:
    from services.inference.api import EmbeddingsApi
    from services.inference.fairness import TenantSlots
    from services.inference.idempotency import Scope as KeyScope
    from services.inference.metrics import ServiceMetrics
    from services.inference.settings import ServiceSettings


class InferenceServer(Protocol):
    """What the applications read of the server that runs them (services.inference.server, which
    imports this module to build them): its parts, its limits and its state."""

    api: EmbeddingsApi
    metrics: ServiceMetrics
    settings: ServiceSettings
    draining: bool
    workers: anyio.CapacityLimiter
    completions: anyio.CapacityLimiter
    tenant_slots: TenantSlots

    @property
    def loaded(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    def enter(self) -> bool: ...

    def leave(self) -> None: ...


log = logging.getLogger("parkbrake.inference")
NOT_READY_RETRY_AFTER = "5"
MODELS_PATH = "/v1/models"
ROUTES = (EMBEDDINGS_PATH, MODELS_PATH, "/healthz", "/version", "/metrics")
# The model's entry in OpenAI's list format; ``created`` is when the weights were published (2021-08-30).
MODEL_CREATED = 1630281600
MODEL_OWNER = "sentence-transformers"


def model_object(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": MODEL_CREATED, "owned_by": MODEL_OWNER}


class Embeddings:
    """``POST /v1/embeddings`` as a raw ASGI app (see the module's docstring for the order)."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server
        # The keys this host's requests hold and are running, each with the event set once its
        # response is stored (or the claim released): a retry that finds its key held here waits on
        # it instead of polling the store.
        self._running: dict[KeyScope, anyio.Event] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        server = self.server
        if not server.enter():
            refusal = Response.error(
                503,
                "this host is shutting down; retry (another host will answer)",
                "draining",
                Retry_After="1",
            )
            return await self._send(send, refusal, started, close=True)
        then: Callable[[], None] | None = None
        holding: list[tuple[KeyScope, anyio.Event]] = []  # the key this request claimed, once it has
        try:
            response, body_read = await self._respond(scope, receive, holding)
            then = response.then
            await self._send(send, response, started, close=not body_read)
        finally:
            try:
                if then is not None:  # also when the client hung up first: its retry gets the replay
                    await anyio.to_thread.run_sync(self._after_sending, then, limiter=server.completions)
            finally:
                for key_scope, stored in holding:  # stored or released now: the retries here may read it
                    if self._running.get(key_scope) is stored:  # (not a later claim's, after a release)
                        del self._running[key_scope]
                    stored.set()
                server.leave()

    async def _respond(
        self, scope: Scope, receive: Receive, holding: list[tuple[KeyScope, anyio.Event]]
    ) -> tuple[Response, bool]:
        """The response, and whether the request's body was read whole (else the connection closes)."""
        server = self.server
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        length = headers.get("content-length")
        if length is None or not (length.isascii() and length.isdigit()):
            return Response.error(411, "Content-Length is required", "invalid_request_error"), False
        limit = server.settings.max_request_bytes
        if int(length) > limit:
            message = f"the body is {length} bytes; the limit is {limit}"
            return Response.error(413, message, "request_too_large"), False
        if not server.loaded:
            refusal = Response.error(
                503, "the model is still loading", "not_ready", Retry_After=NOT_READY_RETRY_AFTER
            )
            return refusal, False
        try:
            caller = server.api.authorize_cached(headers)
        except Exception as error:
            caller = _failure(error)
        if caller is None:  # the key must be looked up: a database round trip, in a worker
            caller = await self._in_worker(server.api.authorize, headers)
        if not isinstance(caller, Caller):
            return caller, False
        body = await self._read_body(receive, int(length))
        if body is None:
            return Response.error(
                408, f"the body did not arrive whole within {server.settings.body_timeout}", "request_timeout"
            ), False
        request = Request("POST", EMBEDDINGS_PATH, headers, body)
        return await self._serve(caller, request, holding), True

    async def _serve(
        self, caller: Caller, request: Request, holding: list[tuple[KeyScope, anyio.Event]]
    ) -> Response:
        """The idempotency layer's way in (a worker, one round trip), the wait for another request
        holding the key (on the event loop), then the model (a worker, once the tenant has a slot)."""
        api = self.server.api
        outcome = await self._in_worker(api.admit, caller, request)
        if isinstance(outcome, Waiting):
            outcome = await self._wait_for_holder(outcome)
        if not isinstance(outcome, Run):
            return outcome
        if outcome.scope is not None:
            stored = self._running[outcome.scope] = anyio.Event()
            holding.append((outcome.scope, stored))
        ran = False
        try:
            async with self.server.tenant_slots.hold(outcome.tenant):
                ran = True
                return await self._in_worker(api.run, outcome)
        finally:
            if not ran:  # cancelled while waiting for a slot (the drain's end): free the key now
                threading.Thread(target=self._abandon, args=(outcome,), name="abandon-claim").start()

    async def _wait_for_holder(self, waiting: Waiting) -> Any:
        """Waits, up to PARKBRAKE_INFERENCE_WAIT, for the request holding the key to store its
        response, on the event loop: on that request's event when it runs on this host, else polling
        the store (10 ms doubling to 200 ms; one round trip in a worker each). So a storm of retries
        of one long request holds no worker. 409 once the wait is over."""
        gauge = self.server.metrics.waiting.labels("idempotency_key")
        gauge.inc()
        try:
            here = self._running.get(waiting.scope)
            if here is not None:
                with anyio.move_on_after(self.server.settings.wait.total_seconds()):
                    await here.wait()
                outcome = await self._in_worker(self.server.api.poll, waiting)
            else:
                outcome = waiting
                for interval in wait_intervals(self.server.settings.wait):
                    await anyio.sleep(interval)
                    outcome = await self._in_worker(self.server.api.poll, outcome)
                    if not isinstance(outcome, Waiting):
                        break
            return self.server.api.gave_up(outcome) if isinstance(outcome, Waiting) else outcome
        finally:
            gauge.dec()

    async def _in_worker(self, work: Callable[..., Any], *arguments: Any) -> Any:
        busy = self.server.metrics.busy_workers

        def counted() -> Any:
            busy.inc()
            try:
                return work(*arguments)
            finally:
                busy.dec()

        try:
            return await anyio.to_thread.run_sync(counted, limiter=self.server.workers)
        except Exception as error:
            return _failure(error)

    async def _read_body(self, receive: Receive, length: int) -> bytes | None:
        """The whole body, or None when it did not arrive (hung up, stalled, or short of ``length``)."""
        chunks: list[bytes] = []
        received = 0
        reason = "timeout"
        with anyio.move_on_after(self.server.settings.body_timeout.total_seconds()):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    reason = "disconnected"
                    break
                chunk = message.get("body", b"")
                received += len(chunk)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    reason = "complete" if received == length else "short"
                    break
        if reason != "complete":
            self.server.metrics.aborted_uploads.labels(reason).inc()
            return None
        return b"".join(chunks)

    def _abandon(self, work: Run) -> None:
        # Its own thread, not a worker: the task that asks for it is being cancelled, and the event
        # loop may be closing. Should the release fail, the claim lapses after its lease as a killed
        # worker's does.
        try:
            self.server.api.abandon(work)
        except Exception:
            log.exception("could not release the claim of a request cancelled before it ran")

    def _after_sending(self, then: Callable[[], None]) -> None:
        # A failure here leaves the claim running until its lease lapses (a retry within it
        # waits, then gets 409; after it, runs once): counted and logged.
        try:
            then()
        except Exception:
            self.server.metrics.store_errors.inc()
            log.exception("the response was sent but could not be stored for replays")

    async def _send(self, send: Send, response: Response, started: float, *, close: bool) -> None:
        await send_response(self.server, send, response, EMBEDDINGS_PATH, started, close=close)


def _failure(error: Exception) -> Response:
    """The response for a request whose work raised (called inside the ``except`` that caught it)."""
    if isinstance(error, LedgerUnavailable):
        log.error("%s", error)
        return Response.error(
            503, "the service's database is unavailable; retry shortly", "unavailable", Retry_After="2"
        )
    log.exception("request failed")
    return Response.error(500, "the request failed inside the service; retry", "server_error")


async def send_response(
    server: InferenceServer,
    send: Send,
    response: Response,
    route: str,
    started: float,
    *,
    close: bool = False,
) -> None:
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in response.headers.items()
    ]
    headers.append((b"content-length", str(len(response.body)).encode()))
    if close or server.draining:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})
    server.metrics.requests.labels(route, str(response.status)).inc()
    server.metrics.latency.labels(route).observe(time.perf_counter() - started)


def _plain(handler: Callable[[InferenceServer], Response], route: str, server: InferenceServer) -> Any:
    """A GET route answered from the server's state (no I/O): a Starlette endpoint."""

    async def endpoint(request: StarletteRequest) -> StarletteResponse:
        started = time.perf_counter()
        return _starlette(server, handler(server), route, started)

    return endpoint


def _starlette(server: InferenceServer, response: Response, route: str, started: float) -> StarletteResponse:
    headers = dict(response.headers)
    if server.draining:
        headers["Connection"] = "close"
    server.metrics.requests.labels(route, str(response.status)).inc()
    server.metrics.latency.labels(route).observe(time.perf_counter() - started)
    return StarletteResponse(response.body, response.status, headers)


def healthz(server: InferenceServer) -> Response:
    if server.ready:
        return Response.json(200, {"status": "ok"})
    state = "draining" if server.draining else "loading the model"
    return Response.json(503, {"status": state}, Retry_After=NOT_READY_RETRY_AFTER)


def version(server: InferenceServer) -> Response:
    return Response.json(200, {"revision": server.settings.revision})


def models(server: InferenceServer) -> Response:
    """OpenAI's ``GET /v1/models``: the model this host serves (public, as OpenAI's needs a key only
    because its list is per account; this one is the same for everyone)."""
    return Response.json(200, {"object": "list", "data": [model_object(MODEL_NAME)]})


def api_app(server: InferenceServer) -> Starlette:
    async def one_model(request: StarletteRequest) -> StarletteResponse:
        started = time.perf_counter()
        name = request.path_params["name"]
        if name in MODEL_ALIASES:
            return _starlette(server, Response.json(200, model_object(name)), MODELS_PATH, started)
        message = f"model {name!r} is not served here; use {MODEL_NAME!r}"
        return _starlette(
            server, Response.error(404, message, "model_not_found", param="model"), "other", started
        )

    async def refused(request: StarletteRequest, error: Exception) -> StarletteResponse:
        """Starlette's 404 and 405, in OpenAI's shape; an unread body closes the connection."""
        assert isinstance(error, HTTPException)
        status = error.status_code
        kind = (
            "not_found"
            if status == 404
            else "method_not_allowed"
            if status == 405
            else "invalid_request_error"
        )
        message = (
            f"no route {request.method} {request.url.path}" if status in (404, 405) else str(error.detail)
        )
        response = Response.error(status, message, kind, **dict(error.headers or {}))
        if request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers:
            response.headers["Connection"] = "close"
        return _starlette(server, response, "other", time.perf_counter())

    return Starlette(
        routes=[
            Route(EMBEDDINGS_PATH, Embeddings(server), methods=["POST"]),
            Route(MODELS_PATH, _plain(models, MODELS_PATH, server), methods=["GET"]),
            Route(MODELS_PATH + "/{name:path}", one_model, methods=["GET"]),
            Route("/healthz", _plain(healthz, "/healthz", server), methods=["GET"]),
            Route("/version", _plain(version, "/version", server), methods=["GET"]),
        ],
        exception_handlers={HTTPException: refused},
    )


def metrics_app(server: InferenceServer) -> Starlette:
    """``/metrics`` alone, on the metrics port: tenants' names are in it, so no load balancer routes it."""

    async def metrics(request: StarletteRequest) -> StarletteResponse:
        started = time.perf_counter()
        response = Response(
            200, generate_latest(server.metrics.registry), {"Content-Type": CONTENT_TYPE_LATEST}
        )
        return _starlette(server, response, "/metrics", started)

    async def refused(request: StarletteRequest, error: Exception) -> StarletteResponse:
        assert isinstance(error, HTTPException)
        message = f"no route {request.method} {request.url.path} on the metrics port (only GET /metrics)"
        kind = "not_found" if error.status_code == 404 else "method_not_allowed"
        return _starlette(
            server, Response.error(error.status_code, message, kind), "other", time.perf_counter()
        )

    return Starlette(
        routes=[Route("/metrics", metrics, methods=["GET"])], exception_handlers={HTTPException: refused}
    )


def by_port(
    api: Starlette, metrics: Starlette, metrics_port: Callable[[], int]
) -> Callable[..., Awaitable[None]]:
    """One ASGI app for both sockets: a request goes to the app of the port it came in on."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        if server is not None and server[1] == metrics_port():
            await metrics(scope, receive, send)
        else:
            await api(scope, receive, send)

    return app
