"""The decision log in the ledger database: append (through ``ledger_append_decisions``, the app
role's only way in), read back, newest last, and prune past the retention (``ledger_prune_decisions``,
the only way out).

A decision is keyed by the invocation or event that made it, its kind and its subject
(:meth:`guardrails.decisions.Decision.key`): a retried invocation appends nothing twice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from guardrails.decisions import (
    RELAY_DETAIL_TYPE,
    RELAY_SOURCE,
    RELAYING_ACTORS,
    Decision,
    decision_from_dict,
)
from lambdas.ledger.connections import Connections, joined_transaction
from lambdas.ledger.schema import LedgerError
from lambdas.ledger.store import LedgerStore, store_from_environment

APPEND = """
SELECT decision_key, outcome FROM ledger_append_decisions(
    %(keys)s::text[], %(moments)s::timestamptz[], %(kinds)s::text[], %(actors)s::text[], %(instance_ids)s::text[],
    %(tenants)s::text[], %(reasons)s::text[], %(details)s::jsonb[])
"""
# The newest ``limit`` matching decisions, returned oldest first.
SELECT = """
SELECT * FROM (
    SELECT id, decision_key, at, kind, actor, instance_id, tenant, reason, details
    FROM decisions
    WHERE (%(instance_id)s::text IS NULL OR instance_id = %(instance_id)s::text)
      AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
      AND (%(since)s::timestamptz IS NULL OR at >= %(since)s::timestamptz)
      AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[]))
      -- The central sweep writes each host's account into its decision's details.
      AND (%(accounts)s::text[] IS NULL OR details->>'account_id' = ANY(%(accounts)s::text[]))
    ORDER BY at DESC, id DESC
    LIMIT %(limit)s
) AS newest
ORDER BY at, id
"""

# The newest ``limit`` decisions of the given kinds about each subject, oldest first.
SELECT_EACH = """
SELECT d.id, d.decision_key, d.at, d.kind, d.actor, d.instance_id, d.tenant, d.reason, d.details
FROM unnest(%(instance_ids)s::text[]) AS s (instance_id)
CROSS JOIN LATERAL (
    SELECT * FROM decisions
    WHERE decisions.instance_id = s.instance_id AND kind = ANY(%(kinds)s::text[])
    ORDER BY at DESC, id DESC
    LIMIT %(limit)s
) AS d
ORDER BY d.at, d.id
"""

PRUNE = "SELECT ledger_prune_decisions(%(retention)s, %(batch_size)s)"
# One batch is one short transaction (5,000 rows: well under a second); a run stops after at most
# PRUNE_BATCHES of them, so a backlog is caught up over a few runs instead of holding one run long.
# Steady state at 1,000 hosts is about 3,000 rows per reconciler run (290,000 a day, 96 runs).
PRUNE_BATCH_SIZE = 5_000
PRUNE_BATCHES = 20


@dataclass(frozen=True)
class LoggedDecision:
    id: int
    key: str
    decision: Decision


class DecisionLedger:
    def __init__(self, connections: Connections) -> None:
        self._connections = connections

    @classmethod
    def of(cls, store: LedgerStore) -> DecisionLedger:
        """The decision log of ``store``'s database, on the same connections."""
        return cls(store.connections)

    def append(self, decisions: Sequence[Decision], *, origin: str) -> dict[str, str]:
        """Append ``decisions`` made by ``origin``; each key → ``appended`` or ``duplicate``."""
        return self.append_each([(decision, origin) for decision in decisions])

    def append_each(self, made: Sequence[tuple[Decision, str]]) -> dict[str, str]:
        """Append each decision with the origin that made it, in one statement (see :meth:`append`)."""
        unique = {decision.key(origin): decision for decision, origin in made}
        if not unique:
            return {}
        parameters = {
            "keys": list(unique),
            "moments": [decision.at for decision in unique.values()],
            "kinds": [decision.kind for decision in unique.values()],
            "actors": [decision.actor for decision in unique.values()],
            "instance_ids": [decision.instance_id for decision in unique.values()],
            "tenants": [decision.tenant for decision in unique.values()],
            "reasons": [decision.reason for decision in unique.values()],
            "details": [json.dumps(dict(decision.details), default=str) for decision in unique.values()],
        }
        with self._connections.connection() as connection, joined_transaction(connection):
            return dict(connection.execute(APPEND, parameters).fetchall())

    def prune(
        self, retention: timedelta, *, batch_size: int = PRUNE_BATCH_SIZE, batches: int = PRUNE_BATCHES
    ) -> int:
        """Delete decisions older than ``retention`` (at least 13 months: the database refuses less),
        one batch per transaction, until a batch comes back short or ``batches`` ran; how many went."""
        removed = 0
        for _batch in range(batches):
            with self._connections.connection() as connection, connection.transaction():
                try:
                    row = connection.execute(
                        PRUNE, {"retention": retention, "batch_size": batch_size}
                    ).fetchone()
                except psycopg.errors.UndefinedFunction:
                    raise LedgerError(
                        "the ledger cannot prune its decision log yet; run `parkbrake ledger migrate` as its owner"
                    ) from None
            count = int(row[0]) if row else 0
            removed += count
            if count < batch_size:
                break
        return removed

    def read(
        self,
        *,
        instance_id: str | None = None,
        tenant: str | None = None,
        since: datetime | None = None,
        kinds: Sequence[str] | None = None,
        accounts: Sequence[str] | None = None,
        limit: int = 500,
    ) -> list[LoggedDecision]:
        """The newest ``limit`` decisions that match every filter given, oldest first."""
        parameters: dict[str, Any] = {
            "instance_id": instance_id,
            "tenant": tenant,
            "since": since,
            "kinds": list(kinds) if kinds else None,
            "accounts": list(accounts) if accounts else None,
            "limit": limit,
        }
        with self._connections.connection() as connection:
            try:
                rows = connection.execute(SELECT, parameters).fetchall()
            except psycopg.errors.UndefinedTable:
                raise LedgerError(
                    "the ledger has no decision log yet; run `parkbrake ledger migrate` as its owner"
                ) from None
        return [
            LoggedDecision(
                row_id, key, Decision(kind, actor, reason, at, instance, owner_tenant, details or {})
            )
            for row_id, key, at, kind, actor, instance, owner_tenant, reason, details in rows
        ]

    def read_each(
        self, instance_ids: Sequence[str], *, kinds: Sequence[str], limit: int = 500
    ) -> dict[str, list[LoggedDecision]]:
        """For each subject, its newest ``limit`` decisions of ``kinds``, oldest first, in one read."""
        parameters = {"instance_ids": list(instance_ids), "kinds": list(kinds), "limit": limit}
        with self._connections.connection() as connection:
            rows = connection.execute(SELECT_EACH, parameters).fetchall()
        found: dict[str, list[LoggedDecision]] = {instance_id: [] for instance_id in instance_ids}
        for row_id, key, at, kind, actor, instance, owner_tenant, reason, details in rows:
            found[instance].append(
                LoggedDecision(
                    row_id, key, Decision(kind, actor, reason, at, instance, owner_tenant, details or {})
                )
            )
        return found


