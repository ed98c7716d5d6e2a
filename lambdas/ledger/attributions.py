"""Attributions: usage the ledger holds as ``unattributed``, given its tenant by an operator.

``parkbrake ledger attribute`` records one (``ledger_attribute``: the ``attributions`` table, then the
host derived again from ``--since`` on, the rollups moved), and it is logged as a decision of kind
``attribute``. Deriving reads the table (``ledger_attributed`` in ``functions/attributions.sql``),
so an attribution given before the events it covers arrive counts as one given after them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from guardrails.decisions import Decision
from guardrails.errors import InputError
from guardrails.ledger import UNATTRIBUTED, from_ms, seconds, to_ms
from guardrails.plurals import counted
from lambdas.ledger.closes import PeriodCloses
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import UNBOUNDED_MS, LedgerStore

ATTRIBUTE = "SELECT * FROM ledger_attribute(%s, %s, %s, %s, %s, %s, %s)"
# Hosts with usage held as unattributed in [since, until): what `ledger report` lists with the fix.
UNATTRIBUTED_HOSTS = """
SELECT instance_id, min(started_ms), sum(accelerators::bigint * (coalesce(ended_ms, greatest(started_ms, %(now_ms)s))
                                                          - started_ms))
FROM intervals
WHERE tenant = 'unattributed' AND started_ms < %(until_ms)s
  AND (billed_until_ms IS NULL OR billed_until_ms > %(since_ms)s)
GROUP BY instance_id
ORDER BY instance_id
"""

# Stops that close nothing yet, older than ``before_ms``: a stop with no `running` before it since
# its host's previous stop of a later or the same state (stops of one launch go forward: stopping,
# stopped, shutting-down, terminated), so a new launch's stop whose `running` has not arrived, at
# the start of a host's history or after an earlier launch. The hosts are walked by a skip scan of
# events_by_instance; each host's events are read in the index's order.
WAITING_STOPS = """
WITH RECURSIVE hosts AS (
    (SELECT instance_id FROM events ORDER BY instance_id LIMIT 1)
    UNION ALL
    SELECT (SELECT e.instance_id FROM events e WHERE e.instance_id > h.instance_id ORDER BY e.instance_id LIMIT 1)
    FROM hosts h
    WHERE h.instance_id IS NOT NULL
)
SELECT h.instance_id, s.event_id, s.state, s.at_ms
FROM hosts h
CROSS JOIN LATERAL (
    SELECT o.event_id, o.state, o.at_ms FROM (
        SELECT e.event_id, e.state, e.at_ms, e.state_rank,
               lag(e.state) OVER w AS before_state, lag(e.state_rank) OVER w AS before_rank
        FROM events e
        WHERE e.instance_id = h.instance_id AND e.state <> 'pending'
        WINDOW w AS (ORDER BY e.at_ms, e.state_rank, e.event_id COLLATE "C")
    ) AS o
    WHERE o.state <> 'running'
      AND (o.before_state IS NULL OR (o.before_state <> 'running' AND o.before_rank >= o.state_rank))
) AS s
WHERE h.instance_id IS NOT NULL AND s.at_ms < %(before_ms)s
ORDER BY h.instance_id, s.at_ms, s.event_id COLLATE "C"
"""
WAITING_AFTER = timedelta(days=1)  # a stop waits this long for its start before it is reported


@dataclass(frozen=True)
class AttributionRequest:
    instance_id: str
    tenant: str
    since: datetime
    until: datetime | None
    pool: str | None
    actor: str
    reason: str

    def __post_init__(self) -> None:
        if self.tenant == UNATTRIBUTED:
            raise InputError(
                f"--tenant: {UNATTRIBUTED} is what the usage is now; name the tenant it belongs to"
            )
        if not self.reason.strip():
            raise InputError("--reason: say why the usage is this tenant's, e.g. --reason 'ticket OPS-42'")
        if self.until is not None and to_ms(self.until) <= to_ms(self.since):
            raise InputError("--until: must be after --since")


@dataclass(frozen=True)
class Reattributed:
    """One interval whose attribution the request changed."""

    opened_by: str
    started_ms: int
    ended_ms: int | None
    accelerator_ms: int
    tenant_before: str
    pool_before: str
    tenant_after: str
    pool_after: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "opened_by": self.opened_by,
            "started": from_ms(self.started_ms).isoformat(),
            "ended": None if self.ended_ms is None else from_ms(self.ended_ms).isoformat(),
            "accelerator_seconds": str(seconds(self.accelerator_ms)),  # exact, as every JSON amount
            "before": {"tenant": self.tenant_before, "pool": self.pool_before},
            "after": {"tenant": self.tenant_after, "pool": self.pool_after},
        }


def attribute(store: LedgerStore, request: AttributionRequest, *, dry_run: bool) -> list[Reattributed]:
    """Record ``request`` and derive its host again; the intervals that changed. A dry run derives
    them in a transaction it rolls back, so it reports exactly what the real run would change."""
    parameters = (
        request.instance_id,
        to_ms(request.since),
        UNBOUNDED_MS if request.until is None else to_ms(request.until),
        request.tenant,
        request.pool,
        request.actor,
        request.reason,
    )
    if not dry_run:
        # Before the attribution, not after: a run cut between the two then leaves the months
        # closed (a repeat finds them so), never usage moved into a month that no close holds.
        _keep_closed_months_as_billed(store, request)
    with store.connections.connection() as connection, connection.transaction() as transaction:
        rows = connection.execute(ATTRIBUTE, parameters).fetchall()
        if dry_run:
            raise psycopg.Rollback(transaction)
    return [Reattributed(row[0], int(row[1]), row[2], int(row[3]), *row[4:]) for row in rows]


def _keep_closed_months_as_billed(store: LedgerStore, request: AttributionRequest) -> None:
    """Close, empty, for ``request.tenant`` every month the request's span overlaps that is closed for
    another tenant and that ``request.tenant`` has no close of and no usage in: usage moved to it out
    of such a month stays billed as the month was closed, and its first open month bills the usage
    late (a credit for the tenant before, a charge for the new one), so no closed report changes."""
    period_closes = PeriodCloses(store)
    closes = period_closes.closes()
    done: set[str] = set()
    for (owner, period), close in sorted(closes.items()):
        if owner == request.tenant or (request.tenant, period) in closes or period in done:
            continue
        if close.until <= request.since or (request.until is not None and close.since >= request.until):
            continue
        if store.invoice_lines(
            now=close.until, since=close.since, until=close.until, tenants=[request.tenant]
        ):
            continue
        done.add(period)
        period_closes.close_empty_with(
            request.tenant, close, now=max(datetime.now(UTC), close.closed_at), actor=request.actor,
            reason=f"usage of the closed {close.period} may be attributed to {request.tenant} "
            f"({request.instance_id}; {request.reason})",
        )  # fmt: skip


def attribution_decision(
    request: AttributionRequest, changed: Sequence[Reattributed], *, now: datetime
) -> Decision:
    """The decision log's record of ``request`` (kind ``attribute``)."""
    return Decision(
        "attribute",
        request.actor,
        request.reason,
        now,
        instance_id=request.instance_id,
        tenant=request.tenant,
        details={
            "since": request.since.isoformat(),
            "until": None if request.until is None else request.until.isoformat(),
            "pool": request.pool,
            "intervals": [item.opened_by for item in changed],
            "accelerator_seconds": sum(item.accelerator_ms for item in changed) / 1000,
        },
    )


