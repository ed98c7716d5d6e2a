"""The HTTP layer over real sockets: whole bodies only, authentication first, timeouts, limits, and a
4xx in OpenAI's error shape for every malformed request."""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg
import pytest

from lambdas.ledger.connections import PooledConnections
from services.inference.keys import ApiKeyStore
from services.inference.server import InferenceServer
from tests.services.inference.conftest import call, metric, model_passes, settled_metric, wait_ready
from tests.services.inference.wire import (
    closed_by_server,
    connection,
    exchange,
    read_replies,
    read_reply,
    request_head,
)

TEXT = {"model": "all-MiniLM-L6-v2", "input": "The sweep stopped the host at its deadline."}


def assert_openai_error(status: int, body: bytes, expected_status: int) -> dict[str, object]:
    assert status == expected_status, body
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


def stored_rows(database: str, key: str) -> int:
    with psycopg.connect(database) as connection:
        row = connection.execute(
            "SELECT count(*) FROM inference_idempotency WHERE key = %s", (key,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_an_upload_cut_short_stores_nothing_and_the_full_retry_runs(
    idempotent_service: InferenceServer, tenant_key: Callable[[str], str], service_database: str
):
    key, idempotency_key = tenant_key("cut"), str(uuid.uuid4())
    body = json.dumps(TEXT).encode()
    headers = {
        "Authorization": f"Bearer {key}",
        "Idempotency-Key": idempotency_key,
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
    }
    before = model_passes(idempotent_service.metrics_url)
    aborted = metric(
        idempotent_service.metrics_url, "parkbrake_inference_aborted_uploads_total", 'reason="disconnected"'
    )
    with connection(idempotent_service.url) as sock:  # half the body, then the client hangs up
        sock.sendall(request_head("/v1/embeddings", headers) + body[: len(body) // 2])
        sock.shutdown(socket.SHUT_WR)
        assert closed_by_server(sock)
    counted = settled_metric(
        idempotent_service.metrics_url,
        'parkbrake_inference_aborted_uploads_total{reason="disconnected"}',
        aborted + 1,
    )
    retry = call(
        idempotent_service.url,
        "/v1/embeddings",
        raw=body,
        headers={k: v for k, v in headers.items() if k != "Content-Length"},
    )

    assert counted == aborted + 1
    assert retry.status == 200
    assert "Idempotent-Replayed" not in retry.headers
    assert len(retry.json()["data"][0]["embedding"]) == 384
    assert model_passes(idempotent_service.metrics_url) - before == 1


def test_a_body_shorter_than_its_content_length_is_never_processed(
    service: InferenceServer, tenant_key: Callable[[str], str], service_database: str
):
    key, idempotency_key = tenant_key("short"), str(uuid.uuid4())
    body = json.dumps(TEXT).encode()
    headers = {
        "Authorization": f"Bearer {key}",
        "Idempotency-Key": idempotency_key,
        "Content-Length": str(len(body) + 10),
    }
    before = model_passes(service.metrics_url)
    with connection(service.url) as sock:
        sock.sendall(request_head("/v1/embeddings", headers) + body)  # 10 bytes short, then gone
        sock.shutdown(socket.SHUT_WR)
        assert closed_by_server(sock)

    assert stored_rows(service_database, idempotency_key) == 0
    assert model_passes(service.metrics_url) == before
    full = call(
        service.url,
        "/v1/embeddings",
        raw=body,
        headers={"Authorization": f"Bearer {key}", "Idempotency-Key": idempotency_key},
    )
    assert full.status == 200
    assert stored_rows(service_database, idempotency_key) == 1


def test_a_stalled_body_times_out_with_408_and_its_key_stays_free(
    start_server, service_database: str, tenant_key: Callable[[str], str]
):
    server = wait_ready(start_server(service_database, PARKBRAKE_INFERENCE_BODY_TIMEOUT="1s"))
    key, idempotency_key = tenant_key("stall"), str(uuid.uuid4())
    body = json.dumps(TEXT).encode()
    headers = {
        "Authorization": f"Bearer {key}",
        "Idempotency-Key": idempotency_key,
        "Content-Length": str(len(body)),
    }
    with connection(server.url) as sock:
        sock.sendall(request_head("/v1/embeddings", headers) + body[:5])
        stalled = read_reply(sock)
        assert closed_by_server(sock)

    assert_openai_error(stalled.status, stalled.body, 408)
    assert stored_rows(service_database, idempotency_key) == 0
    assert (
        call(
            server.url,
            "/v1/embeddings",
            raw=body,
            headers={"Authorization": f"Bearer {key}", "Idempotency-Key": idempotency_key},
        ).status
        == 200
    )


def test_headers_that_never_finish_get_408_and_the_connection_closes(start_server, service_database: str):
    server = wait_ready(start_server(service_database, PARKBRAKE_INFERENCE_HEADER_TIMEOUT="1s"))
    with connection(server.url) as sock:
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        reply = read_reply(sock)
        assert closed_by_server(sock)
    assert assert_openai_error(reply.status, reply.body, 408)["code"] == "request_timeout"


def test_the_api_key_is_checked_before_the_body_is_read(service: InferenceServer):
    """Without a key, the answer (401) comes while the announced body has not been sent at all."""
    headers = {"Content-Length": "100000", "Content-Type": "application/json"}
    with connection(service.url) as sock:
        sock.sendall(request_head("/v1/embeddings", headers) + b"{")
        reply = read_reply(sock)
        assert closed_by_server(sock)  # the rest of the body is never awaited
    assert assert_openai_error(reply.status, reply.body, 401)["code"] == "invalid_api_key"
    assert reply.headers["www-authenticate"] == "Bearer"


def test_stalled_connections_without_a_key_hold_no_worker_and_do_not_delay_the_drain(
    start_server, service_database: str, tenant_key: Callable[[str], str]
):
    server = wait_ready(
        start_server(
            service_database,
            PARKBRAKE_INFERENCE_WORKERS="2",
            PARKBRAKE_INFERENCE_HEADER_TIMEOUT="300s",
            PARKBRAKE_INFERENCE_DRAIN="300s",
        )
    )
    key = tenant_key("beside-stalls")
    stalled: list[socket.socket] = []
    try:
        for index in range(150):  # half stall inside their headers, half one byte into a body
            sock = socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=60)
            if index % 2:
                sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Le")
            else:
                sock.sendall(request_head("/v1/embeddings", {"Content-Length": "1000"}) + b"{")
            stalled.append(sock)
        answered = [read_reply(sock).status for sock in stalled[::2]]  # the ones whose headers arrived
        served = call(server.url, "/v1/embeddings", body=TEXT, headers={"Authorization": f"Bearer {key}"})
        in_flight = metric(server.metrics_url, "parkbrake_inference_in_flight_requests")
        server.begin_drain()
        stopped = server.wait_stopped(timeout=60)
    finally:
        for sock in stalled:
            sock.close()

    assert set(answered) == {401}
    assert served.status == 200  # with two workers, past 150 stalled connections
    assert in_flight == 0
    assert stopped  # the drain ended with no request in flight, not after its 300 s


MALFORMED_BODIES = {
    "model is a list": (b'{"model": ["all-MiniLM-L6-v2"], "input": "x"}', 400, "model"),
    "model is an object": (b'{"model": {"name": "all-MiniLM-L6-v2"}, "input": "x"}', 400, "model"),
    "model is a number": (b'{"model": 7, "input": "x"}', 400, "model"),
    "a lone surrogate in input": (b'{"model": "all-MiniLM-L6-v2", "input": "\\ud800"}', 400, "input"),
    "a lone surrogate in a list": (
        b'{"model": "all-MiniLM-L6-v2", "input": ["ok", "a\\udfffb"]}',
        400,
        "input",
    ),
    "a lone surrogate elsewhere": (
        b'{"model": "all-MiniLM-L6-v2", "input": "x", "user": "\\ud800"}',
        400,
        None,
    ),
    "100,000-deep array": (b"[" * 100_000 + b"]" * 100_000, 400, None),
    "100,000-deep input": (
        b'{"model": "all-MiniLM-L6-v2", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        400,
        None,
    ),
    "input is a number": (b'{"model": "all-MiniLM-L6-v2", "input": 5}', 400, "input"),
    "input holds numbers": (b'{"model": "all-MiniLM-L6-v2", "input": [1, 2]}', 400, "input"),
    "input is null": (b'{"model": "all-MiniLM-L6-v2", "input": null}', 400, "input"),
    "encoding_format is a list": (
        b'{"model": "all-MiniLM-L6-v2", "input": "x", "encoding_format": []}',
        400,
        "encoding_format",
    ),
    "dimensions is a string": (
        b'{"model": "all-MiniLM-L6-v2", "input": "x", "dimensions": "384"}',
        400,
        "dimensions",
    ),
    "the body is a list": (b'["all-MiniLM-L6-v2"]', 400, None),
    "the body is a string": (b'"all-MiniLM-L6-v2"', 400, None),
    "the body is not UTF-8": (b'{"model": "\xff\xfe"}', 400, None),
    "a number past int's digits": (
        b'{"model": "all-MiniLM-L6-v2", "input": "x", "dimensions": ' + b"9" * 5000 + b"}",
        400,
        None,
    ),
}


@pytest.mark.parametrize("with_key", [False, True], ids=["no-idempotency-key", "idempotency-key"])
@pytest.mark.parametrize("case", list(MALFORMED_BODIES))
def test_every_malformed_body_is_a_4xx_naming_the_field(
    idempotent_service: InferenceServer, tenant_key: Callable[[str], str], case: str, with_key: bool
):
    body, status, param = MALFORMED_BODIES[case]
    headers = {"Authorization": f"Bearer {tenant_key('malformed')}"}
    if with_key:
        headers["Idempotency-Key"] = str(uuid.uuid4())
    before = model_passes(idempotent_service.metrics_url)
    reply = call(idempotent_service.url, "/v1/embeddings", raw=body, headers=headers)

    error = assert_openai_error(reply.status, reply.body, status)
    assert error["param"] == param
    assert model_passes(idempotent_service.metrics_url) == before


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: \xc2\xb2\r\n\r\n",  # "²"
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n",
        b"GARBAGE\r\n\r\n",
        b"POST /v1/embeddings HTTP/9.9\r\nHost: x\r\n\r\n",
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 70_000 + b"\r\n\r\n",
    ],
    ids=[
        "superscript-two",
        "negative",
        "two-lengths",
        "space-in-name",
        "no-request-line",
        "http-9.9",
        "huge-header",
    ],
)
def test_a_request_the_parser_refuses_is_a_4xx_in_openais_shape(service: InferenceServer, head: bytes):
    with connection(service.url) as sock:
        sock.sendall(head)
        reply = read_reply(sock)
        assert closed_by_server(sock)
    assert 400 <= reply.status < 500
    assert_openai_error(reply.status, reply.body, reply.status)
    assert reply.headers["content-type"] == "application/json"


def test_a_chunked_body_without_content_length_is_411(
    service: InferenceServer, tenant_key: Callable[[str], str]
):
    headers = {"Authorization": f"Bearer {tenant_key('chunked')}", "Transfer-Encoding": "chunked"}
    reply = exchange(service.url, request_head("/v1/embeddings", headers) + b"2\r\n{}\r\n0\r\n\r\n")
    assert assert_openai_error(reply.status, reply.body, 411)["code"] == "invalid_request_error"


def test_the_server_header_names_no_versions(service: InferenceServer):
    reply = call(service.url, "/healthz")
    assert reply.headers["Server"] == "parkbrake-inference"
    assert not any(character.isdigit() for character in reply.headers["Server"])


def test_models_lists_the_model_in_openais_format(service: InferenceServer):
    listed = call(service.url, "/v1/models")
    one = call(service.url, "/v1/models/all-MiniLM-L6-v2")
    unknown = call(service.url, "/v1/models/text-embedding-3-large")

    assert listed.status == 200
    assert listed.json() == {
        "object": "list",
        "data": [
            {
                "id": "all-MiniLM-L6-v2",
                "object": "model",
                "created": 1630281600,
                "owned_by": "sentence-transformers",
            }
        ],
    }
    assert one.json() == listed.json()["data"][0]
    assert assert_openai_error(unknown.status, unknown.body, 404)["param"] == "model"


def test_metrics_are_on_their_own_port_only(service: InferenceServer):
    on_api_port = call(service.url, "/metrics")
    on_metrics_port = call(service.metrics_url, "/metrics")
    api_on_metrics_port = call(service.metrics_url, "/v1/models")

    assert_openai_error(on_api_port.status, on_api_port.body, 404)
    assert on_metrics_port.status == 200
    assert b"parkbrake_inference_model_passes_total" in on_metrics_port.body
    assert api_on_metrics_port.status == 404
    assert service.metrics_port != int(service.url.rsplit(":", 1)[1])


def test_unknown_routes_and_methods_are_openai_errors(service: InferenceServer):
    missing = call(service.url, "/v2/everything")
    wrong_method = call(service.url, "/v1/embeddings")  # GET
    assert assert_openai_error(missing.status, missing.body, 404)["code"] == "not_found"
    assert assert_openai_error(wrong_method.status, wrong_method.body, 405)["code"] == "method_not_allowed"


def test_too_many_connections_are_refused_with_503_and_closed(start_server, service_database: str):
    server = wait_ready(start_server(service_database, PARKBRAKE_INFERENCE_MAX_CONNECTIONS="3"))
    held = [
        socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=30)
        for _ in range(3)
    ]
    try:
        for sock in held:  # each connection is accepted before the next is opened
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_reply(sock).status == 200
        with connection(server.url) as extra:
            refused = read_reply(extra)
            assert closed_by_server(extra)
    finally:
        for sock in held:
            sock.close()
    assert assert_openai_error(refused.status, refused.body, 503)["code"] == "overloaded"
    assert refused.headers["retry-after"] == "1"


