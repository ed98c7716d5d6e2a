"""Where idempotent responses live: the :class:`IdempotencyStore` interface and its PostgreSQL store.

The interface: admit (the API key's tenant and the claim), claim, complete, release, renew, sweep. The
Redis/Valkey store is ``services/inference/redis_store.py``.
"""

from __future__ import annotations

import json
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Protocol

from guardrails.idempotency import Lease
from lambdas.ledger.connections import Connections, LedgerUnavailable
from services.inference.keys import key_hash

COMPRESS_FROM_BYTES = 1024  # smaller bodies are stored as they are
DEFAULT_MAX_STORED_BYTES = 8 * 1024 * 1024  # after compression


class ResponseTooLarge(Exception):
    """The response, even compressed, is larger than the store keeps."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"the response is {size} bytes compressed, over the idempotency store's limit of {limit} bytes "
            "(PARKBRAKE_INFERENCE_MAX_STORED_BYTES); send fewer inputs per request"
        )
        self.size, self.limit = size, limit


@dataclass(frozen=True)
class Scope:
    """Keys are scoped per tenant and endpoint: one tenant's key never reaches another's result."""

    tenant: str
    endpoint: str
    key: str


@dataclass(frozen=True)
class StoredResponse:
    status: int
    headers: dict[str, str]
    body: bytes


class Outcome(Enum):
    CLAIMED = "claimed"  # this request runs; finish with complete() or release()
    REPLAY = "replay"  # a completed response with the same fingerprint
    IN_PROGRESS = "in_progress"  # another request holds a live lease
    MISMATCH = "mismatch"  # the key was used with a different request


@dataclass(frozen=True)
class Claim:
    outcome: Outcome
    owner: uuid.UUID | None = None
    response: StoredResponse | None = None
    lease_until: datetime | None = None


@dataclass(frozen=True)
class Admission:
    """Who sent the request (from its API key) and the claim on its ``Idempotency-Key``."""

    tenant: str
    key_id: str
    claim: Claim


class IdempotencyStore(Protocol):
    def admit(
        self, api_key: str, endpoint: str, key: str, fingerprint: str, now: datetime
    ) -> Admission | None:
        """The API key's tenant and the claim on ``key`` in its scope; None for an unknown or revoked key.

        A store beside the key table does both in one round trip; others look the key up first."""
        ...

    def claim(self, scope: Scope, fingerprint: str, now: datetime) -> Claim:
        """Atomically claim ``scope`` for this request, or say why not."""
        ...

    def complete(self, scope: Scope, owner: uuid.UUID, response: StoredResponse, now: datetime) -> bool:
        """Store the final response; False when the claim was lost (lease lapsed and taken over)."""
        ...

    def release(self, scope: Scope, owner: uuid.UUID) -> None:
        """Drop an unfinished claim (a 5xx), so a retry runs at once instead of after the lease."""
        ...

    def renew(self, scope: Scope, owner: uuid.UUID, now: datetime) -> bool:
        """Extend a running claim's lease to a full lease from ``now``; False when it is not ours any more."""
        ...

    def sweep(self, now: datetime, *, batch: int) -> int:
        """Delete up to ``batch`` rows whose retention ended; how many went."""
        ...


def always_fits(size: int, limit: int) -> bool:
    """Whether a body of ``size`` bytes fits ``limit`` however it compresses: zlib's worst case adds
    5 bytes per 16 KiB block and a few of header, well within a thousandth plus 64 bytes."""
    return size + (size >> 10) + 64 <= limit


def encode_body(body: bytes, limit: int) -> tuple[bytes, bool]:
    """zlib from ``COMPRESS_FROM_BYTES`` on; raises :class:`ResponseTooLarge` past ``limit``."""
    if len(body) < COMPRESS_FROM_BYTES:
        stored, compressed = body, False
    else:
        # Level 1: on embeddings' JSON it keeps within a tenth of level 6's size at a tenth of its time
        # (128 KiB: 62 KB in 3 ms against 58 KB in 27 ms), and this runs on every stored response.
        stored, compressed = zlib.compress(body, 1), True
    if len(stored) > limit:
        raise ResponseTooLarge(len(stored), limit)
    return stored, compressed


