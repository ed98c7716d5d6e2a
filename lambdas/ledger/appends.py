"""Appending transitions: the one way events enter the ledger (``ledger_append_events``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from guardrails.ledger import Transition, from_ms
from lambdas.ledger import queries as sql

APPENDED = "appended"
DUPLICATE = "duplicate"
CLOSED_HISTORY = "closed-history"  # a backfilled event inside a host's closed history: not appended


@dataclass(frozen=True)
class AppendResult:
    inserted: int
    duplicates: int  # not appended: duplicates, and backfilled events inside closed history
    tenants: frozenset[str]  # tenants whose usage changed
    outcomes: Mapping[str, str] = field(
        default_factory=dict
    )  # event id → appended, duplicate, closed-history


def append_transitions(
    connection: psycopg.Connection[Any],
    transitions: Sequence[Transition],
    *,
    source: str,
    received_at: datetime,
) -> AppendResult:
    """Append transitions and refresh their hosts' intervals: one statement, atomic by itself.

    A duplicate event id is ignored; a backfill (``source="ingest"``) never reaches into a
    host's closed history. Appends touching the same host are serialised by an advisory lock
    per host, taken in one order, so concurrent meters never derive from a partial history.
    """
    unique = list({transition.event_id: transition for transition in reversed(transitions)}.values())
    if not unique:
        return AppendResult(0, 0, frozenset())
    parameters = _columns(unique) | {"source": source, "received_at": received_at}
    outcomes = dict(connection.execute(sql.APPEND_EVENTS, parameters).fetchall())
    appended = {event_id for event_id, outcome in outcomes.items() if outcome == APPENDED}
    changed = {t.instance_id for t in unique if t.event_id in appended}
    tenants = frozenset(t.attribution.tenant for t in unique if t.instance_id in changed)
    return AppendResult(len(appended), len(transitions) - len(appended), tenants, outcomes)


def _columns(transitions: Sequence[Transition]) -> dict[str, list[Any]]:
    """Column arrays for one ``unnest`` insert: a batch is one statement, not one per event."""
    return {
        "event_ids": [t.event_id for t in transitions],
        "instance_ids": [t.instance_id for t in transitions],
        "states": [t.state for t in transitions],
        "times": [from_ms(t.at_ms) for t in transitions],
        "tenants": [t.attribution.tenant for t in transitions],
        "pools": [t.attribution.pool for t in transitions],
        "instance_types": [t.attribution.instance_type for t in transitions],
        "accelerators": [t.attribution.accelerators for t in transitions],
        "caps": [t.attribution.cap_ms for t in transitions],
        "regions": [t.attribution.region for t in transitions],
        "pricing_models": [t.attribution.pricing_model for t in transitions],
        "zones": [t.attribution.zone for t in transitions],
    }
