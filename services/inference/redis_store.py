"""The idempotency store on Redis or Valkey: the same :class:`IdempotencyStore` as PostgreSQL's.

One hash per (tenant, endpoint, key). The claim and the owner-checked completion are Lua scripts, so
each is one atomic step on the server (a script runs alone, as one command). Retention is the key's
TTL: the server deletes finished rows itself and :meth:`RedisIdempotencyStore.sweep` has nothing to do.

Why a script rather than ``SET key owner NX PX lease`` for the claim: the rules must match the
PostgreSQL store's. A lapsed lease may be taken over only by the same request (a different body is
still a 422), a loser needs the held row back in the same step (one round trip, no read-then-write),
and lease and retention are judged by the service's clock, which tests inject; ``SET NX PX`` would
let the server's clock lapse the claim and free the key for any body.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis

from guardrails.idempotency import Lease
from lambdas.ledger.connections import LedgerUnavailable
from services.inference.idempotency import (
    DEFAULT_MAX_STORED_BYTES,
    Admission,
    Claim,
    Outcome,
    Scope,
    StoredResponse,
    decode_body,
    encode_body,
)
from services.inference.keys import ApiKeyStore

PREFIX = "parkbrake:idempotency:"

# KEYS[1] the row; ARGV: fingerprint, owner, now, lease_until, expires_at (ms), ttl (ms).
# Claims a missing row, one whose retention ended, or a running one whose lease lapsed for the same
# request; else returns the row as it is.
CLAIM = """
local row = redis.call('HMGET', KEYS[1], 'fingerprint', 'state', 'lease_until', 'status', 'headers',
                       'body', 'compressed', 'owner', 'expires_at')
local now = tonumber(ARGV[3])
if not row[1] or tonumber(row[9]) <= now
   or (row[2] == 'running' and tonumber(row[3]) <= now and row[1] == ARGV[1]) then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1], 'owner', ARGV[2], 'state', 'running',
             'lease_until', ARGV[4], 'expires_at', ARGV[5])
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  return 'claimed'
end
-- Missing fields are false, and a reply stops at the first nil: send them as empty strings.
return {row[1], row[2], row[3], row[4] or '', row[5] or '', row[6] or '', row[7] or ''}
"""

# KEYS[1] the row; ARGV: owner, status, headers, body, compressed, expires_at (ms), ttl (ms).
COMPLETE = """
local held = redis.call('HMGET', KEYS[1], 'owner', 'state')
if held[1] ~= ARGV[1] or held[2] ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done', 'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4],
           'compressed', ARGV[5], 'expires_at', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[7])
return 1
"""

# KEYS[1] the row; ARGV: owner.
RELEASE = """
local held = redis.call('HMGET', KEYS[1], 'owner', 'state')
if held[1] == ARGV[1] and held[2] == 'running' then redis.call('DEL', KEYS[1]) end
return 0
"""


# KEYS[1] the row; ARGV: owner, lease_until (ms).
RENEW = """
local held = redis.call('HMGET', KEYS[1], 'owner', 'state')
if held[1] ~= ARGV[1] or held[2] ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'lease_until', ARGV[2])
return 1
"""


def row_key(scope: Scope) -> str:
    """The tenant in clear (tenant names have no ':'), the endpoint and key hashed to a fixed length."""
    digest = hashlib.sha256()
    for part in (scope.endpoint, scope.key):
        digest.update(len(part).to_bytes(4, "big") + part.encode())
    return f"{PREFIX}{scope.tenant}:{digest.hexdigest()}"


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@dataclass
class RedisIdempotencyStore:
    """``client`` from :func:`redis_client`; API keys stay in PostgreSQL (``keys``)."""

    client: Any
    keys: ApiKeyStore
    lease: Lease
    max_stored_bytes: int = DEFAULT_MAX_STORED_BYTES
    _new_owner: Any = field(default=uuid.uuid4, repr=False)

    def __post_init__(self) -> None:
        self._claim = self.client.register_script(CLAIM)
        self._complete = self.client.register_script(COMPLETE)
        self._release = self.client.register_script(RELEASE)
        self._renew = self.client.register_script(RENEW)

    def admit(
        self, api_key: str, endpoint: str, key: str, fingerprint: str, now: datetime
    ) -> Admission | None:
        found = self.keys.tenant_of(api_key)  # the keys live in PostgreSQL: two round trips here
        if found is None:
            return None
        tenant, key_id = found
        return Admission(tenant, key_id, self.claim(Scope(tenant, endpoint, key), fingerprint, now))

    def claim(self, scope: Scope, fingerprint: str, now: datetime) -> Claim:
        owner = self._new_owner()
        retention_ms = int(self.lease.retention.total_seconds() * 1000)
        arguments = [
            fingerprint,
            str(owner),
            _ms(now),
            _ms(self.lease.lease_until(now)),
            _ms(self.lease.expires_at(now)),
            retention_ms,
        ]
        reply = self._run(self._claim, scope, arguments)
        if reply == b"claimed":
            return Claim(Outcome.CLAIMED, owner=owner)
        held_fingerprint, state, lease_until, status, headers, body, compressed = reply
        if held_fingerprint.decode() != fingerprint:
            return Claim(Outcome.MISMATCH)
        if state == b"running":
            held_until = datetime.fromtimestamp(int(lease_until) / 1000, now.tzinfo)
            return Claim(Outcome.IN_PROGRESS, lease_until=held_until)
        response = StoredResponse(int(status), json.loads(headers), decode_body(body, compressed == b"1"))
        return Claim(Outcome.REPLAY, response=response)

    def complete(self, scope: Scope, owner: uuid.UUID, response: StoredResponse, now: datetime) -> bool:
        body, compressed = encode_body(response.body, self.max_stored_bytes)
        arguments = [
            str(owner),
            response.status,
            json.dumps(response.headers),
            body,
            "1" if compressed else "0",
            _ms(self.lease.expires_at(now)),
            int(self.lease.retention.total_seconds() * 1000),
        ]
        return bool(self._run(self._complete, scope, arguments))

    def release(self, scope: Scope, owner: uuid.UUID) -> None:
        self._run(self._release, scope, [str(owner)])

    def renew(self, scope: Scope, owner: uuid.UUID, now: datetime) -> bool:
        return bool(self._run(self._renew, scope, [str(owner), _ms(self.lease.lease_until(now))]))

    def sweep(self, now: datetime, *, batch: int) -> int:
        """Nothing to do: each row's TTL is its retention, and the server deletes it when it ends."""
        return 0

    def _run(self, script: Any, scope: Scope, arguments: list[Any]) -> Any:
        try:
            return script(keys=[row_key(scope)], args=arguments)
        except redis.RedisError as error:
            raise LedgerUnavailable(
                f"cannot use the idempotency store (Redis/Valkey): {error}; check "
                "PARKBRAKE_INFERENCE_REDIS_URL and that the server is up"
            ) from error


def redis_client(url: str, *, pool_size: int) -> Any:
    """A client for ``redis://``, ``rediss://`` or ``unix://`` URLs (Valkey speaks the same protocol)."""
    # A blocking pool: past ``pool_size`` busy connections a request waits for one (as the PostgreSQL
    # pool does) instead of failing with "Too many connections".
    pool = redis.BlockingConnectionPool.from_url(
        url, max_connections=pool_size, timeout=5, socket_timeout=5, socket_connect_timeout=5
    )
    return redis.Redis(connection_pool=pool)
