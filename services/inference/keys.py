"""API keys of the inference service: one tenant per key, stored as SHA-256, shown once at creation.

A key is 32 random bytes (``pbk_`` + URL-safe base64): with that much entropy a plain SHA-256 is
what GitHub and Stripe use for token lookup; a slow password hash would only slow every request.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from guardrails import tenants
from guardrails.errors import InputError
from lambdas.ledger.connections import Connections

KEY_PREFIX = "pbk_"
ID_PREFIX = "key_"


@dataclass(frozen=True)
class ApiKey:
    id: str
    tenant: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class NewKey:
    id: str
    tenant: str
    key: str  # the only time the key itself exists outside the client


def key_hash(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def validate_tenant(tenant: str) -> str:
    """The one tenant rule every command applies (guardrails/tenants.py)."""
    return tenants.validate_tenant(tenant)


class ApiKeyStore:
    def __init__(self, connections: Connections) -> None:
        self._connections = connections

    def create(self, tenant: str, now: datetime) -> NewKey:
        validate_tenant(tenant)
        key_id = ID_PREFIX + secrets.token_hex(8)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        with self._connections.connection() as connection:
            connection.execute(
                "INSERT INTO inference_api_keys (id, tenant, key_sha256, created_at) VALUES (%s, %s, %s, %s)",
                (key_id, tenant, key_hash(key), now),
            )
        return NewKey(id=key_id, tenant=tenant, key=key)

    def list(self, *, tenant: str | None = None) -> list[ApiKey]:
        with self._connections.connection() as connection:
            rows = connection.execute(
                "SELECT id, tenant, created_at, revoked_at FROM inference_api_keys "
                "WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s ORDER BY tenant, created_at, id",
                {"tenant": tenant},
            ).fetchall()
        return [ApiKey(*row) for row in rows]

    def revoke(self, key_id: str, now: datetime) -> ApiKey:
        """Revoke (idempotent: revoking twice keeps the first time); unknown ids are an input error."""
        with self._connections.connection() as connection:
            row = connection.execute(
                "UPDATE inference_api_keys SET revoked_at = coalesce(revoked_at, %s) WHERE id = %s "
                "RETURNING id, tenant, created_at, revoked_at",
                (now, key_id),
            ).fetchone()
        if row is None:
            raise InputError(f"no API key with id {key_id!r}; `parkbrake keys list` shows the ids")
        return ApiKey(*row)

    def tenant_of(self, key: str) -> tuple[str, str] | None:
        """(tenant, key id) for a live key; None for an unknown or revoked one."""
        with self._connections.connection() as connection:
            row = connection.execute(
                "SELECT tenant, id FROM inference_api_keys WHERE key_sha256 = %s AND revoked_at IS NULL",
                (key_hash(key),),
            ).fetchone()
        return None if row is None else (row[0], row[1])
