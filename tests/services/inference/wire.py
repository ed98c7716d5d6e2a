"""Requests over a plain socket, for what urllib will not send: short bodies, stalls, broken headers."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class WireReply:
    status: int
    headers: dict[str, str]  # names lower-case
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@contextmanager
def connection(url: str, *, timeout: float = 60) -> Iterator[socket.socket]:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
    try:
        yield sock
    finally:
        sock.close()


def request_head(path: str, headers: dict[str, str], *, method: str = "POST") -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: 127.0.0.1",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


def read_reply(sock: socket.socket) -> WireReply:
    """One response: headers, then Content-Length bytes of body (or up to the close)."""
    (reply,) = read_replies(sock, 1)
    return reply


def read_replies(sock: socket.socket, count: int) -> list[WireReply]:
    """``count`` responses in a row (pipelined: several may come in one read)."""
    data, replies = b"", []
    while len(replies) < count:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed before a response: {data!r}")
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "-1"))
        while length < 0 or len(data) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        body, data = (data[:length], data[length:]) if length >= 0 else (data, b"")
        replies.append(WireReply(int(status_line.split()[1]), headers, body))
    return replies


def closed_by_server(sock: socket.socket, *, within: float = 30) -> bool:
    """Whether the server closes the connection within ``within`` seconds (what it sends is read and dropped)."""
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def exchange(url: str, data: bytes) -> WireReply:
    with connection(url) as sock:
        sock.sendall(data)
        return read_reply(sock)
