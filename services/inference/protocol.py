"""The service's HTTP/1.1 connections: uvicorn's httptools protocol with the limits it leaves out.

uvicorn (with httptools' llhttp parser) does the parsing, keep-alive and pipelining; this subclass
adds what a public endpoint needs from the connection layer, all answered with OpenAI's error shape:

- a **header timeout**: a connection's request line and headers must arrive within
  ``PARKBRAKE_INFERENCE_HEADER_TIMEOUT`` of its first byte (or of connecting), else 408 and close
  (uvicorn arms no timer on a new connection, and any byte resets its keep-alive timer);
- a **header size** limit (llhttp has none of its own): past ``MAX_HEADER_BYTES``, 431 and close,
  counted on the wire before the parser sees a read (so a whole oversize block in one read is
  refused too) and, for a request that begins inside a read (pipelined), as the parser hands
  over its line and headers;
- a **connection** limit: past ``PARKBRAKE_INFERENCE_MAX_CONNECTIONS`` open connections, a new one
  gets 503 with ``Retry-After`` and is closed (uvicorn's own limit answers in plain text);
- a request the parser refuses (a malformed request line, header or ``Content-Length: ²``) gets
  400 with a JSON body saying what was wrong, not uvicorn's plain-text 400.

One request at a time per connection: pipelined requests wait, unread, until the one before them
is answered (uvicorn stops reading meanwhile).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

MAX_HEADER_BYTES = 64 * 1024
HEADER_END = b"\r\n\r\n"


class HeadersTooLarge(Exception):
    """Raised inside a parser callback: llhttp stops there, and the request never reaches the app."""


def error_document(message: str, kind: str) -> bytes:
    """OpenAI's error shape (as :meth:`services.inference.api.Response.error` writes it)."""
    error = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    return json.dumps(error, separators=(",", ":")).encode()


class ServiceProtocol(HttpToolsProtocol):
    """Configured through class attributes (uvicorn constructs its protocols itself): see :func:`protocol_for`."""

    header_timeout: float = 10.0
    max_connections: int = 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._reading_headers = True
        self._header_bytes = 0  # on the wire, over the reads of this request's line and headers
        self._parsed_header_bytes = 0  # as the parser hands them over
        self._tail = b""  # the last bytes of the previous read: a header end may straddle two reads
        self._refusal_after_response: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            message = "this host has too many open connections; retry (another host may answer)"
            self._refuse(503, message, "overloaded", retry_after="1")
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self._reading_headers and self._header_bytes + self._header_part(data) > MAX_HEADER_BYTES:
            return self._refuse_large_headers()
        try:
            self.parser.feed_data(data)
            if self._reading_headers and not self.transport.is_closing():
                self._header_bytes += len(data)
                self._tail = (self._tail + data)[-(len(HEADER_END) - 1) :]
        except httptools.HttpParserCallbackError as error:
            if not isinstance(error.__context__, HeadersTooLarge):
                raise
            self._refuse_large_headers()
        except httptools.HttpParserUpgrade:
            self._refuse(
                400, "protocol upgrades (WebSocket, h2c) are not served here", "invalid_request_error"
            )
        except httptools.HttpParserError as error:
            detail = str(error).strip() or "malformed"
            message = (
                f"the request is not valid HTTP/1.1 ({detail}); check the request line, the headers "
                "and that Content-Length is a decimal number of bytes"
            )
            self._refuse(400, message, "invalid_request_error")

    def _header_part(self, data: bytes) -> int:
        """How many bytes of ``data`` belong to the line and headers being read: up to and including
        their blank line when it is in this read (a body after it is not counted), else all of it."""
        end = (self._tail + data).find(HEADER_END)
        return len(data) if end == -1 else end + len(HEADER_END) - len(self._tail)

    def _refuse_large_headers(self) -> None:
        message = f"the request line and headers are over {MAX_HEADER_BYTES} bytes"
        if self.cycle is not None and not self.cycle.response_complete and not self.transport.is_closing():
            # A request before this one on the connection is being answered: it gets its response,
            # then this one its 431 (on_response_complete); nothing more is read meanwhile.
            self._refusal_after_response = message
            self.flow.pause_reading()
            return
        self._refuse(431, message, "request_header_fields_too_large")

    def on_response_complete(self) -> None:
        refusal, pipelined = self._refusal_after_response, bool(self.pipeline)
        super().on_response_complete()
        if refusal is None:
            return
        if pipelined:  # a request queued before the oversize one was started: answer it first
            self.flow.pause_reading()
            return
        self._refusal_after_response = None
        self._refuse(431, refusal, "request_header_fields_too_large")

    # llhttp hands the line and each header over whole; a request that began inside a read (one
    # pipelined behind another's body) is counted here, the wire count above having passed it.
    def on_url(self, url: bytes) -> None:
        self._count_parsed(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_parsed(len(name) + len(value) + 3)  # ':' and CRLF
        super().on_header(name, value)

    def _count_parsed(self, size: int) -> None:
        self._parsed_header_bytes += size
        if self._parsed_header_bytes > MAX_HEADER_BYTES:
            raise HeadersTooLarge

    def send_400_response(self, msg: str) -> None:  # uvicorn's own refusals, in OpenAI's shape
        self._refuse(400, msg, "invalid_request_error")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_headers = True
        self._header_bytes = self._parsed_header_bytes = 0
        self._tail = b""
        if self._header_timer is None:
            self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._reading_headers = False
        self._disarm_header_timer()
        super().on_headers_complete()

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False  # a request is being answered: close after it
            return
        message = f"the request's headers did not arrive within {self.header_timeout:g} s"
        self._refuse(408, message, "request_timeout")

    def _refuse(self, status: int, message: str, kind: str, *, retry_after: str | None = None) -> None:
        """Answer on the connection itself (no request cycle) and close it."""
        self._disarm_header_timer()
        if self.transport.is_closing():
            return
        body = error_document(message, kind)
        lines = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            lines.extend([name, b": ", value, b"\r\n"])
        if retry_after is not None:
            lines.append(b"retry-after: " + retry_after.encode() + b"\r\n")
        lines.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode() + b"\r\n",
                b"connection: close\r\n\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(lines))
        self.transport.close()


def protocol_for(*, header_timeout: float, max_connections: int) -> type[ServiceProtocol]:
    """A protocol class with these limits (one per server: tests run several in a process)."""
    return type(
        "ConfiguredServiceProtocol",
        (ServiceProtocol,),
        {"header_timeout": header_timeout, "max_connections": max_connections},
    )