def test_keep_alive_serves_several_requests_on_one_connection(service: InferenceServer):
    with connection(service.url) as sock:
        statuses = []
        for _ in range(3):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            statuses.append(read_reply(sock).status)
    assert statuses == [200, 200, 200]


def test_pipelined_requests_are_answered_one_at_a_time_in_order(service: InferenceServer):
    with connection(service.url) as sock:
        sock.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        first, second = read_replies(sock, 2)
    assert first.json() == {"revision": "test-revision"}
    assert second.json()["object"] == "list"


def test_the_drain_finishes_without_waiting_for_idle_keep_alive_connections(
    start_server, service_database: str
):
    server = wait_ready(
        start_server(
            service_database, PARKBRAKE_INFERENCE_KEEP_ALIVE="300s", PARKBRAKE_INFERENCE_DRAIN="300s"
        )
    )
    with connection(server.url) as idle:
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_reply(idle).status == 200
        server.begin_drain()
        assert server.wait_stopped(timeout=60)
        assert closed_by_server(idle)


def test_threads_are_not_one_per_connection(start_server, service_database: str):
    """200 idle connections: the process's thread count does not grow with them."""
    server = wait_ready(start_server(service_database))
    before = threading.active_count()
    socks = [
        socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=30)
        for _ in range(200)
    ]
    try:
        for sock in socks:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_reply(sock).status == 200
        during = threading.active_count()
    finally:
        for sock in socks:
            sock.close()
    assert during - before < 20


