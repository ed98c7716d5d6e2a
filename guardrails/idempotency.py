"""Idempotency rules for retried requests: which keys are valid, what makes two requests "the same",
which outcomes are final, and when a stored claim may be taken over.

Follows the IETF httpapi ``Idempotency-Key`` draft and Stripe's behaviour; the service's docs
(``docs/inference.md``) list each choice. Pure: times are passed in.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

MAX_KEY_LENGTH = 255
HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
# Response headers stored with a completed response and replayed with it; the rest (Date, Server,
# Connection, rate-limit state) describe the connection or the moment, not the result.
STORED_HEADERS = ("Content-Type", "Retry-After")


class InvalidIdempotencyKey(ValueError):
    """The ``Idempotency-Key`` header is not a usable key; the message says why (→ 400)."""


def parse_key(raw: str) -> str:
    """The key from the header: a plain token (Stripe) or a quoted Structured Field string (IETF draft).

    1–255 visible ASCII characters; anything else is refused rather than silently normalised, so two
    clients never share a key by accident.
    """
    value = raw.strip()
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        value = value[1:-1]
    if not value:
        raise InvalidIdempotencyKey(f"{HEADER} is empty; send 1 to {MAX_KEY_LENGTH} visible ASCII characters")
    if len(value) > MAX_KEY_LENGTH:
        raise InvalidIdempotencyKey(
            f"{HEADER} is {len(value)} characters long; the limit is {MAX_KEY_LENGTH} (a UUID is 36)"
        )
    bad = sorted({char for char in value if not ("!" <= char <= "~") or char in '"\\'})
    if bad:
        raise InvalidIdempotencyKey(
            f"{HEADER} contains {', '.join(repr(char) for char in bad)}; use visible ASCII without "
            "quotes, backslashes or spaces (a UUID works)"
        )
    return value


def canonical_body(body: bytes) -> bytes:
    """JSON with sorted keys and no insignificant whitespace; bytes that are not JSON stay as they are."""
    try:
        document: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What "the same request" means: method, path and canonical body, hashed (SHA-256, hex)."""
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode(), canonical_body(body)):
        digest.update(len(part).to_bytes(8, "big"))  # length-prefixed: no two splits hash alike
        digest.update(part)
    return digest.hexdigest()


def is_final(status: int) -> bool:
    """Stored and replayed: successes and client errors. A 5xx (or no answer) lets a retry run once."""
    return status < 500


@dataclass(frozen=True)
class Lease:
    """How long a claim may stay unfinished before another request may run it, and how long results last."""

    lease: timedelta
    retention: timedelta

    def lease_until(self, now: datetime) -> datetime:
        return now + self.lease

    def expires_at(self, now: datetime) -> datetime:
        return now + self.retention


def wait_intervals(bound: timedelta, *, first: float = 0.01, longest: float = 0.2) -> list[float]:
    """Poll intervals for a request waiting on a concurrent one with its key: doubling, capped, bounded."""
    intervals: list[float] = []
    remaining, step = bound.total_seconds(), first
    while remaining > 1e-9:
        interval = min(step, longest, remaining)
        intervals.append(interval)
        remaining -= interval
        step *= 2
    return intervals
