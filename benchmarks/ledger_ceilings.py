"""The ledger benchmark's ceilings and floors (benchmarks.ledger): what storing the same rows costs
without the ledger's work, measured in turn with the ledger's own figures.

- ceilings: the same rows into a plain table with the same columns (no keys, indexes or checks),
  one single-row INSERT per transaction, or one COPY of a batch per transaction;
- the storage floor of a backfill: that COPY into a copy of ``events`` (its keys, indexes and
  checks), then the intervals the events derive to inserted into a copy of ``intervals``;
- the meter's floor: what the meter must store per event, in its one round trip and one commit,
  without deriving: the event into a copy of ``events`` and, in the same statement, its interval
  opened (a start) or closed (a stop) in a copy of ``intervals``; no rollups (handed over free).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from guardrails.ledger import STATES, Transition, from_ms, intervals_from

CEILING_TABLE = """
CREATE TABLE IF NOT EXISTS ceiling_events (
    event_id text, instance_id text, state text, event_time timestamptz, tenant text, pool text,
    instance_type text, accelerators integer, cap_ms bigint, region text, source text, received_at timestamptz,
    pricing_model text, zone text
)
"""
# The storage floor: what any derivation that leaves the ledger's rows stored pays at least. The
# same COPY into a copy of `events` (its primary key, indexes, checks and generated columns), then
# the intervals those events derive to (guardrails.ledger.intervals_from, the ledger's reference)
# inserted server-side into a copy of `intervals` (its keys and generated column): storing alone,
# without queueing, deriving or rollups, and with the intervals' rows handed over for free.
FLOOR_TABLES = """
CREATE TABLE IF NOT EXISTS floor_events (LIKE events INCLUDING ALL);
CREATE TABLE IF NOT EXISTS floor_intervals (LIKE intervals INCLUDING ALL);
"""
INTERVAL_COLUMNS = (
    "opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms, started_ms, ended_ms, closed_by, "
    "region, pricing_model, zone"
)
CEILING_COLUMNS = (
    "event_id, instance_id, state, event_time, tenant, pool, instance_type, accelerators, cap_ms, region, "
    "source, received_at, pricing_model, zone"
)


def ceiling_rows(transitions: list[Transition], received_at: datetime) -> list[tuple[Any, ...]]:
    return [
        (t.event_id, t.instance_id, t.state, from_ms(t.at_ms), t.attribution.tenant,
         t.attribution.pool, t.attribution.instance_type, t.attribution.accelerators, t.attribution.cap_ms,
         t.attribution.region, "meter", received_at, t.attribution.pricing_model, t.attribution.zone)
        for t in transitions
    ]  # fmt: skip


def copy_rows(
    connection: psycopg.Connection[Any],
    table: str,
    rows: list[tuple[Any, ...]],
    batch_size: int,
    columns: str = CEILING_COLUMNS,
) -> float:
    """COPY ``rows`` into ``table``, one COPY of ``batch_size`` rows per transaction; the seconds it took."""
    started = time.perf_counter()
    for start in range(0, len(rows), batch_size):
        with (
            connection.transaction(),
            connection.cursor() as cursor,
            cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
        ):
            for row in rows[start : start + batch_size]:
                copy.write_row(row)
    return time.perf_counter() - started


def ceiling_rows_per_second(
    url: str, transitions: list[Transition], batch_size: int, received_at: datetime, *, flushed: bool = True
) -> float:
    """The same rows into a plain table with the same columns, from the same client on the same
    server: single-row INSERTs one per transaction, or a COPY per batch of ``batch_size`` rows.
    ``flushed=False``: each commit does not wait for its WAL flush (``synchronous_commit = off``)."""
    rows = ceiling_rows(transitions, received_at)
    with psycopg.connect(url, autocommit=True) as connection:
        if not flushed:
            connection.execute("SET synchronous_commit = off")
        connection.execute(CEILING_TABLE)
        connection.execute("TRUNCATE ceiling_events")
        if batch_size > 1:
            return len(rows) / copy_rows(connection, "ceiling_events", rows, batch_size)
        started = time.perf_counter()
        insert = f"INSERT INTO ceiling_events ({CEILING_COLUMNS}) VALUES ({', '.join(['%s'] * 14)})"
        for row in rows:
            connection.execute(insert, row)
        return len(rows) / (time.perf_counter() - started)


@dataclass(frozen=True)
class StorageFloor:
    events_table_rows_per_s: float  # the COPY into a copy of events alone
    floor_events_per_s: float  # that COPY and the intervals' insert: events per second of both


def storage_floor(
    url: str, transitions: list[Transition], batch_size: int, received_at: datetime
) -> StorageFloor:
    """The COPY of the ceiling into a copy of ``events``, then the intervals the events derive to
    inserted in one statement into a copy of ``intervals`` (the rows staged, untimed, in a
    temporary table first)."""
    intervals = [
        (i.opened_by, i.instance_id, i.attribution.tenant, i.attribution.pool, i.attribution.instance_type,
         i.attribution.accelerators, i.attribution.cap_ms, i.started_ms, i.ended_ms, i.closed_by,
         i.attribution.region, i.attribution.pricing_model, i.attribution.zone)
        for i in intervals_from(transitions)
    ]  # fmt: skip
    with psycopg.connect(url, autocommit=True) as connection:
        ranks = empty_floor_tables(connection)
        rows = [
            (*row, t.at_ms, ranks[t.state])
            for row, t in zip(ceiling_rows(transitions, received_at), transitions, strict=True)
        ]
        copying = copy_rows(
            connection, "floor_events", rows, batch_size, f"{CEILING_COLUMNS}, at_ms, state_rank"
        )
        connection.execute(
            f"CREATE TEMPORARY TABLE staged_intervals AS SELECT {INTERVAL_COLUMNS} FROM intervals LIMIT 0"
        )
        with (
            connection.cursor() as cursor,
            cursor.copy(f"COPY staged_intervals ({INTERVAL_COLUMNS}) FROM STDIN") as copy,
        ):
            for row in intervals:
                copy.write_row(row)
        started = time.perf_counter()
        connection.execute(
            f"INSERT INTO floor_intervals ({INTERVAL_COLUMNS}) SELECT {INTERVAL_COLUMNS} FROM staged_intervals"
        )
        inserting = time.perf_counter() - started
    return StorageFloor(len(transitions) / copying, len(transitions) / (copying + inserting))


def empty_floor_tables(connection: psycopg.Connection[Any]) -> dict[str, int]:
    """The floor's copies of ``events`` and ``intervals``, made and emptied; and each state's rank, the
    sort key events store beside each row (with its time in ms)."""
    connection.execute(FLOOR_TABLES)
    connection.execute("TRUNCATE floor_events, floor_intervals")
    return dict(
        connection.execute(
            "SELECT s, ledger_state_rank(s) FROM unnest(%s::text[]) AS s", [list(STATES)]
        ).fetchall()
    )


# One statement per event, so one round trip and one commit, as the meter's own call: the event
# into a copy of events with its sort key, and its interval opened (a start) or closed (a stop).
METER_FLOOR_START = f"""
WITH stored AS (
    INSERT INTO floor_events ({CEILING_COLUMNS}, at_ms, state_rank)
    VALUES ({", ".join(["%s"] * 16)})
)
INSERT INTO floor_intervals (opened_by, instance_id, tenant, pool, instance_type, accelerators, cap_ms,
                             started_ms, region, pricing_model, zone)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""
