"""The meter's Lambda entry point: every ``EC2 Instance State-change Notification`` of an accelerator
host, onto the ledger (:func:`lambdas.engines.metering.meter_event`).

EventBridge delivers the native event (at least once, in any order); a database or AWS error raises,
so it is delivered again and a duplicate is then ignored. The result is ``{"inserted", "duplicates",
"skipped", "unattributed", "unpriced", "tenants", "outcomes", "budget"?}``. A relayed ``Guardrail
Decisions`` event (the reaper's and the deadlines' decisions) is appended to the decision log instead:
``{"decisions": {key: appended|duplicate}}``, or refused and alerted (``{"refused": reason}``) when it is
not one the writers could have sent (:func:`lambdas.engines.metering.refuse_relayed`).
"""

from __future__ import annotations

from typing import Any

from guardrails.ledger import state_change_from_event
from lambdas.aws.environment import container_settings, default_clients, utc_now
from lambdas.aws.logs import configure_logging
from lambdas.aws.spoke_list import SpokeList
from lambdas.engines.metering import GUARDRAIL, account_of, meter_event, refuse_relayed
from lambdas.ledger import decisions
from lambdas.ledger.store import container_store

# A hub's spokes (the accounts it meters), kept by the container as its settings are.
CONTAINER_SPOKES = SpokeList()


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    configure_logging(GUARDRAIL)
    if decisions.is_relayed(event):  # the reaper's and the deadlines' decisions, onto the decision log
        ledger = decisions.DecisionLedger.of(container_store())
        try:
            return {"decisions": decisions.append_relayed(event, ledger, account=account_of(context))}
        except decisions.RefusedRelay as refused:
            return refuse_relayed(refused, settings=container_settings(), clients=default_clients)
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
        spokes=CONTAINER_SPOKES,
    )
