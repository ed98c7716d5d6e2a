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
    from lambdas.ledger.store import LedgerStore
    from lambdas.meter import MeterResult

MAX_PROBLEMS_SHOWN = 20


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


def read_events(lines: Iterable[str]) -> list[tuple[int, StateChange]]:
    """Parse JSON Lines of events (with their line numbers); every malformed line is reported, by
    number, before anything is written."""
    from guardrails.ledger import MalformedEvent, state_change_from_event

    changes, problems = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            document = json.loads(line)
            if not isinstance(document, dict):
                raise MalformedEvent("not a JSON object")
            changes.append((number, state_change_from_event(document)))
        except (json.JSONDecodeError, MalformedEvent) as error:
            problems.append(f"line {number}: {error}")
    if problems:
        shown = problems[:MAX_PROBLEMS_SHOWN]
        more = len(problems) - len(shown)
        raise InputError(
            "malformed events, nothing was appended:\n  "
            + "\n  ".join(shown)
            + (f"\n  ... and {more} more" if more else "")
        )
    return changes


def ingest_changes(
    changes: Sequence[StateChange],
    *,
    store: LedgerStore,
    clients: ClientFactory,
    settings: Settings,
    batch_size: int,
    progress: bool = False,
) -> MeterResult:
    """Meter ``changes`` in batches: one EC2 lookup and one database transaction per batch."""
    from rich.progress import track

    from cli.console import console
    from lambdas.meter import MeterResult, meter

    total = MeterResult()
    batches = [changes[start : start + batch_size] for start in range(0, len(changes), batch_size)]
    for batch in track(batches, description="ingesting", console=console(stderr=True), disable=not progress):
        now = datetime.now(UTC)
        total.add(
            meter(batch, store=store, clients=clients, settings=settings, received_at=now, source="ingest")
        )
    return total
