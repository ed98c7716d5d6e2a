"""Fair service under retries: a request waiting for another's response holds no worker, each tenant
runs at most its share of the workers, and a request over the token ceiling is refused from its
texts' lengths without tokenizing it.

The long request is the real model behind a gate the test opens (as ``Recorded`` in
test_inference_cost.py delays it): which requests are in the model, and when, is then the test's to
say, not the machine's speed."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from services.inference.api import most_tokens
from services.inference.export import weights_dir
from services.inference.fairness import LONG_RUN_NICE, LONG_RUN_TOKENS, LongRuns
from services.inference.model import MAX_TOKENS, Embedder, Embeddings
from tests.services.inference.conftest import Reply, call, metric, model_passes, wait_ready

HELD = "held until the test opens the gate"


class Gated:
    """The real model; a batch holding ``HELD`` waits for the gate first, and how many such batches
    are in the model at once is recorded."""

    def __init__(self, model: Embedder) -> None:
        self.model = model
        self.gate = threading.Event()
        self.inside = 0
        self.most_inside = 0
        self.batches: list[int] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def embed(self, texts: list[str]) -> Embeddings:
        self.batches.append(len(texts))
        if not any(HELD in text for text in texts):
            return self.model.embed(texts)
        with self._lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            assert self.gate.wait(timeout=120), "the test never opened the gate"
            return self.model.embed(texts)
        finally:
            with self._lock:
                self.inside -= 1


def embed(url: str, key: str, inputs: list[str], idempotency_key: str | None = None) -> Reply:
    headers = {"Authorization": f"Bearer {key}"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    return call(url, "/v1/embeddings", body={"model": "all-MiniLM-L6-v2", "input": inputs}, headers=headers)


def in_background(send: Callable[[], Reply]) -> tuple[threading.Thread, list[Reply]]:
    replies: list[Reply] = []
    thread = threading.Thread(target=lambda: replies.append(send()), daemon=True)
    thread.start()
    return thread, replies


def eventually(read: Callable[[], float], expected: float, *, limit: float = 60.0) -> float:
    deadline = time.monotonic() + limit
    while (value := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def test_35_retries_of_a_running_request_hold_no_worker_and_another_tenant_is_served(
    start_server, service_database: str, embedder: Embedder, tenant_key: Callable[[str], str]
):
    gated = Gated(embedder)
    server = wait_ready(
        start_server(
            service_database,
            PARKBRAKE_INFERENCE_WORKERS="2",
            PARKBRAKE_INFERENCE_WAIT="60s",
            loader=lambda: gated,
        )
    )
    retrying, other = tenant_key("retrying"), tenant_key("other")
    idempotency_key, long_request = str(uuid.uuid4()), [f"{HELD}: a long request"]
    first, first_reply = in_background(lambda: embed(server.url, retrying, long_request, idempotency_key))
    assert eventually(lambda: gated.inside, 1) == 1
    retries = [
        in_background(lambda: embed(server.url, retrying, long_request, idempotency_key)) for _ in range(35)
    ]
    waiting = ("parkbrake_inference_waiting_requests", 'reason="idempotency_key"')
    assert eventually(lambda: metric(server.metrics_url, *waiting), 35) == 35

    served = embed(server.url, other, ["one short input"])  # two workers; the storm holds at most one

    assert served.status == 200, served.body
    assert first.is_alive()  # served while the long request still runs
    assert metric(server.metrics_url, "parkbrake_inference_busy_workers") <= 1
    gated.gate.set()
    first.join(timeout=60)
    for thread, _ in retries:
        thread.join(timeout=60)
    assert first_reply[0].status == 200
    replies = [reply for _, replied in retries for reply in replied]
    assert len(replies) == 35
    assert {reply.status for reply in replies} == {200}
    assert {reply.body for reply in replies} == {first_reply[0].body}
    assert all(reply.headers["Idempotent-Replayed"] == "true" for reply in replies)
    assert model_passes(server.metrics_url) == 2  # the long request once, the other tenant's once


def test_a_tenant_runs_at_most_its_share_and_its_other_requests_wait_holding_no_worker(
    start_server, service_database: str, embedder: Embedder, tenant_key: Callable[[str], str]
):
    gated = Gated(embedder)
    server = wait_ready(
        start_server(
            service_database,
            PARKBRAKE_INFERENCE_WORKERS="4",
            PARKBRAKE_INFERENCE_TENANT_WORKERS="1",
            loader=lambda: gated,
        )
    )
    busy, other = tenant_key("busy"), tenant_key("quiet")
    sent = [in_background(lambda n=n: embed(server.url, busy, [f"{HELD} ({n})"])) for n in range(3)]
    queued = ("parkbrake_inference_waiting_requests", 'reason="tenant_slot"')
    assert eventually(lambda: metric(server.metrics_url, *queued), 2) == 2
    assert gated.inside == 1

    served = embed(server.url, other, ["one short input"])

    assert served.status == 200, served.body
    assert gated.inside == 1  # the busy tenant's first request still holds its one slot
    gated.gate.set()
    for thread, _ in sent:
        thread.join(timeout=60)
    assert [reply.status for _, replies in sent for reply in replies] == [200, 200, 200]
    assert gated.most_inside == 1
    assert metric(server.metrics_url, *queued) == 0


def test_a_2048_input_request_over_the_token_ceiling_is_refused_without_tokenizing(
    start_server, service_database: str, embedder: Embedder, tenant_key: Callable[[str], str]
):
    gated = Gated(embedder)
    server = wait_ready(start_server(service_database, loader=lambda: gated))
    key = tenant_key("oversize")
    long_text = ("accelerator " * 22)[:254]  # 254 bytes: up to 256 tokens (a body of 0.5 MB, under 4 MiB)

    refused = embed(server.url, key, [long_text] * 2048)
    short = embed(server.url, key, ["ok"] * 2048)  # 2,048 inputs, but at most 4 tokens each

    assert refused.status == 400
    error = refused.json()["error"]
    assert error["param"] == "input"
    assert f"up to {2048 * MAX_TOKENS} tokens" in error["message"]
    assert "PARKBRAKE_INFERENCE_MAX_REQUEST_TOKENS" in error["message"]
    assert short.status == 200
    assert len(short.json()["data"]) == 2048
    assert sum(gated.batches) == 2048  # the short request's; the refused one never reached the tokenizer


TOKENIZER = Tokenizer.from_file(str(weights_dir() / "tokenizer.json"))
TOKENIZER.enable_truncation(max_length=MAX_TOKENS)
TOKENIZER.no_padding()  # tokenizer.json pads to 128; the service counts real tokens (its attention mask)


@settings(max_examples=300, deadline=None)
@example("İ" * 200)  # lower-cases to two characters, "i" and a combining dot
@example("한국어 " * 40)  # Hangul syllables decompose into two or three jamo
@example("ﬃ‼½㎏" * 30)  # compatibility characters
@example("東京タワー" * 40)  # CJK characters are a token each
@example("a.b,c!d?" * 60)  # punctuation is a token each
@given(
    text=st.text(min_size=1, max_size=400) | st.text(st.characters(codec="utf-8"), min_size=1, max_size=60)
)
def test_the_bound_from_lengths_is_never_below_the_tokens_the_model_counts(text: str) -> None:
    """The ceiling is judged from ``most_tokens``: it must never let through a request that the
    tokenizer would count past it."""
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate: refused before (parse_embeddings_request)
        return
    assert len(TOKENIZER.encode(text).ids) <= most_tokens([text])


def test_a_long_run_yields_the_cpu_on_a_thread_of_lower_priority() -> None:
    """Linux keeps the nice value per thread: the long run's thread has LONG_RUN_NICE more than the
    request's worker, which keeps its own."""
    long_runs = LongRuns(2)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    try:
        theirs = long_runs.run(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    finally:
        long_runs.shutdown()
    assert theirs == min(19, mine + LONG_RUN_NICE)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


def test_only_requests_past_the_long_run_bound_go_to_the_low_priority_threads(
    start_server, service_database: str, embedder: Embedder, tenant_key: Callable[[str], str]
):
    seen: list[str] = []

    class ThreadNames(Gated):
        def embed(self, texts: list[str]) -> Embeddings:
            seen.append(threading.current_thread().name)
            return super().embed(texts)

    server = wait_ready(start_server(service_database, loader=lambda: ThreadNames(embedder)))
    key = tenant_key("priority")
    short, long = ["one sentence"], ["a," * 127] * (LONG_RUN_TOKENS // MAX_TOKENS + 1)
    seen.clear()
    assert embed(server.url, key, short).status == 200
    assert embed(server.url, key, long).status == 200
    assert not seen[0].startswith("long-run")
    assert all(name.startswith("long-run") for name in seen[1:])


def test_a_claimed_request_cancelled_while_waiting_for_its_tenants_slot_releases_its_claim(
    start_server, service_database: str, embedder: Embedder, tenant_key: Callable[[str], str]
):
    """The drain ends by cancelling what is left: a request that claimed its key but never ran frees
    the key at once (its retry elsewhere runs it), instead of holding it a lease's length."""
    gated = Gated(embedder)
    server = wait_ready(
        start_server(
            service_database,
            PARKBRAKE_INFERENCE_WORKERS="4",
            PARKBRAKE_INFERENCE_TENANT_WORKERS="1",
            PARKBRAKE_INFERENCE_DRAIN="1s",
            loader=lambda: gated,
        )
    )
    key, idempotency_key = tenant_key("cancelled"), str(uuid.uuid4())
    running, _ = in_background(lambda: embed(server.url, key, [HELD]))
    assert eventually(lambda: gated.inside, 1) == 1
    waiting = threading.Thread(target=lambda: _quietly(embed, server.url, key, ["short"], idempotency_key))
    waiting.start()
    queued = ("parkbrake_inference_waiting_requests", 'reason="tenant_slot"')
    assert eventually(lambda: metric(server.metrics_url, *queued), 1) == 1
    assert claims(service_database, idempotency_key) == ["running"]

    server.begin_drain()

    assert server.wait_stopped(timeout=60)
    assert eventually(lambda: len(claims(service_database, idempotency_key)), 0, limit=10) == 0
    gated.gate.set()
    running.join(timeout=60)
    waiting.join(timeout=60)


def _quietly(send: Callable[..., Reply], *arguments: Any) -> None:
    with contextlib.suppress(OSError):  # the server closes the connection unanswered: this test's point
        send(*arguments)


def claims(database: str, idempotency_key: str) -> list[str]:
    with psycopg.connect(database) as connection:
        rows = connection.execute(
            "SELECT state FROM inference_idempotency WHERE key = %s", (idempotency_key,)
        )
        return [str(state) for (state,) in rows.fetchall()]
