"""The budget guardrail's Lambda entry point: every minute (and when a tenant's crossing check fires),
act on each tenant's runway (notify, deny, stop: :mod:`lambdas.engines.budgeting`).

Events: ``{}`` (or a Scheduler/EventBridge payload) checks every tenant; ``{"tenants": [...]}`` just
those; ``{"dry_run": true}`` reports what would be done and does nothing. The one-minute clock's own
event (EventBridge's ``Scheduled Event``) first asks EC2 whether any managed accelerator host runs:
with none, the database is left alone and the result says ``"idle": true``.
Returns ``{"checked", "notified", "denied", "stopped", "would", "errors", "armed", "dry_run"}``.
"""

from __future__ import annotations

from typing import Any

from lambdas.aws.environment import container_settings, default_clients, utc_now
from lambdas.aws.logs import configure_logging
from lambdas.aws.spoke_list import SpokeList
from lambdas.engines.budgeting import GUARDRAIL, BudgetRun, check_budgets
from lambdas.ledger.store import container_store

# A hub's spokes (the member accounts its budget stops reach), kept by the container as the meter's are.
CONTAINER_SPOKES = SpokeList()


def is_clock_event(event: dict[str, Any]) -> bool:
    """The one-minute rule's invocation: EventBridge's native scheduled event."""
    return event.get("source") == "aws.events" and event.get("detail-type") == "Scheduled Event"


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    configure_logging(GUARDRAIL)
    requested = event.get("tenants")
    run = check_budgets(
        settings=container_settings(),
        clients=default_clients,
        store=container_store,
        now=utc_now(),
        tenants=[str(tenant) for tenant in requested] if isinstance(requested, list) else None,
        dry_run=event.get("dry_run") is True,
        clock=is_clock_event(event),
        invoked_function_arn=getattr(context, "invoked_function_arn", None),
        spokes=CONTAINER_SPOKES,
    )
    if run is None:  # the clock found nothing running: no budget was checked
        return BudgetRun().as_dict() | {"idle": True}
    return run.as_dict()