def test_a_key_revoked_after_use_is_refused_at_once_with_an_idempotency_key(
    idempotent_service: InferenceServer, service_database: str
):
    """A key verified moments ago is not looked up again before the body; its claim checks it."""
    connections = PooledConnections(service_database, max_size=1)
    keys = ApiKeyStore(connections)
    made = keys.create(f"revoked-{uuid.uuid4().hex[:8]}", datetime.now(UTC))
    headers = {"Authorization": f"Bearer {made.key}"}
    before = model_passes(idempotent_service.metrics_url)
    used = call(
        idempotent_service.url,
        "/v1/embeddings",
        body=TEXT,
        headers=headers | {"Idempotency-Key": str(uuid.uuid4())},
    )
    keys.revoke(made.id, datetime.now(UTC))
    connections.close()
    idempotency_key = str(uuid.uuid4())
    refused = call(
        idempotent_service.url,
        "/v1/embeddings",
        body=TEXT,
        headers=headers | {"Idempotency-Key": idempotency_key},
    )
    refused_again = call(
        idempotent_service.url,
        "/v1/embeddings",
        body=TEXT,
        headers=headers | {"Idempotency-Key": idempotency_key},
    )
    without_key = call(idempotent_service.url, "/v1/embeddings", body=TEXT, headers=headers)

    assert used.status == 200
    assert assert_openai_error(refused.status, refused.body, 401)["code"] == "invalid_api_key"
    assert refused_again.status == without_key.status == 401
    assert model_passes(idempotent_service.metrics_url) - before == 1