METER_FLOOR_STOP = f"""
WITH stored AS (
    INSERT INTO floor_events ({CEILING_COLUMNS}, at_ms, state_rank)
    VALUES ({", ".join(["%s"] * 16)})
)
UPDATE floor_intervals SET ended_ms = %s, closed_by = %s WHERE instance_id = %s AND ended_ms IS NULL
"""


def meter_floor_rows_per_second(url: str, transitions: list[Transition], received_at: datetime) -> float:
    """What the meter must store per event, one statement (one round trip, one commit) each: the
    event into a copy of ``events`` (its keys, indexes, checks) and its interval opened or closed in
    a copy of ``intervals`` (its keys and generated column), nothing derived, no rollups."""
    with psycopg.connect(url, autocommit=True) as connection:
        ranks = empty_floor_tables(connection)
        statements = []
        for row, t in zip(ceiling_rows(transitions, received_at), transitions, strict=True):
            event = (*row, t.at_ms, ranks[t.state])
            who = t.attribution
            if t.state == "running":
                statements.append((METER_FLOOR_START, (*event, t.event_id, t.instance_id, who.tenant, who.pool,
                                   who.instance_type, who.accelerators, who.cap_ms, t.at_ms, who.region,
                                   who.pricing_model, who.zone)))  # fmt: skip
            else:
                statements.append((METER_FLOOR_STOP, (*event, t.at_ms, t.event_id, t.instance_id)))
        started = time.perf_counter()
        for statement, parameters in statements:
            connection.execute(statement, parameters)
        return len(statements) / (time.perf_counter() - started)
