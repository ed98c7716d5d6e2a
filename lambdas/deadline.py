"""The deadlines' Lambda entry point: on EC2's native state-change events, arm or disarm a host's deadline.

The event is EventBridge's ``EC2 Instance State-change Notification`` or an instance's ``Tag Change on
Resource`` (a hub's: its spokes' too, forwarded; docs/organisation.md, central deadlines); the result is
``{"instance_id", "state", "action": armed|moved|disarmed|judged|ignored|refused, "reason", "deadline"}``.
The work is :func:`lambdas.engines.deadlines.act_on_state_change`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from guardrails.settings import Settings
from lambdas.aws import heartbeat
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.environment import ClientFactory, container_settings, default_clients, utc_now
from lambdas.aws.logs import configure_logging
from lambdas.aws.refusals import refuse_event
from lambdas.aws.spoke_clients import account_of_arn
from lambdas.aws.spoke_list import SpokeList
from lambdas.engines.deadlines import act_on_state_change, parse_deadline_event
from lambdas.engines.decision_logs import decision_log

# A hub's spokes, kept by the container as its settings are (lambdas/engines/org_sweeping.py).
CONTAINER_SPOKES = SpokeList()


def handle(
    event: Mapping[str, Any],
    *,
    settings: Settings,
    clients: ClientFactory,
    now: datetime,
    decisions: DecisionLog | None = None,
    own_account: str | None = None,
    spokes: SpokeList | None = None,
) -> dict[str, Any]:
    """``decisions`` (by default log lines only) is keyed by the event's id: a redelivery logs nothing twice;
    a hub knows its ``own_account`` (from its ARN) and its ``spokes``."""
    try:
        change = parse_deadline_event(event)
    except ValueError as error:
        answer = dict.fromkeys(("instance_id", "state", "deadline")) | {
            "action": "refused",
            "reason": str(error),
        }
        return refuse_event(heartbeat.DEADLINE, "refused", error, answer)
    decisions = decisions or DecisionLog(
        guardrail=heartbeat.DEADLINE, origin=str(event.get("id") or f"deadline-{now.isoformat()}")
    )
    return act_on_state_change(
        change,
        settings=settings,
        clients=clients,
        now=now,
        decisions=decisions,
        own_account=own_account,
        spokes=spokes,
    )


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    configure_logging(heartbeat.DEADLINE)
    return handle(
        event,
        settings=container_settings(),
        clients=default_clients,
        now=utc_now(),
        decisions=decision_log(heartbeat.DEADLINE, _event_id(event)),
        own_account=account_of_arn(getattr(context, "invoked_function_arn", None)),
        spokes=CONTAINER_SPOKES,
    )


def _event_id(event: object) -> str | None:
    """The event's own id, the decision log's key; None for an event without one (or not an object)."""
    found = event.get("id") if isinstance(event, Mapping) else None
    return str(found) if isinstance(found, str) and found else None
