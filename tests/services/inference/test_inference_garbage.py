"""Generated garbage against the request parser: never anything but a request or a 4xx naming why."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.inference.api import BadRequest, Response, parse_embeddings_request
from services.inference.server import InferenceServer
from tests.services.inference.conftest import call
from tests.services.inference.wire import connection, read_reply

# Text with what breaks parsers: lone surrogates, control characters, NUL, astral characters.
nasty_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | nasty_text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(nasty_text, inner, max_size=4),
    max_leaves=12,
)
fields = st.sampled_from(["model", "input", "encoding_format", "dimensions", "user"])
documents = st.dictionaries(fields, json_values | st.just("all-MiniLM-L6-v2"), max_size=5) | json_values


def encoded(document: object) -> bytes:
    # ensure_ascii: a lone surrogate goes out as the \\ud800 escape a client would send
    return json.dumps(document, ensure_ascii=True).encode()


raw_bodies = (
    st.binary(max_size=200)
    | documents.map(encoded)
    | st.integers(1, 200_000).map(lambda depth: b"[" * depth + b"]" * depth)
    | st.integers(1, 200_000).map(lambda depth: b'{"model":"all-MiniLM-L6-v2","input":' + b"[" * depth)
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_bodies)
def test_the_body_parser_returns_a_request_or_a_bad_request(body: bytes):
    refused: BadRequest | None = None
    try:
        inputs, encoding = parse_embeddings_request(body, max_inputs=2048)
    except BadRequest as error:
        refused = error
    if refused is not None:
        assert 400 <= refused.status < 500
        refusal = Response.error(refused.status, str(refused), refused.kind, param=refused.param)
        assert json.loads(refusal.body)["error"]["message"] == str(refused)  # it can always be sent
        return
    assert inputs
    assert all(isinstance(item, str) and item for item in inputs)
    for item in inputs:
        item.encode()  # valid Unicode: the tokenizer will take it
    assert encoding in ("float", "base64")


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=raw_bodies, with_key=st.booleans())
def test_garbage_bodies_over_http_are_never_a_server_error(
    service: InferenceServer, tenant_key: Callable[[str], str], body: bytes, with_key: bool
):
    headers = {"Authorization": f"Bearer {tenant_key('garbage')}"}
    if with_key:
        headers["Idempotency-Key"] = str(uuid.uuid4())
    reply = call(service.url, "/v1/embeddings", raw=body, headers=headers)

    assert reply.status < 500, reply.body[:300]
    if reply.status != 200:
        assert set(reply.json()["error"]) == {"message", "type", "param", "code"}


header_text = st.binary(max_size=60).filter(lambda value: b"\r" not in value and b"\n" not in value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from([b"POST", b"GET", b"PUT", b"P\x00ST", b""]),
    target=st.sampled_from([b"/v1/embeddings", b"/v1/models", b"*", b"http://x/v1/embeddings", b"/%ff%00"])
    | header_text,
    version=st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2", b"", b"HTTP/1.1 extra"]),
    headers=st.lists(st.tuples(header_text, header_text), max_size=4),
    length=st.sampled_from([None, b"0", b"\xc2\xb2", b"-5", b"1e3", b"99999999999999999999", b" 3", b"3, 4"]),
)
def test_garbage_requests_on_the_wire_get_a_4xx_in_openais_shape_or_a_close(
    service: InferenceServer,
    *,
    method: bytes,
    target: bytes,
    version: bytes,
    headers: list[tuple[bytes, bytes]],
    length: bytes | None,
):
    lines = [method + b" " + target + b" " + version, b"Host: x"]
    lines += [name + b": " + value for name, value in headers]
    if length is not None:
        lines.append(b"Content-Length: " + length)
    with connection(service.url, timeout=30) as sock:
        sock.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + b"{}")
        try:
            reply = read_reply(sock)
        except (ConnectionError, TimeoutError):
            return  # closed without an answer, or waiting for a body it was promised: never a 5xx
    assert reply.status < 500, reply.body[:300]
    if reply.status >= 400:
        assert set(json.loads(reply.body)["error"]) == {"message", "type", "param", "code"}
