"""A real HTTP proxy on 127.0.0.1 in front of moto's server that counts AWS calls and fails chosen ones.

Point one client's ``endpoint_url`` at :attr:`FaultProxy.url` and every request goes over HTTP to
moto unchanged, except the actions told to fail: those get AWS's own error body for the protocol
(EC2's XML, the query protocol's XML, or JSON), so botocore parses, retries and raises exactly as it
would against AWS. Nothing in boto3 is patched.

    with FaultProxy(moto_server) as proxy:
        proxy.fail("StopInstances", "UnauthorizedOperation", "not authorized", status=403)
        ec2 = boto3.client("ec2", endpoint_url=proxy.url)

:meth:`FaultProxy.rewrite` instead changes moto's answer to an action (to inject what moto never
reports, such as a scaling activity EC2 failed for want of capacity).

moto's backends are not thread-safe (two removals from one Auto Scaling group at once can lose a
decrement); ``serial_upstream=True`` hands moto one request at a time, as AWS needs no one to, while
the clients' calls still overlap at the proxy (a rewrite runs outside that lock).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


@dataclass(frozen=True)
class ProxiedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    action: str

    @property
    def text(self) -> str:
        return urllib.parse.unquote_plus(self.body.decode("utf-8", "replace"))


@dataclass
class FaultRule:
    action: str
    code: str
    message: str
    status: int
    times: int | None  # None: every matching call
    matches: Callable[[ProxiedRequest], bool] | None
    rewrite: Callable[[bytes], bytes] | None = None  # moto's answer, changed; None: fail with ``code``


def action_of(method: str, path: str, headers: dict[str, str], body: bytes) -> str:
    """The AWS operation a request calls, whatever the protocol."""
    target = headers.get("x-amz-target")
    if target:  # JSON protocols: "AWSEvents.PutRule"
        return target.rsplit(".", 1)[-1]
    if "/operation/" in path:  # smithy rpc-v2-cbor: /service/<Service>/operation/<Operation>
        return path.rsplit("/", 1)[-1]
    form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
    if "Action" in form:  # EC2 and query protocols
        return form["Action"][0]
    return f"{method} {urllib.parse.urlsplit(path).path}"  # REST protocols (e.g. Scheduler)


def error_response(request: ProxiedRequest, code: str, message: str) -> tuple[str, bytes, dict[str, str]]:
    """AWS's error body for the request's protocol: content type, body, extra headers."""
    if request.headers.get("x-amz-target") or not request.body.startswith(b"Action="):
        payload = json.dumps({"__type": code, "message": message}).encode()
        return "application/x-amz-json-1.1", payload, {"x-amzn-ErrorType": code}
    if b"Version=2016-11-15" in request.body:  # EC2's own XML shape
        body = (
            f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            "<RequestID>fault-proxy</RequestID></Response>"
        )
    else:
        body = (
            f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message>"
            "</Error><RequestId>fault-proxy</RequestId></ErrorResponse>"
        )
    return "text/xml", body.encode(), {}


class FaultProxy:
    def __init__(self, upstream: str, *, serial_upstream: bool = False) -> None:
        split = urllib.parse.urlsplit(upstream)
        self._upstream_lock: contextlib.AbstractContextManager[object] = (
            threading.Lock() if serial_upstream else contextlib.nullcontext()
        )
        self.upstream_host = split.hostname or "127.0.0.1"
        self.upstream_port = split.port or 80
        self.calls: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self._rules: list[FaultRule] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(
        self,
        action: str,
        code: str,
        message: str = "injected by the fault proxy",
        *,
        status: int = 400,
        times: int | None = None,
        matches: Callable[[ProxiedRequest], bool] | None = None,
    ) -> None:
        """Answer ``action`` with ``code`` (``times`` times, or always), optionally only for matching calls."""
        with self._lock:
            self._rules.append(FaultRule(action, code, message, status, times, matches))

    def rewrite(self, action: str, change: Callable[[bytes], bytes]) -> None:
        """Answer every call of ``action`` with moto's answer passed through ``change``."""
        with self._lock:
            self._rules.append(FaultRule(action, "", "", 200, None, None, change))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self.calls.clear()
            self.failed.clear()

    def _rule_for(self, request: ProxiedRequest) -> FaultRule | None:
        with self._lock:
            self.calls[request.action] += 1
            for rule in self._rules:
                if rule.action != request.action or (rule.matches and not rule.matches(request)):
                    continue
                if rule.times is not None:
                    if rule.times == 0:
                        continue
                    rule.times -= 1
                self.failed[request.action] += rule.rewrite is None
                return rule
        return None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The headers and the body go out in two writes: with Nagle's algorithm the body would wait
            # for the client's delayed ACK, 40 ms a call that no AWS endpoint adds.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:  # quiet: tests read the counters
                return

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {key.lower(): value for key, value in self.headers.items()}
                request = ProxiedRequest(
                    self.command, self.path, headers, body, action_of(self.command, self.path, headers, body)
                )
                rule = proxy._rule_for(request)
                if rule is not None and rule.rewrite is None:
                    content_type, payload, extra = error_response(request, rule.code, rule.message)
                    self._reply(rule.status, {"Content-Type": content_type, **extra}, payload)
                    return
                upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=120)
                try:
                    forwarded = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                    with proxy._upstream_lock:
                        upstream.request(self.command, self.path, body=body, headers=forwarded)
                        response = upstream.getresponse()
                        payload = response.read()
                finally:
                    upstream.close()
                if rule is not None and rule.rewrite is not None:
                    payload = rule.rewrite(payload)
                kept = {k: v for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP}
                self._reply(response.status, kept, payload)

            def _reply(self, status: int, headers: dict[str, str], payload: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _forward

        return Handler
