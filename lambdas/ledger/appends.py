"""Appending transitions, the one way events enter the ledger (``ledger_append_event``,
``ledger_append_events``), and settling them: deriving what was appended and appending what a
backfill queued (``ledger_settle``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from guardrails.errors import ParkbrakeError
from guardrails.ledger import Attribution, Transition
from lambdas.ledger import queries as sql

LOGGER = logging.getLogger(__name__)

APPENDED = "appended"
DUPLICATE = "duplicate"
QUEUED = (
    "queued"  # a backfilled event, appended (or found a duplicate) by the next settle (backfill_outcomes)
)
INGEST = "ingest"  # the backfill's source
# How long a settled append waits for the settle lock (``ledger_append_settled_event``'s own
# lock_timeout, and the batch's): a settle holds it for one slice of a backfill at most.
SETTLE_LOCK_TIMEOUT = "20s"


class SettleBusy(ParkbrakeError):
    """The settle lock was not free within :data:`SETTLE_LOCK_TIMEOUT`: a settle that cannot
    finish. Nothing was appended; the caller fails (the meter's event goes, after EventBridge's
    own retries, to its dead-letter queue) rather than wait or retry."""


@dataclass(frozen=True)
class AppendResult:
    inserted: int
    duplicates: int  # not appended: duplicates (not queued ones)
    tenants: frozenset[str]  # tenants whose usage changed
    outcomes: Mapping[str, str] = field(default_factory=dict)  # event id → appended, duplicate, queued


def append_transitions(
    connection: psycopg.Connection[Any],
    transitions: Sequence[Transition],
    *,
    source: str,
    received_at: datetime,
    settled: bool = False,
) -> AppendResult:
    """Append transitions, pending until the next :func:`settle`: one statement, atomic by itself.

    A duplicate event id is ignored; a backfill (``source="ingest"``) is queued, and the next
    settle appends it wherever it falls in its hosts' histories. With ``settled`` (not for a
    backfill) the transitions are derived in the same transaction, one event in the same call.
    """
    unique = _unique(transitions)
    if not unique:
        return AppendResult(0, 0, frozenset())
    settled = settled and source != INGEST
    with _reported_when_busy(len(unique), source):
        outcomes = _append(connection, unique, source=source, received_at=received_at, settled=settled)
    return _result(transitions, outcomes)


@contextmanager
def _reported_when_busy(events: int, source: str) -> Iterator[None]:
    """A settled append that timed out waiting for the settle lock, logged (one line) and raised as
    :class:`SettleBusy`."""
    try:
        yield
    except psycopg.errors.LockNotAvailable as error:
        LOGGER.error(
            "ledger settle busy: %d %s event(s) not appended; the settle lock was held over %s (%s)",
            events, source, SETTLE_LOCK_TIMEOUT, str(error).strip(),
        )  # fmt: skip
        raise SettleBusy(
            f"the ledger's settle lock was held over {SETTLE_LOCK_TIMEOUT} (a settle that cannot finish); "
            f"{events} {source} event(s) were not appended; nothing was written (docs/ledger.md, *Appends and settles*)"
        ) from error


def _append(
    connection: psycopg.Connection[Any],
    unique: Sequence[Transition],
    *,
    source: str,
    received_at: datetime,
    settled: bool,
) -> dict[str, str]:
    """Each unique transition's outcome (appended, duplicate, queued), by event id."""
    if len(unique) == 1:  # the meter's case: scalar arguments cost a fraction of one-element arrays
        (only,) = unique
        statement = sql.APPEND_SETTLED_EVENT if settled else sql.APPEND_EVENT
        row = connection.execute(statement, (*_row(only), source, received_at)).fetchone()
        return {only.event_id: row[0] if row else APPENDED}
    parameters = _columns(unique) | {"source": source, "received_at": received_at}
    with connection.transaction() if settled else nullcontext():  # settled: append and settle at once
        if settled:
            connection.execute(f"SET LOCAL lock_timeout = '{SETTLE_LOCK_TIMEOUT}'")
            connection.execute(sql.SETTLE_LOCK)
        # Only the events not appended come back.
        refused = dict(connection.execute(sql.APPEND_EVENTS, parameters).fetchall())
        if settled:
            settle(connection)
    return {t.event_id: refused.get(t.event_id, QUEUED if source == INGEST else APPENDED) for t in unique}


