"""POST /v1/embeddings over real HTTP: OpenAI's shape, keys, rate limit and the idempotency layer."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from guardrails.idempotency import REPLAYED_HEADER
from lambdas.ledger.connections import LedgerUnavailable, PooledConnections
from services.inference.api import EmbeddingsApi, Request
from services.inference.idempotency import Outcome, PostgresIdempotencyStore, Scope
from services.inference.keys import ApiKeyStore
from services.inference.metrics import ServiceMetrics
from services.inference.model import Embedder
from services.inference.server import InferenceServer, service_connections
from services.inference.settings import settings_from_environment
from tests.services.inference.conftest import (
    FAST_SETTINGS,
    call,
    metric,
    model_passes,
    settled_metric,
    wait_ready,
)

REFERENCE = Path(__file__).with_name("reference") / "vectors.json"
TEXT = {"model": "all-MiniLM-L6-v2", "input": "The sweep stopped the host at its deadline."}


def embed(url: str, key: str, body: object = TEXT, idempotency_key: str | None = None, **headers: str):
    sent = {"Authorization": f"Bearer {key}", **headers}
    if idempotency_key is not None:
        sent["Idempotency-Key"] = idempotency_key
    return call(url, "/v1/embeddings", body=body, headers=sent)


def test_embeddings_match_the_reference_implementation(
    service: InferenceServer, tenant_key: Callable[[str], str]
):
    reference = json.loads(REFERENCE.read_text())["items"]
    reply = embed(
        service.url, tenant_key("ref"), {"model": "all-MiniLM-L6-v2", "input": [i["text"] for i in reference]}
    )

    assert reply.status == 200
    document = reply.json()
    assert document["object"] == "list"
    assert document["model"] == "all-MiniLM-L6-v2"
    assert [item["index"] for item in document["data"]] == list(range(len(reference)))
    assert document["usage"]["prompt_tokens"] == document["usage"]["total_tokens"] > len(reference)
    for item, expected in zip(document["data"], reference, strict=True):
        got, want = np.array(item["embedding"]), np.array(expected["embedding"])
        cosine = got @ want / (np.linalg.norm(got) * np.linalg.norm(want))
        assert cosine >= 0.999, expected["text"]


def test_a_string_input_and_base64_encoding(service: InferenceServer, tenant_key: Callable[[str], str]):
    key = tenant_key("shape")
    plain = embed(service.url, key).json()["data"]
    packed = embed(service.url, key, TEXT | {"encoding_format": "base64"}).json()["data"]

    assert len(plain) == 1
    assert len(plain[0]["embedding"]) == 384
    decoded = np.frombuffer(base64.b64decode(packed[0]["embedding"]), dtype="<f4")
    assert np.allclose(decoded, plain[0]["embedding"], atol=1e-6)


def test_a_retry_replays_the_stored_response_byte_for_byte_and_the_model_ran_once(
    idempotent_service: InferenceServer, tenant_key: Callable[[str], str]
):
    key, idempotency_key = tenant_key("retry"), str(uuid.uuid4())
    before = model_passes(idempotent_service.metrics_url)
    first = embed(idempotent_service.url, key, idempotency_key=idempotency_key)
    second = embed(idempotent_service.url, key, idempotency_key=idempotency_key)
    # Same JSON, other key order and spacing: the canonical fingerprint makes it the same request.
    reordered = call(
        idempotent_service.url,
        "/v1/embeddings",
        raw=b'{ "input": "The sweep stopped the host at its deadline.",  "model": "all-MiniLM-L6-v2" }',
        headers={"Authorization": f"Bearer {key}", "Idempotency-Key": idempotency_key},
    )

    assert first.status == second.status == reordered.status == 200
    assert second.body == first.body == reordered.body
    assert "Idempotent-Replayed" not in first.headers
    assert second.headers["Idempotent-Replayed"] == reordered.headers["Idempotent-Replayed"] == "true"
    assert second.headers["Content-Type"] == "application/json"
    assert model_passes(idempotent_service.metrics_url) - before == 1


def test_fifty_concurrent_requests_with_one_key_run_the_model_once(
    idempotent_service: InferenceServer, tenant_key: Callable[[str], str]
):
    key, idempotency_key = tenant_key("storm"), str(uuid.uuid4())
    body = {"model": "all-MiniLM-L6-v2", "input": ["storm"] * 16}
    before = model_passes(idempotent_service.metrics_url)
    with ThreadPoolExecutor(max_workers=50) as pool:
        replies = list(
            pool.map(lambda _: embed(idempotent_service.url, key, body, idempotency_key), range(50))
        )

    assert {reply.status for reply in replies} == {200}
    assert len({reply.body for reply in replies}) == 1
    assert sum(reply.headers.get("Idempotent-Replayed") == "true" for reply in replies) == 49
    assert model_passes(idempotent_service.metrics_url) - before == 1


def test_same_key_different_body_is_422_and_nothing_runs(
    idempotent_service: InferenceServer, tenant_key: Callable[[str], str]
):
    key, idempotency_key = tenant_key("reuse"), str(uuid.uuid4())
    assert embed(idempotent_service.url, key, idempotency_key=idempotency_key).status == 200
    before = model_passes(idempotent_service.metrics_url)
    reply = embed(idempotent_service.url, key, TEXT | {"input": "something else"}, idempotency_key)

    assert reply.status == 422
    assert idempotency_key in reply.json()["error"]["message"]
    assert model_passes(idempotent_service.metrics_url) == before


def test_a_client_error_is_stored_and_replayed(
    idempotent_service: InferenceServer, tenant_key: Callable[[str], str]
):
    key, idempotency_key = tenant_key("bad"), str(uuid.uuid4())
    before = model_passes(idempotent_service.metrics_url)
    first = embed(idempotent_service.url, key, {"model": "all-MiniLM-L6-v2", "input": []}, idempotency_key)
    second = embed(idempotent_service.url, key, {"model": "all-MiniLM-L6-v2", "input": []}, idempotency_key)

    assert first.status == second.status == 400
    assert first.json()["error"]["param"] == "input"
    assert second.body == first.body
    assert second.headers["Idempotent-Replayed"] == "true"
    assert model_passes(idempotent_service.metrics_url) == before


class FailsOnce:
    """The real model behind a fault: its first pass raises, as a GPU error would."""

    def __init__(self, model: Embedder) -> None:
        self.model, self.failed = model, False
        self.device = model.device

    def embed(self, texts: list[str]):
        if not self.failed:
            self.failed = True
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return self.model.embed(texts)

    def warm(self) -> None:
        self.model.warm()


def test_a_server_error_is_not_stored_and_the_retry_runs_once(
    start_server,
    service_database: str,
    store_environment: dict[str, str],
    embedder: Embedder,
    tenant_key: Callable[[str], str],
):
    server = wait_ready(
        start_server(service_database, **store_environment, loader=lambda: FailsOnce(embedder))
    )
    server_model = server._loaded()
    assert isinstance(server_model, FailsOnce)
    server_model.failed = False  # warm-up used the fault; arm it again for the request
    key, idempotency_key = tenant_key("flaky"), str(uuid.uuid4())
    failed = embed(server.url, key, idempotency_key=idempotency_key)
    retried = embed(server.url, key, idempotency_key=idempotency_key)
    replayed = embed(server.url, key, idempotency_key=idempotency_key)

    assert failed.status == 500
    assert retried.status == 200
    assert "Idempotent-Replayed" not in retried.headers
    assert replayed.body == retried.body
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert model_passes(server.metrics_url) == 1


def test_tenants_never_see_each_others_results(
    idempotent_service: InferenceServer, tenant_key: Callable[[str], str]
):
    alice, bob, shared_key = tenant_key("alice"), tenant_key("bob"), "order-1"
    from_alice = embed(idempotent_service.url, alice, TEXT | {"input": "alice's text"}, shared_key)
    from_bob = embed(idempotent_service.url, bob, TEXT | {"input": "bob's text"}, shared_key)
    bob_again = embed(idempotent_service.url, bob, TEXT | {"input": "bob's text"}, shared_key)

    assert from_alice.status == from_bob.status == 200
    assert "Idempotent-Replayed" not in from_bob.headers
    assert from_alice.body != from_bob.body == bob_again.body


def test_requests_without_a_key_are_served_each_time(
    service: InferenceServer, tenant_key: Callable[[str], str]
):
    key = tenant_key("plain")
    before = model_passes(service.metrics_url)
    assert embed(service.url, key).status == embed(service.url, key).status == 200
    assert model_passes(service.metrics_url) - before == 2


@pytest.mark.parametrize(
    ("idempotency_key", "status"),
    [("k" * 255, 200), ('"quoted-structured-field"', 200), ("k" * 256, 400), ("has space", 400), ("", 400)],
)
def test_idempotency_key_validation(
    service: InferenceServer, tenant_key: Callable[[str], str], idempotency_key: str, status: int
):
    reply = embed(service.url, tenant_key("keys"), idempotency_key=idempotency_key)
    assert reply.status == status
    if status == 400:
        assert "Idempotency-Key" in reply.json()["error"]["message"]


def test_a_request_whose_key_is_still_running_elsewhere_gets_409_with_retry_after(
    start_server, service_database: str, store_environment: dict[str, str], tenant_key: Callable[[str], str]
):
    server = wait_ready(start_server(service_database, **store_environment, PARKBRAKE_INFERENCE_WAIT="1s"))
    key, idempotency_key = tenant_key("busy"), str(uuid.uuid4())
    tenant = server.keys.tenant_of(key)
    assert tenant is not None
    # Another worker holds the claim (claimed through the same store, with the same request).
    from guardrails.idempotency import fingerprint

    body = json.dumps(TEXT).encode()
    scope = Scope(tenant[0], "POST /v1/embeddings", idempotency_key)
    held = server.store.claim(scope, fingerprint("POST", "/v1/embeddings", body), server.clock.now())
    assert held.outcome is Outcome.CLAIMED
    reply = call(
        server.url,
        "/v1/embeddings",
        raw=body,
        headers={"Authorization": f"Bearer {key}", "Idempotency-Key": idempotency_key},
    )

    assert reply.status == 409
    assert 1 <= int(reply.headers["Retry-After"]) <= 60
    assert model_passes(server.metrics_url) == 0
    assert (
        metric(
            server.metrics_url,
            "parkbrake_inference_idempotency_conflicts_total",
            f'reason="in_progress",tenant="{tenant[0]}"',
        )
        == 1
    )


def test_a_response_over_the_store_limit_is_a_clear_stored_error(
    start_server, service_database: str, store_environment: dict[str, str], tenant_key: Callable[[str], str]
):
    server = wait_ready(
        start_server(service_database, **store_environment, PARKBRAKE_INFERENCE_MAX_STORED_BYTES="8000")
    )
    key, idempotency_key = tenant_key("big"), str(uuid.uuid4())
    body = TEXT | {"input": [f"text {n}" for n in range(20)]}
    first = embed(server.url, key, body, idempotency_key)
    second = embed(server.url, key, body, idempotency_key)

    assert first.status == 413
    assert "PARKBRAKE_INFERENCE_MAX_STORED_BYTES" in first.json()["error"]["message"]
    assert second.body == first.body
    assert second.headers["Idempotent-Replayed"] == "true"
    assert embed(server.url, key, TEXT, str(uuid.uuid4())).status == 200  # small responses are kept


def test_a_missing_or_wrong_or_revoked_key_is_401(service: InferenceServer, service_database: str):
    connections = PooledConnections(service_database, max_size=1)
    store = ApiKeyStore(connections)
    revoked = store.create("gone", datetime.now(UTC))
    store.revoke(revoked.id, datetime.now(UTC))
    connections.close()
    before = model_passes(service.metrics_url)

    no_key = call(service.url, "/v1/embeddings", body=TEXT)
    wrong = embed(service.url, "pbk_not-a-key")
    revoked_reply = embed(service.url, revoked.key)

    assert no_key.status == wrong.status == revoked_reply.status == 401
    assert no_key.headers["WWW-Authenticate"] == "Bearer"
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert model_passes(service.metrics_url) == before


def test_a_key_over_its_rate_gets_429_with_retry_after(
    start_server, service_database: str, tenant_key: Callable[[str], str]
):
    server = wait_ready(
        start_server(service_database, PARKBRAKE_INFERENCE_RATE_LIMIT="1", PARKBRAKE_INFERENCE_BURST="2")
    )
    limited, other = tenant_key("limited"), tenant_key("other")
    replies = [embed(server.url, limited) for _ in range(3)]

    assert [reply.status for reply in replies] == [200, 200, 429]
    assert replies[2].headers["Retry-After"] == "1"
    assert embed(server.url, other).status == 200  # the limit is per key


def test_a_service_that_requires_keys_refuses_requests_without_one(
    start_server, service_database: str, tenant_key: Callable[[str], str]
):
    server = wait_ready(start_server(service_database, PARKBRAKE_INFERENCE_REQUIRE_IDEMPOTENCY_KEY="true"))
    key = tenant_key("strict")

    refused = embed(server.url, key)
    assert refused.status == 400
    assert "Idempotency-Key" in refused.json()["error"]["message"]
    assert embed(server.url, key, idempotency_key=str(uuid.uuid4())).status == 200


def test_unknown_models_and_bad_json_name_the_field(
    service: InferenceServer, tenant_key: Callable[[str], str]
):
    key = tenant_key("fields")
    unknown = embed(service.url, key, {"model": "text-embedding-3-large", "input": "x"})
    not_json = call(
        service.url, "/v1/embeddings", raw=b"{not json", headers={"Authorization": f"Bearer {key}"}
    )

    assert unknown.status == 404
    assert unknown.json()["error"]["param"] == "model"
    assert not_json.status == 400
    assert "not JSON" in not_json.json()["error"]["message"]


def test_version_and_metrics(service: InferenceServer, tenant_key: Callable[[str], str]):
    key = tenant_key("metered")
    embed(service.url, key)
    tenant = service.keys.tenant_of(key)
    assert tenant is not None

    assert call(service.url, "/version").json() == {"revision": "test-revision"}
    text = call(service.metrics_url, "/metrics").body.decode()
    assert f'parkbrake_inference_gpu_seconds_total{{device="cpu",tenant="{tenant[0]}"}}' in text
    assert 'parkbrake_inference_request_duration_seconds_count{route="/v1/embeddings"}' in text


def test_healthz_is_503_until_the_model_is_loaded(start_server, service_database: str, embedder: Embedder):
    import threading

    release = threading.Event()

    def slow_loader() -> Embedder:
        release.wait(timeout=60)
        return embedder

    server = start_server(service_database, loader=slow_loader)
    loading = call(server.url, "/healthz")
    refused = call(server.url, "/v1/embeddings", body=TEXT)
    release.set()
    wait_ready(server)

    assert loading.status == 503
    assert loading.headers["Retry-After"] == "5"
    assert refused.status == 503
    assert call(server.url, "/healthz").json() == {"status": "ok"}


def test_verify_reads_the_running_revision_from_version(service: InferenceServer):
    from cli.oncall.deploy.revision_checks import check_version_endpoint

    assert check_version_endpoint(service.url, "test-revision").passed
    wrong = check_version_endpoint(service.url, "0123abc")
    assert not wrong.passed
    assert "test-revision" in wrong.detail


def test_the_servers_sweeper_deletes_expired_responses_and_counts_them(
    service: InferenceServer, service_database: str
):
    from datetime import timedelta

    from services.inference.idempotency import StoredResponse

    long_ago = service.clock.now() - timedelta(days=3)
    scope = Scope(f"swept-{uuid.uuid4().hex[:8]}", "POST /v1/embeddings", "old-key")
    claim = service.store.claim(scope, "fp", long_ago)
    assert claim.owner is not None
    service.store.complete(scope, claim.owner, StoredResponse(200, {}, b"{}"), long_ago)
    before = metric(service.metrics_url, "parkbrake_inference_idempotency_swept_total")

    assert service.sweep_once() >= 1
    assert metric(service.metrics_url, "parkbrake_inference_idempotency_swept_total") - before >= 1
    assert service.store.claim(scope, "other", service.clock.now()).outcome is Outcome.CLAIMED


@pytest.fixture
def api(service_database: str, embedder: Embedder) -> Iterator[EmbeddingsApi]:
    """The API without the HTTP server, so a test can hold a response between sending and storing."""
    settings = settings_from_environment(FAST_SETTINGS | {"PARKBRAKE_INFERENCE_WAIT": "5s"})
    connections = service_connections(service_database, pool_size=4)
    yield EmbeddingsApi(
        settings=settings,
        embedder=lambda: embedder,
        keys=ApiKeyStore(connections),
        store=PostgresIdempotencyStore(connections, settings.lease, settings.max_stored_bytes),
        metrics=ServiceMetrics(),
        now=lambda: datetime.now(UTC),
    )
    connections.close()


def embeddings_request(key: str, idempotency_key: str) -> Request:
    headers = {"authorization": f"Bearer {key}", "idempotency-key": idempotency_key}
    return Request("POST", "/v1/embeddings", headers, json.dumps(TEXT).encode())


def test_a_retry_between_sending_and_storing_waits_for_the_stored_response(
    api: EmbeddingsApi, tenant_key: Callable[[str], str]
):
    request = embeddings_request(tenant_key("deferred"), str(uuid.uuid4()))
    sent = api.handle(request)  # sent to the client; not stored yet
    assert sent.then is not None
    with ThreadPoolExecutor(max_workers=1) as pool:
        retry = pool.submit(api.handle, request)
        sent.then()  # the server stores it after sending
        replayed = retry.result(timeout=30)

    assert replayed.status == sent.status == 200
    assert replayed.body == sent.body
    assert replayed.headers[REPLAYED_HEADER] == "true"
    assert api.metrics.registry.get_sample_value("parkbrake_inference_model_passes_total") == 1


def test_a_rate_limited_request_leaves_no_claim_behind(
    start_server, service_database: str, tenant_key: Callable[[str], str]
):
    server = wait_ready(
        start_server(service_database, PARKBRAKE_INFERENCE_RATE_LIMIT="1", PARKBRAKE_INFERENCE_BURST="1")
    )
    key, limited_key = tenant_key("limited-claim"), str(uuid.uuid4())
    assert embed(server.url, key, idempotency_key=str(uuid.uuid4())).status == 200
    limited = embed(server.url, key, idempotency_key=limited_key)

    assert limited.status == 429
    with psycopg.connect(service_database) as connection:
        held = connection.execute("SELECT count(*) FROM inference_idempotency WHERE key = %s", (limited_key,))
        assert held.fetchone() == (0,)


class StoreFailsOnCompletion:
    """The real store behind a fault: completion fails as an unreachable database would."""

    def __init__(self, store: PostgresIdempotencyStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def complete(self, *args: Any) -> bool:
        raise LedgerUnavailable("the ledger database is unreachable")


def test_a_store_failure_after_sending_is_counted_and_the_client_has_its_response(
    start_server, service_database: str, tenant_key: Callable[[str], str]
):
    server = wait_ready(start_server(service_database))
    server.api._store = StoreFailsOnCompletion(server.store)
    reply = embed(server.url, tenant_key("unstored"), idempotency_key=str(uuid.uuid4()))

    assert reply.status == 200
    assert len(reply.json()["data"][0]["embedding"]) == 384
    # The store runs after the response is sent, so the counter can move a moment after the reply arrives.
    assert settled_metric(server.metrics_url, "parkbrake_inference_idempotency_store_errors_total", 1) == 1
