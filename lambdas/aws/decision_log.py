"""Where the guardrails' decisions go: one JSON log line each, always, and the ledger's decision log
when this process has a ledger database; a guardrail without one (the reaper and the deadlines run
outside the VPC, so that a database or NAT outage never silences them) relays them as EventBridge
events to the meter, which appends them (:class:`EventBusRelay`).

Recording never stands in a guardrail's way: the decisions are recorded after the guardrail acted,
and a ledger that cannot be written is reported (an error log line, the ``record-decisions`` error
counter and an entry in the errors the handler returns, which withholds its heartbeat) while the log
lines still go out.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from guardrails.decisions import RELAY_DETAIL_TYPE, RELAY_SOURCE, Decision
from lambdas.aws import heartbeat
from lambdas.aws.errors import describe_error

# Under ``lambdas``, so that configure_logging makes it a JSON logger in the Lambdas.
log = logging.getLogger("lambdas.decisions")
RECORD_ERROR = "record-decisions"
# PutEvents takes 10 entries of at most 256 KiB each: decisions are packed into entries well below that.
ENTRIES_PER_CALL = 10
ENTRY_BYTES = 200_000


class DecisionWriter(Protocol):
    def append(self, decisions: Sequence[Decision], *, origin: str) -> dict[str, str]: ...


class DecisionLog:
    """The decisions of one invocation (``origin``: its request or event id) of one guardrail."""

    def __init__(
        self, *, guardrail: str, origin: str, ledger: Callable[[], DecisionWriter] | None = None
    ) -> None:
        self.guardrail = guardrail
        self.origin = origin
        self._ledger = ledger

    def record(self, decisions: Sequence[Decision]) -> list[dict[str, str]]:
        """Log every decision; append them to the ledger if there is one. Returns the errors."""
        for decision in decisions:
            subject = decision.instance_id or decision.tenant or "-"
            log.info(
                "decision %s %s by %s: %s",
                decision.kind,
                subject,
                decision.actor,
                decision.reason,
                extra={"decision": decision.as_dict() | {"key": decision.key(self.origin)}},
            )
        if not decisions or self._ledger is None:
            return []
        try:
            self._ledger().append(decisions, origin=self.origin)
        except Exception as error:  # the guardrail already acted: report, never raise
            log.exception("could not append %d decision(s) to the ledger", len(decisions))
            heartbeat.count_action(self.guardrail, "error", RECORD_ERROR)
            return [{"action": RECORD_ERROR, "error": describe_error(error)}]
        return []


class RelayFailed(RuntimeError):
    """EventBridge did not take every decision event."""


class EventBusRelay:
    """Decisions as ``Guardrail Decisions`` events on ``bus``; a rule delivers them to the meter."""

    def __init__(self, events: Any, bus: str) -> None:
        self._events = events
        self._bus = bus

    def append(self, decisions: Sequence[Decision], *, origin: str) -> dict[str, str]:
        entries = [
            {
                "Source": RELAY_SOURCE,
                "DetailType": RELAY_DETAIL_TYPE,
                "EventBusName": self._bus,
                "Detail": detail,
            }
            for detail in _packed(decisions, origin)
        ]
        for start in range(0, len(entries), ENTRIES_PER_CALL):
            response = self._events.put_events(Entries=entries[start : start + ENTRIES_PER_CALL])
            failed = [entry for entry in response.get("Entries", []) if entry.get("ErrorCode")]
            if response.get("FailedEntryCount") or failed:
                first = failed[0] if failed else {}
                raise RelayFailed(
                    f"EventBridge refused {len(failed)} decision event(s) on bus {self._bus}: "
                    f"{first.get('ErrorCode')}: {first.get('ErrorMessage')}"
                )
        return {decision.key(origin): "relayed" for decision in decisions}


def _packed(decisions: Sequence[Decision], origin: str) -> list[str]:
    """Event details of at most about :data:`ENTRY_BYTES`, each ``{"origin", "decisions": [...]}``."""
    batches: list[list[dict[str, Any]]] = []
    size = 0
    for decision in decisions:
        record = decision.as_dict()
        record_size = len(json.dumps(record, default=str))
        if not batches or size + record_size > ENTRY_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(record)
        size += record_size
    return [json.dumps({"origin": origin, "decisions": batch}, default=str) for batch in batches]


def origin_of(context: object) -> str | None:
    """A Lambda invocation's request id: the same on Lambda's own retries of it."""
    request_id = getattr(context, "aws_request_id", None)
    return str(request_id) if request_id else None
