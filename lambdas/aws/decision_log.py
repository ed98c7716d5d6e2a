"""Where the guardrails' decisions go: one JSON log line each, always, and the ledger's decision log
when this process has a ledger database.

Recording never stands in a guardrail's way: the decisions are recorded after the guardrail acted,
and a ledger that cannot be written is reported (an error log line, the ``record-decisions`` error
counter and an entry in the errors the handler returns, which withholds its heartbeat) while the log
lines still go out.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from guardrails.decisions import Decision
from lambdas.aws import heartbeat
from lambdas.aws.environment import ledger_configured
from lambdas.aws.stop_path import describe_error

# Under ``lambdas``, so that configure_logging makes it a JSON logger in the Lambdas.
log = logging.getLogger("lambdas.decisions")
RECORD_ERROR = "record-decisions"


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


def container_ledger() -> DecisionWriter:
    """The Lambda container's decision log, on its one ledger connection.

    Imported here: psycopg is only packaged (in a layer) for the functions that have a database.
    """
    from lambdas.ledger.decisions import DecisionLedger
    from lambdas.ledger.store import container_store

    return DecisionLedger.of(container_store())


def decision_log(guardrail: str, origin: str | None) -> DecisionLog:
    """The decision log of a guardrail's invocation: the ledger too where the process has one."""
    return DecisionLog(
        guardrail=guardrail,
        origin=origin or f"{guardrail}-{uuid.uuid4()}",
        ledger=container_ledger if ledger_configured() else None,
    )


def origin_of(context: object) -> str | None:
    """A Lambda invocation's request id: the same on Lambda's own retries of it."""
    request_id = getattr(context, "aws_request_id", None)
    return str(request_id) if request_id else None
