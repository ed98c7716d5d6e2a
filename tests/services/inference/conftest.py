"""The inference service for tests: the real model (loaded once), real PostgreSQL, real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

from lambdas.ledger.connections import PooledConnections
from services.inference.export import build_model
from services.inference.keys import ApiKeyStore
from services.inference.model import Embedder
from services.inference.server import InferenceServer, service_connections
from services.inference.settings import settings_from_environment
from tests.lambdas.ledger.conftest import _create_database, _drop_database, ledger_template, ledger_url
from tests.services.inference.redis_server import redis_server

__all__ = ["ledger_template", "ledger_url"]  # the ledger's fixtures: a migrated database per test

FAST_SETTINGS = {
    "PARKBRAKE_REVISION": "test-revision",
    "PARKBRAKE_INFERENCE_RATE_LIMIT": "1000",
    "PARKBRAKE_INFERENCE_BURST": "1000",
    "PARKBRAKE_INFERENCE_DATABASE_POOL": "8",
    "PARKBRAKE_INFERENCE_METRICS_PORT": "0",  # a free port each: tests run several servers at once
}


class Headers(dict[str, str]):
    """Response headers by name, in any case (RFC 9110: names are case-insensitive; uvicorn sends
    them lower-case)."""

    def __init__(self, items: Any) -> None:
        super().__init__((name.lower(), value) for name, value in items)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(
    url: str,
    path: str,
    *,
    body: object = None,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """One HTTP request; error statuses are returned, not raised."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(
        url + path, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return Reply(response.status, Headers(response.headers.items()), response.read())
    except urllib.error.HTTPError as error:
        return Reply(error.code, Headers(error.headers.items()), error.read())


def model_passes(metrics_url: str) -> float:
    return metric(metrics_url, "parkbrake_inference_model_passes_total")


def metric(metrics_url: str, name: str, labels: str = "") -> float:
    """A sample's value from /metrics (0 when absent), served on the metrics port; ``labels`` as
    Prometheus writes them."""
    text = call(metrics_url, "/metrics").body.decode()
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        if sample == wanted:
            return float(value)
    return 0.0


def settled_metric(metrics_url: str, name: str, expected: float, *, limit: float = 10.0) -> float:
    """A sample that work after the response moves: polled until it reads ``expected`` or ``limit`` passes."""
    deadline = time.monotonic() + limit
    while (value := metric(metrics_url, name)) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Valkey/Redis server on 127.0.0.1 for the session (skipped off CI when none is installed)."""
    with redis_server() as url:
        yield url


@pytest.fixture(scope="session")
def onnx_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The graph as the image bakes it, written once per session."""
    path = tmp_path_factory.mktemp("model") / "all-MiniLM-L6-v2.onnx"
    path.write_bytes(build_model().SerializeToString())
    return path


@pytest.fixture(scope="session")
def embedder(onnx_file: Path) -> Embedder:
    return Embedder.load(onnx_file)


@pytest.fixture(scope="session")
def service_database(database_url: str, ledger_template: str) -> Iterator[str]:
    """One migrated database for the session's services; tests keep apart by tenant and key."""
    name = _create_database(database_url, template=ledger_template)
    yield make_conninfo(database_url, dbname=name)
    _drop_database(database_url, name)


@pytest.fixture(scope="session")
def start_server(embedder: Embedder) -> Iterator[Callable[..., InferenceServer]]:
    """Starts in-process servers sharing the session's model; all are stopped at the end."""
    started: list[tuple[InferenceServer, PooledConnections, threading.Thread]] = []

    def start(
        database: str, *, loader: Callable[[], Embedder] | None = None, **environment: str
    ) -> InferenceServer:
        settings = settings_from_environment(FAST_SETTINGS | environment)
        connections = service_connections(database, pool_size=settings.database_pool)
        server = InferenceServer(settings, connections, loader=loader or (lambda: embedder))
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        started.append((server, connections, thread))
        return server

    yield start
    for server, connections, thread in started:
        if not server.draining:
            server.stop()
        thread.join(timeout=30)
        connections.close()


def wait_ready(server: InferenceServer) -> InferenceServer:
    for _ in range(600):
        if call(server.url, "/healthz").status == 200:
            return server
        threading.Event().wait(0.05)
    raise AssertionError("the service did not become ready")


@pytest.fixture(scope="session")
def service(start_server: Callable[..., InferenceServer], service_database: str) -> InferenceServer:
    return wait_ready(start_server(service_database))


@pytest.fixture(scope="session", params=["postgres", "redis"])
def store_environment(request: pytest.FixtureRequest) -> dict[str, str]:
    """The service's settings for each idempotency store: the idempotency tests run against both."""
    if request.param == "postgres":
        return {}
    return {"PARKBRAKE_INFERENCE_REDIS_URL": request.getfixturevalue("redis_url")}


@pytest.fixture(scope="session")
def idempotent_service(
    start_server: Callable[..., InferenceServer], service_database: str, store_environment: dict[str, str]
) -> InferenceServer:
    return wait_ready(start_server(service_database, **store_environment))


@pytest.fixture
def tenant_key(service_database: str) -> Callable[[str], str]:
    """Makes an API key for a tenant of this test (names made unique, so tests never share state)."""
    connections = PooledConnections(service_database, max_size=1)
    store = ApiKeyStore(connections)

    def make(tenant: str = "acme") -> str:
        return store.create(f"{tenant}-{uuid.uuid4().hex[:8]}", datetime.now(UTC)).key

    yield make  # type: ignore[misc]
    connections.close()