class EnvironmentLedger:
    """The decision log of the database ``environ`` names, connected for one append: a CLI's writer."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def append(self, decisions: Sequence[Decision], *, origin: str) -> dict[str, str]:
        store = store_from_environment(self._environ)
        try:
            return DecisionLedger.of(store).append(decisions, origin=origin)
        finally:
            store.close()


def is_relayed(event: Mapping[str, Any]) -> bool:
    """Whether ``event`` is a guardrail's decisions relayed over EventBridge (lambdas.aws.decision_log)."""
    return event.get("source") == RELAY_SOURCE and event.get("detail-type") == RELAY_DETAIL_TYPE


class RefusedRelay(ValueError):
    """A relayed event the decision log does not take: malformed, from another account, or carrying
    decisions of an actor that does not relay. Retrying it cannot help; the meter refuses and alerts."""


def append_relayed(
    event: Mapping[str, Any], ledger: DecisionLedger, *, account: str | None = None
) -> dict[str, str]:
    """Append the decisions of a relayed event (each key → appended or duplicate: EventBridge delivers at
    least once). Only the reaper's and the deadlines' roles may put events on the stack's decision bus
    (components/iam_policies.py, decision_bus_policy); what reaches the meter anyway is checked again
    here: an event from another ``account`` than the meter's, a malformed one, or one carrying another
    actor's decisions raises :class:`RefusedRelay` and nothing is appended."""
    if account is not None and event.get("account") != account:
        raise RefusedRelay(
            f"refused {RELAY_DETAIL_TYPE} event {event.get('id')}: from account {event.get('account')!r}, "
            f"not this stack's {account}"
        )
    detail = event.get("detail") or {}
    origin, records = detail.get("origin"), detail.get("decisions")
    if not isinstance(origin, str) or not origin or not isinstance(records, list):
        raise RefusedRelay(
            f"malformed {RELAY_DETAIL_TYPE} event: needs detail.origin and detail.decisions: {detail!r}"[:500]
        )
    try:
        decisions = [decision_from_dict(record) for record in records]
    except ValueError as error:
        raise RefusedRelay(f"refused {RELAY_DETAIL_TYPE} event {event.get('id')}: {error}") from None
    foreign = sorted({decision.actor for decision in decisions} - RELAYING_ACTORS)
    if foreign:
        raise RefusedRelay(
            f"refused {RELAY_DETAIL_TYPE} event {event.get('id')}: decisions by {', '.join(foreign)} are not "
            f"relayed (only {', '.join(sorted(RELAYING_ACTORS))} relay theirs)"
        )
    return ledger.append(decisions, origin=origin)
