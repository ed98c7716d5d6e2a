"""Which decision log a guardrail's invocation writes to: the ledger where the process has a ledger
database, else the decision bus (:class:`lambdas.aws.decision_log.EventBusRelay`) where one is
configured, else the log lines alone.

Here, above both adapters, so that the AWS adapters (the relay, the log lines) and the ledger (the
decision table) know nothing of each other.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from lambdas.aws.decision_log import DecisionLog, DecisionWriter, EventBusRelay
from lambdas.aws.environment import container_settings, default_clients, ledger_configured


def container_ledger() -> DecisionWriter:
    """The Lambda container's decision log, on its one ledger connection.

    Imported here: psycopg is only packaged (in a layer) for the functions that have a database.
    """
    from lambdas.ledger.decisions import DecisionLedger
    from lambdas.ledger.store import container_store

    return DecisionLedger.of(container_store())


def decision_log(guardrail: str, origin: str | None) -> DecisionLog:
    """The decision log of a guardrail's invocation: the ledger too where the process has one, else
    the decision bus where one is configured."""
    ledger: Callable[[], DecisionWriter] | None = None
    if ledger_configured():
        ledger = container_ledger
    elif (bus := container_settings().decision_bus) is not None:
        ledger = lambda: EventBusRelay(default_clients("events", None), bus)  # noqa: E731
    return DecisionLog(guardrail=guardrail, origin=origin or f"{guardrail}-{uuid.uuid4()}", ledger=ledger)