def backfill_outcomes(
    connection: psycopg.Connection[Any], transitions: Sequence[Transition], *, received_at: datetime
) -> AppendResult:
    """What became of a backfill queued at ``received_at``, once settled: an event it appended is
    in the ledger with its source and time; any other was there before it (a duplicate)."""
    unique = _unique(transitions)
    rows = connection.execute(sql.BACKFILL_OUTCOMES, (received_at, [t.event_id for t in unique])).fetchall()
    return _result(transitions, dict(rows))


def _unique(transitions: Sequence[Transition]) -> list[Transition]:
    """One transition per event id, the first of each."""
    return list({transition.event_id: transition for transition in reversed(transitions)}.values())


def _result(transitions: Sequence[Transition], outcomes: Mapping[str, str]) -> AppendResult:
    appended = {event_id for event_id, outcome in outcomes.items() if outcome == APPENDED}
    queued = sum(1 for outcome in outcomes.values() if outcome == QUEUED)
    changed = {t.instance_id for t in transitions if t.event_id in appended}
    tenants = frozenset(t.attribution.tenant for t in transitions if t.instance_id in changed)
    return AppendResult(len(appended), len(transitions) - len(appended) - queued, tenants, outcomes)


# A batch's attribution arguments, each the Attribution field of that name.
ATTRIBUTION_COLUMNS = {"tenants": "tenant", "pools": "pool", "instance_types": "instance_type",
                       "accelerators": "accelerators", "caps": "cap_ms", "regions": "region",
                       "pricing_models": "pricing_model", "zones": "zone"}  # fmt: skip


def _row(transition: Transition) -> tuple[Any, ...]:
    """One event's arguments (``ledger_append_event``)."""
    who = transition.attribution
    return (transition.event_id, transition.instance_id, transition.state, transition.at_ms,
            who.tenant, who.pool, who.instance_type, who.accelerators, who.cap_ms, who.region,
            who.pricing_model, who.zone, transition.account)  # fmt: skip


def _columns(transitions: Sequence[Transition]) -> dict[str, list[Any]]:
    """A batch's arguments (``ledger_append_events``): one array per event field, and each distinct
    attribution once, the events' ``attributed`` its 1-based index (a host's events share one)."""
    index: dict[Attribution, int] = {}
    attributed = [index.setdefault(t.attribution, len(index) + 1) for t in transitions]
    events: dict[str, list[Any]] = {
        "event_ids": [t.event_id for t in transitions],
        "instance_ids": [t.instance_id for t in transitions],
        "states": [t.state for t in transitions],
        "times_ms": [t.at_ms for t in transitions],
        "attributed": attributed,
        "accounts": [t.account for t in transitions],
    }
    return events | {
        name: [getattr(who, field) for who in index] for name, field in ATTRIBUTION_COLUMNS.items()
    }


def settle(connection: psycopg.Connection[Any]) -> int:
    """Derive the intervals and rollups of every pending event and of one slice of a queued backfill
    (``ledger_backfill_slice``); how many there were.

    Every read of derived tables (intervals, rollups, runways) settles first, so derivation costs
    the reader one round trip when nothing is pending, and appends cost no derivation at all; a
    reader never pays for more than one slice of someone's backfill.
    """
    row = connection.execute(sql.SETTLE).fetchone()
    return int(row[0]) if row else 0


def settle_all(connection: psycopg.Connection[Any]) -> int:
    """:func:`settle` until no backfill is queued, each slice in its own transaction (the caller's
    connection is in autocommit), so the settle lock is let go between slices and a meter's append
    waits for one slice at most; how many events were derived."""
    derived, after = 0, (None, None, None, None)
    while True:
        row = connection.execute(sql.SETTLE_SLICE, after).fetchone()
        if row is None:
            return derived
        count, *ended, waiting = row
        derived += int(count)
        if not waiting:
            return derived
        after = tuple(ended)  # each slice starts where the one before it ended (the queue's index)