def decode_body(stored: bytes, compressed: bool) -> bytes:
    return zlib.decompress(stored) if compressed else bytes(stored)


# The claim: insert, or take over a row whose lease lapsed (same request only) or whose retention
# ended; the owner returned tells us whether we won. Shared by CLAIM and ADMIT.
_TAKE_OVER = """
ON CONFLICT (tenant, endpoint, key) DO UPDATE
    SET fingerprint = EXCLUDED.fingerprint, owner = EXCLUDED.owner, state = 'running',
        claimed_at = EXCLUDED.claimed_at, lease_until = EXCLUDED.lease_until,
        expires_at = EXCLUDED.expires_at, status = NULL, headers = NULL, body = NULL, compressed = false
    WHERE row.expires_at <= EXCLUDED.claimed_at
       OR (row.state = 'running' AND row.lease_until <= EXCLUDED.claimed_at
           AND row.fingerprint = EXCLUDED.fingerprint)
RETURNING owner
"""
_COLUMNS = "(tenant, endpoint, key, fingerprint, owner, state, claimed_at, lease_until, expires_at)"
_CLAIMED = "%(fingerprint)s, %(owner)s, 'running', %(now)s, %(lease_until)s, %(expires_at)s"

CLAIM = f"""
INSERT INTO inference_idempotency AS row {_COLUMNS}
VALUES (%(tenant)s, %(endpoint)s, %(key)s, {_CLAIMED})
{_TAKE_OVER}"""

# The API key's lookup, the claim and, when the claim is lost, the row that holds the key: one round
# trip for the request's whole way in. Every part reads the snapshot taken when the statement began,
# so a row a concurrent request committed meanwhile makes the insert lose without being read here;
# then the caller reads it with CLAIM's path.
ADMIT = f"""
WITH caller AS (
    SELECT tenant, id FROM inference_api_keys WHERE key_sha256 = %(key_sha256)s AND revoked_at IS NULL
), claimed AS (
    INSERT INTO inference_idempotency AS row {_COLUMNS}
    SELECT caller.tenant, %(endpoint)s, %(key)s, {_CLAIMED} FROM caller
    {_TAKE_OVER}
)
SELECT caller.tenant, caller.id, claimed.owner, found.fingerprint, found.state, found.lease_until,
       found.status, found.headers, found.body, found.compressed
FROM caller
LEFT JOIN claimed ON true
LEFT JOIN inference_idempotency AS found
    ON claimed.owner IS NULL AND found.tenant = caller.tenant AND found.endpoint = %(endpoint)s
       AND found.key = %(key)s
"""

READ = """
SELECT fingerprint, state, lease_until, status, headers, body, compressed
FROM inference_idempotency WHERE tenant = %s AND endpoint = %s AND key = %s
"""

COMPLETE = """
UPDATE inference_idempotency
SET state = 'done', status = %(status)s, headers = %(headers)s, body = %(body)s,
    compressed = %(compressed)s, expires_at = %(expires_at)s
WHERE tenant = %(tenant)s AND endpoint = %(endpoint)s AND key = %(key)s AND owner = %(owner)s
  AND state = 'running'
"""

RENEW = """
UPDATE inference_idempotency SET lease_until = %(lease_until)s
WHERE tenant = %(tenant)s AND endpoint = %(endpoint)s AND key = %(key)s AND owner = %(owner)s
  AND state = 'running'
"""

RELEASE = """
DELETE FROM inference_idempotency
WHERE tenant = %s AND endpoint = %s AND key = %s AND owner = %s AND state = 'running'
"""

# Bounded: one batch locks and deletes at most `batch` rows, skipping rows a claim holds right now.
SWEEP = """
DELETE FROM inference_idempotency WHERE ctid IN (
    SELECT ctid FROM inference_idempotency WHERE expires_at <= %s
    ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED)
"""


