"""``parkbrake ledger ingest``'s engine: parse JSON Lines of native EC2 state-change events, meter
them in batches and say, per line, what happened to each event."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from guardrails.errors import InputError

if TYPE_CHECKING:
    from guardrails.ledger import StateChange
    from guardrails.settings import Settings
    from lambdas.aws.environment import ClientFactory
    from lambdas.aws.spoke_clients import PlaceClients
    from lambdas.engines.metering import MeterResult
    from lambdas.ledger.store import LedgerStore

MAX_PROBLEMS_SHOWN = 20
# Events queued between settles. Each settle derives the queue a slice at a time, each slice in
# its own transaction (``ledger_backfill_slice``, a host's events cut between slices where need
# be), so the meter waits for one slice at most, whatever this number.
SETTLE_EVERY = 10_000


def received_now() -> datetime:
    """When a backfill is received (its events' ``received_at``): when the command runs. An event
    more than the clock skew after it is from the future and refused."""
    return datetime.now(UTC)


def line_report(numbered: Sequence[tuple[int, StateChange]], result: MeterResult) -> list[dict[str, Any]]:
    """Per line of the file: what happened to its event (appended, duplicate, skipped, unattributed) and why."""
    notes = {note["event_id"]: ("skipped", note["reason"]) for note in result.skipped}
    notes |= {note["event_id"]: ("unattributed", note["reason"]) for note in result.unattributed}
    first_line: dict[str, int] = {}
    lines = []
    for number, change in numbered:
        outcome, reason = notes.get(change.event_id, ("duplicate", "already in the ledger"))
        if change.event_id in first_line:
            outcome, reason = "duplicate", f"repeats line {first_line[change.event_id]}"
        elif result.outcomes.get(change.event_id) == "appended":
            outcome, reason = "appended", ""
        first_line.setdefault(change.event_id, number)
        lines.append(
            {"line": number, "event_id": change.event_id, "instance_id": change.instance_id, "outcome": outcome,
             "reason": reason}
        )  # fmt: skip
    return lines


def read_events(lines: Iterable[str | bytes], *, received_at: datetime) -> list[tuple[int, StateChange]]:
    """Parse JSON Lines of events (with their line numbers); every malformed line (not UTF-8, not
    JSON, nested past what the parser takes, not an event, a field of the wrong type, a time outside
    the ledger's window: before 2006 or from the future, as received at ``received_at``) is reported,
    by number, before anything is written: a file with one bad line writes nothing."""
    from guardrails.ledger import MalformedEvent, state_change_from_event

    changes, problems = [], []
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError as error:
            problems.append(f"line {number}: not UTF-8 text (byte {error.start + 1} of the line)")
            continue
        if not line.strip():
            continue
        try:
            document = json.loads(line)
            if not isinstance(document, dict):
                raise MalformedEvent("not a JSON object")
            changes.append((number, state_change_from_event(document, received_at=received_at)))
        except (json.JSONDecodeError, MalformedEvent) as error:
            problems.append(f"line {number}: {error}")
        except RecursionError:
            problems.append(f"line {number}: JSON nested too deep to be an event")
    if problems:
        shown = problems[:MAX_PROBLEMS_SHOWN]
        more = len(problems) - len(shown)
        raise InputError(
            "malformed events, nothing was appended:\n  "
            + "\n  ".join(shown)
            + (f"\n  ... and {more} more" if more else "")
        )
    return changes


def host_groups(changes: Sequence[StateChange], size: int) -> list[list[StateChange]]:
    """``changes`` cut into groups of whole hosts, each of about ``size`` events or more (one host's
    events are never split), in the order of their first events."""
    by_host: dict[str, list[StateChange]] = {}
    for change in changes:
        by_host.setdefault(change.instance_id, []).append(change)
    groups: list[list[StateChange]] = [[]]
    for events in by_host.values():
        if len(groups[-1]) >= size:
            groups.append([])
        groups[-1] += events
    return [group for group in groups if group]


def hub_reach(settings: Settings, clients: ClientFactory) -> PlaceClients | None:
    """A hub's backfill (``PARKBRAKE_MEMBER_ACCOUNTS`` set) reads a member account's hosts through its
    spoke role, as the hub's meter does; its own account is the caller's (STS GetCallerIdentity)."""
    if settings.member_accounts is None:
        return None
    from lambdas.aws.spoke_clients import place_clients_for

    own = clients("sts", None).get_caller_identity()["Account"]
    return place_clients_for(settings, clients, own_account=own)


def ingest_changes(
    changes: Sequence[StateChange],
    *,
    store: LedgerStore,
    clients: ClientFactory,
    settings: Settings,
    batch_size: int,
    progress: bool = False,
    received_at: datetime | None = None,
) -> MeterResult:
    """Meter ``changes`` as a backfill: each batch is looked up in EC2 (one lookup per batch) and
    queued in its own transaction; a settle appends and derives it after every SETTLE_EVERY
    events, a group of whole hosts."""
    from rich.progress import Progress

    from cli.console import console
    from lambdas.engines.metering import Attributed, account, attribute_changes

    received_at = received_at or received_now()
    attributed = Attributed()
    place_clients = hub_reach(settings, clients)
    with Progress(console=console(stderr=True), disable=not progress) as bar:
        task = bar.add_task("ingesting", total=len(changes))
        for number, group in enumerate(host_groups(changes, SETTLE_EVERY)):
            if number:  # the group before it; backfill_outcomes settles the last
                store.settle()
            for start in range(0, len(group), batch_size):
                changes_batch = group[start : start + batch_size]
                batch = attribute_changes(
                    changes_batch, store=store, clients=clients, settings=settings, received_at=received_at,
                    place_clients=place_clients,
                )  # fmt: skip
                store.queue_backfill(batch.transitions, received_at=received_at)
                attributed.add(batch)
                bar.advance(task, len(changes_batch))
    settled = store.backfill_outcomes(attributed.transitions, received_at=received_at)
    return account(attributed, settled, store=store, received_at=received_at)