def log_attribution(
    store: LedgerStore, request: AttributionRequest, changed: Sequence[Reattributed], *, now: datetime
) -> None:
    decision = attribution_decision(request, changed, now=now)
    DecisionLedger.of(store).append([decision], origin=f"ledger-attribute:{to_ms(now)}")


@dataclass(frozen=True)
class UnattributedHost:
    instance_id: str
    first_ms: int
    accelerator_ms: int


def unattributed_hosts(
    store: LedgerStore, *, now: datetime, since: datetime, until: datetime
) -> list[UnattributedHost]:
    """Hosts with usage held as ``unattributed`` in ``[since, until)``, with how much (since the first
    such interval's start)."""
    store.settle()
    parameters = {"now_ms": to_ms(now), "since_ms": to_ms(since), "until_ms": to_ms(until)}
    with store.connections.connection() as connection:
        rows = connection.execute(UNATTRIBUTED_HOSTS, parameters).fetchall()
    return [UnattributedHost(row[0], int(row[1]), int(row[2])) for row in rows]


HINT_COMMANDS = 5  # hosts given their own `ledger attribute` line; the others are named with their --since


def attribute_hint(hosts: Sequence[UnattributedHost]) -> str:
    """The lines that name the fix for usage held as unattributed: every host with its usage, then the
    command that attributes each (the first few written out, the rest named with their ``--since``)."""
    listed = ", ".join(
        f"{host.instance_id} ({host.accelerator_ms / 1000:,.0f} accelerator-s)" for host in hosts
    )
    lines = [
        f"unattributed: {counted(len(hosts), 'host')} metered for no tenant: {listed}; "
        f"attribute {'it' if len(hosts) == 1 else 'each'} with:"
    ]
    lines += [
        f"  parkbrake ledger attribute {host.instance_id} --tenant TENANT --since {_since(host)} --reason TEXT"
        for host in hosts[:HINT_COMMANDS]
    ]
    rest = hosts[HINT_COMMANDS:]
    if rest:
        named = ", ".join(f"{host.instance_id} --since {_since(host)}" for host in rest)
        lines.append(f"  and the same for the other {counted(len(rest), 'host')}: {named}")
    return "\n".join(lines)


def _since(host: UnattributedHost) -> str:
    return from_ms(host.first_ms).isoformat()


@dataclass(frozen=True)
class WaitingStop:
    """A stop the ledger holds with no start before it: it closes nothing until its start arrives."""

    instance_id: str
    event_id: str
    state: str
    at_ms: int

    def as_dict(self) -> dict[str, str]:
        return {
            "instance_id": self.instance_id,
            "event_id": self.event_id,
            "state": self.state,
            "at": from_ms(self.at_ms).isoformat(),
        }


def waiting_stops(store: LedgerStore, *, now: datetime) -> list[WaitingStop]:
    """Stops older than :data:`WAITING_AFTER` that still wait for their start (a host's first, or a
    later launch's whose `running` is missing)."""
    with store.connections.connection() as connection:
        rows = connection.execute(WAITING_STOPS, {"before_ms": to_ms(now - WAITING_AFTER)}).fetchall()
    return [WaitingStop(row[0], row[1], row[2], int(row[3])) for row in rows]


def waiting_stops_line(stops: Sequence[WaitingStop]) -> str:
    """What ``ledger report`` and the reconciler's alert say of them."""
    listed = ", ".join(
        f"{stop.instance_id} ({stop.state} at {from_ms(stop.at_ms).isoformat()})" for stop in stops
    )
    return (
        f"waiting: {len(stops)} stop(s) older than a day with no start in the ledger: {listed}; each closes "
        "nothing until its host's running arrives (`parkbrake ledger ingest` the missing events, e.g. "
        "from the EventBridge archive)"
    )