@dataclass
class PostgresIdempotencyStore:
    connections: Connections
    lease: Lease
    max_stored_bytes: int = DEFAULT_MAX_STORED_BYTES
    _new_owner: Any = field(default=uuid.uuid4, repr=False)

    def admit(
        self, api_key: str, endpoint: str, key: str, fingerprint: str, now: datetime
    ) -> Admission | None:
        owner = self._new_owner()
        row = self._claim_row(endpoint, key, fingerprint, owner, now) | {"key_sha256": key_hash(api_key)}
        with self.connections.connection() as connection:
            found = connection.execute(ADMIT, row).fetchone()
        if found is None:
            return None
        tenant, key_id, won, *held = found
        scope = Scope(tenant, endpoint, key)
        if won == owner:
            claim = Claim(Outcome.CLAIMED, owner=owner)
        elif held[0] is None:  # committed by a concurrent request after this statement's snapshot
            claim = self.claim(scope, fingerprint, now)
        else:
            claim = _claim_from(held, fingerprint)
        return Admission(tenant, key_id, claim)

    def claim(self, scope: Scope, fingerprint: str, now: datetime) -> Claim:
        # A row released or swept between the claim and the read is claimed again: twice is plenty.
        for _ in range(3):
            claim = self._claim_once(scope, fingerprint, now)
            if claim is not None:
                return claim
        raise LedgerUnavailable(f"the claim on {scope.key!r} kept vanishing; retry")

    def _claim_row(
        self, endpoint: str, key: str, fingerprint: str, owner: uuid.UUID, now: datetime
    ) -> dict[str, Any]:
        return {
            "endpoint": endpoint,
            "key": key,
            "fingerprint": fingerprint,
            "owner": owner,
            "now": now,
            "lease_until": self.lease.lease_until(now),
            "expires_at": self.lease.expires_at(now),
        }

    def _claim_once(self, scope: Scope, fingerprint: str, now: datetime) -> Claim | None:
        owner = self._new_owner()
        row = self._claim_row(scope.endpoint, scope.key, fingerprint, owner, now) | {"tenant": scope.tenant}
        with self.connections.connection() as connection:
            won = connection.execute(CLAIM, row).fetchone()
            if won is not None and won[0] == owner:
                return Claim(Outcome.CLAIMED, owner=owner)
            found = connection.execute(READ, (scope.tenant, scope.endpoint, scope.key)).fetchone()
        if found is None:  # released or swept between the two statements
            return None
        return _claim_from(found, fingerprint)

    def complete(self, scope: Scope, owner: uuid.UUID, response: StoredResponse, now: datetime) -> bool:
        body, compressed = encode_body(response.body, self.max_stored_bytes)
        row = {
            "tenant": scope.tenant,
            "endpoint": scope.endpoint,
            "key": scope.key,
            "owner": owner,
            "status": response.status,
            "headers": json.dumps(response.headers),
            "body": body,
            "compressed": compressed,
            "expires_at": self.lease.expires_at(now),
        }
        with self.connections.connection() as connection:
            return connection.execute(COMPLETE, row).rowcount == 1

    def release(self, scope: Scope, owner: uuid.UUID) -> None:
        with self.connections.connection() as connection:
            connection.execute(RELEASE, (scope.tenant, scope.endpoint, scope.key, owner))

    def renew(self, scope: Scope, owner: uuid.UUID, now: datetime) -> bool:
        row = {
            "tenant": scope.tenant,
            "endpoint": scope.endpoint,
            "key": scope.key,
            "owner": owner,
            "lease_until": self.lease.lease_until(now),
        }
        with self.connections.connection() as connection:
            return connection.execute(RENEW, row).rowcount == 1

    def sweep(self, now: datetime, *, batch: int) -> int:
        with self.connections.connection() as connection:
            return connection.execute(SWEEP, (now, batch)).rowcount


def _claim_from(row: Any, fingerprint: str) -> Claim:
    """What a lost claim means, from the row that holds the key (READ's columns)."""
    stored_fingerprint, state, lease_until, status, headers, body, compressed = row
    if stored_fingerprint != fingerprint:
        return Claim(Outcome.MISMATCH)
    if state == "running":
        return Claim(Outcome.IN_PROGRESS, lease_until=lease_until)
    return Claim(
        Outcome.REPLAY, response=StoredResponse(status, dict(headers), decode_body(body, compressed))
    )
