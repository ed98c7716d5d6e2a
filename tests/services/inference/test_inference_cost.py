"""A request's cost is bounded: inputs run in batches, a token ceiling, and a lease kept alive while a
long pass runs so that a concurrent retry never runs it a second time."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from services.inference.model import Embedder, Embeddings
from tests.services.inference.conftest import Reply, call, metric, model_passes, wait_ready

TEXT = {"model": "all-MiniLM-L6-v2", "input": "The sweep stopped the host at its deadline."}


class Recorded:
    """The real model, with the size of each batch it is given recorded (and, when armed, each
    batch held for ``delay`` seconds first, as a long pass on a busy device would be)."""

    def __init__(self, model: Embedder, delay: float = 0.0) -> None:
        self.model, self.delay = model, delay
        self.batches: list[int] = []
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def embed(self, texts: list[str]) -> Embeddings:
        if self.armed:
            self.batches.append(len(texts))
            time.sleep(self.delay)
        return self.model.embed(texts)


def embed(url: str, key: str, body: object, idempotency_key: str | None = None) -> Reply:
    headers = {"Authorization": f"Bearer {key}"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    return call(url, "/v1/embeddings", body=body, headers=headers)


def test_inputs_run_in_batches_of_the_configured_size_with_the_same_vectors(
    start_server, service_database: str, embedder: Embedder, tenant_key: Callable[[str], str]
):
    recorded = Recorded(embedder)
    server = wait_ready(
        start_server(service_database, PARKBRAKE_INFERENCE_BATCH_SIZE="2", loader=lambda: recorded)
    )
    recorded.armed = True
    texts = [f"sentence number {n} " + "word " * n for n in range(5)]
    reply = embed(server.url, tenant_key("batched"), {"model": "all-MiniLM-L6-v2", "input": texts})
    whole = embedder.embed(texts)

    assert reply.status == 200
    assert recorded.batches == [2, 2, 1]
    got = np.array([item["embedding"] for item in reply.json()["data"]])
    assert [item["index"] for item in reply.json()["data"]] == list(range(5))
    assert np.allclose(got, whole.vectors, atol=1e-5)  # padding to a batch's longest changes nothing
    assert reply.json()["usage"]["prompt_tokens"] == whole.tokens
    assert model_passes(server.metrics_url) == 1  # one request, one pass, however many batches


def test_a_request_over_the_token_ceiling_is_400_and_nothing_runs(
    start_server, service_database: str, embedder: Embedder, tenant_key: Callable[[str], str]
):
    recorded = Recorded(embedder)
    server = wait_ready(
        start_server(service_database, PARKBRAKE_INFERENCE_MAX_REQUEST_TOKENS="300", loader=lambda: recorded)
    )
    recorded.armed = True
    key = tenant_key("ceiling")
    long_text = " ".join(["accelerator"] * 300)  # 256 tokens after truncation
    over = embed(server.url, key, {"model": "all-MiniLM-L6-v2", "input": [long_text, long_text]})
    under = embed(server.url, key, {"model": "all-MiniLM-L6-v2", "input": [long_text, "short"]})

    assert over.status == 400
    error = over.json()["error"]
    assert error["param"] == "input"
    assert "512 tokens" in error["message"]
    assert "PARKBRAKE_INFERENCE_MAX_REQUEST_TOKENS" in error["message"]
    assert under.status == 200
    assert recorded.batches == [2]  # only the request under the ceiling reached the model


def test_a_pass_longer_than_the_lease_is_not_run_again_by_a_concurrent_retry(
    start_server,
    service_database: str,
    store_environment: dict[str, str],
    embedder: Embedder,
    tenant_key: Callable[[str], str],
):
    slow = Recorded(embedder, delay=3.0)  # three times the lease
    server = wait_ready(
        start_server(
            service_database,
            **store_environment,
            PARKBRAKE_INFERENCE_LEASE="1s",
            PARKBRAKE_INFERENCE_WAIT="10s",
            loader=lambda: slow,
        )
    )
    slow.armed = True
    key, idempotency_key = tenant_key("long-pass"), str(uuid.uuid4())
    replies: list[Reply] = []
    first = threading.Thread(target=lambda: replies.append(embed(server.url, key, TEXT, idempotency_key)))
    first.start()
    while not slow.batches:  # the first request is in its pass
        time.sleep(0.01)
    time.sleep(1.5)  # past the lease the claim was taken with
    retry = embed(server.url, key, TEXT, idempotency_key)
    first.join(timeout=60)

    assert replies[0].status == retry.status == 200
    assert retry.body == replies[0].body
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert slow.batches == [1]
    assert model_passes(server.metrics_url) == 1
    assert metric(server.metrics_url, "parkbrake_inference_idempotency_lease_renewals_total") >= 1
    assert server.api.leases.held() == 0  # dropped once the response was stored
