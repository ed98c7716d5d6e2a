"""The 64 KiB limit on a request's line and headers holds however the bytes arrive: in many reads, in
one read (a whole oversize block the parser would otherwise finish before counting), or behind
another request in the same read."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from services.inference.protocol import MAX_HEADER_BYTES, protocol_for
from services.inference.server import InferenceServer
from tests.services.inference.conftest import model_passes
from tests.services.inference.wire import closed_by_server, connection, read_replies, read_reply, request_head

BODY = json.dumps({"model": "all-MiniLM-L6-v2", "input": "one"}).encode()


def embeddings_request(api_key: str, padding: int) -> bytes:
    """A complete, valid request whose headers carry ``padding`` bytes of one extra header."""
    headers = {
        "Authorization": f"Bearer {api_key}",
        "Content-Length": str(len(BODY)),
        "X-Padding": "a" * padding,
    }
    return request_head("/v1/embeddings", headers) + BODY


def test_a_70000_byte_header_in_one_send_is_431_and_never_runs(
    service: InferenceServer, tenant_key: Callable[[str], str]
) -> None:
    passes = model_passes(service.metrics_url)
    with connection(service.url) as sock:
        sock.sendall(embeddings_request(tenant_key("huge"), 70_000))
        reply = read_reply(sock)
        assert closed_by_server(sock)
    assert reply.status == 431, reply.body
    assert reply.json()["error"]["code"] == "request_header_fields_too_large"
    assert model_passes(service.metrics_url) == passes


def test_headers_just_under_the_limit_are_served(
    service: InferenceServer, tenant_key: Callable[[str], str]
) -> None:
    with connection(service.url) as sock:
        sock.sendall(embeddings_request(tenant_key("large"), MAX_HEADER_BYTES - 1024))
        reply = read_reply(sock)
    assert reply.status == 200, reply.body


def test_an_oversize_request_pipelined_behind_another_is_431(
    service: InferenceServer, tenant_key: Callable[[str], str]
) -> None:
    key = tenant_key("pipelined")
    with connection(service.url) as sock:
        sock.sendall(embeddings_request(key, 10) + embeddings_request(key, 70_000))
        first, second = read_replies(sock, 2)
    assert first.status == 200, first.body
    assert second.status == 431, second.body


def test_an_oversize_request_after_another_on_a_kept_alive_connection_is_431(
    service: InferenceServer, tenant_key: Callable[[str], str]
) -> None:
    key = tenant_key("kept-alive")
    with connection(service.url) as sock:
        sock.sendall(embeddings_request(key, 10))
        first = read_reply(sock)
        sock.sendall(embeddings_request(key, 70_000))
        second = read_reply(sock)
        assert closed_by_server(sock)
    assert first.status == 200, first.body
    assert second.status == 431, second.body


async def _one_read(data: bytes) -> tuple[bytes, list[str]]:
    """The service's protocol on one end of a socket pair whose other end already holds all of
    ``data``: its first read takes it whole (asyncio reads up to 256 KiB at once). The app records
    what reaches it."""
    reached: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"reached the app"})

    config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False)
    config.load()
    protocol = protocol_for(header_timeout=10, max_connections=10)
    state = ServerState()
    server_end, client_end = socket.socketpair()
    client_end.sendall(data)
    loop = asyncio.get_running_loop()
    await loop.connect_accepted_socket(
        lambda: protocol(config=config, server_state=state, app_state={}), server_end
    )
    client_end.setblocking(False)
    answer = b""
    while chunk := await loop.sock_recv(client_end, 65536):
        answer += chunk
    client_end.close()
    return answer, reached


def test_a_whole_oversize_header_block_in_one_read_never_reaches_the_app() -> None:
    data = request_head("/v1/embeddings", {"Content-Length": "2", "X-Padding": "a" * 70_000}) + b"{}"
    assert len(data) < 200 * 1024  # within a socket pair's buffer, so all of it is there at the first read
    answer, reached = asyncio.run(_one_read(data))
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b'"code":"request_header_fields_too_large"' in answer
    assert reached == []


def test_a_body_in_the_same_read_as_small_headers_is_not_counted_as_headers() -> None:
    body = b"x" * 100_000
    data = request_head("/v1/embeddings", {"Content-Length": str(len(body)), "Connection": "close"}) + body
    answer, reached = asyncio.run(_one_read(data))
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert reached == ["/v1/embeddings"]
