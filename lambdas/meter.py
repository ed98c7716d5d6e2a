"""The meter's Lambda entry point: every ``EC2 Instance State-change Notification`` of an accelerator
host, onto the ledger (:func:`lambdas.engines.metering.meter_event`).

EventBridge delivers the native event (at least once, in any order); a database or AWS error raises,
so it is delivered again and a duplicate is then ignored. The result is ``{"inserted", "duplicates",
"skipped", "unattributed", "unpriced", "tenants", "outcomes", "budget"?}``. A relayed ``Guardrail
Decisions`` event (the reaper's and the deadlines' decisions) is appended to the decision log instead:
``{"decisions": {key: appended|duplicate}}``.
"""

from __future__ import annotations

from typing import Any

from guardrails.ledger import state_change_from_event
from lambdas.aws.environment import container_settings, default_clients, utc_now
from lambdas.aws.logs import configure_logging
from lambdas.engines.metering import GUARDRAIL, meter_event
from lambdas.ledger import decisions
from lambdas.ledger.store import container_store


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    configure_logging(GUARDRAIL)
    if decisions.is_relayed(event):  # the reaper's and the deadlines' decisions, onto the decision log
        return {"decisions": decisions.append_relayed(event, decisions.DecisionLedger.of(container_store()))}
    now = utc_now()
    change = state_change_from_event(event, received_at=now)  # a time outside the window raises: refused
    settings = container_settings()
    return meter_event(
        change,
        store=container_store(),
        clients=default_clients,
        settings=settings,
        now=now,
        invoked_function_arn=getattr(context, "invoked_function_arn", None),
    )
