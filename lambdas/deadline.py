"""The deadlines' Lambda entry point: on EC2's native state-change events, arm or disarm a host's deadline.

The event is EventBridge's ``EC2 Instance State-change Notification``; the result is
``{"instance_id", "state", "action": armed|moved|disarmed|judged|ignored, "reason", "deadline"}``.
The work is :func:`lambdas.engines.deadlines.act_on_state_change`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from guardrails.hosts import as_utc
from guardrails.settings import Settings
from lambdas.aws import heartbeat
from lambdas.aws.decision_log import DecisionLog, decision_log
from lambdas.aws.environment import ClientFactory, container_settings, default_clients, utc_now
from lambdas.aws.logs import configure_logging
from lambdas.engines.deadlines import StateChange, act_on_state_change

STATE_CHANGE = "EC2 Instance State-change Notification"


def parse_state_change(event: Mapping[str, Any]) -> StateChange:
    if event.get("detail-type") != STATE_CHANGE or event.get("source") != "aws.ec2":
        raise ValueError(f"not an {STATE_CHANGE!r} event from aws.ec2: {dict(event)!r}")
    detail = event.get("detail") or {}
    try:
        return StateChange(
            instance_id=str(detail["instance-id"]),
            state=str(detail["state"]),
            time=as_utc(str(event["time"])),
            region=str(event["region"]),
        )
    except (KeyError, ValueError) as error:
        raise ValueError(f"malformed {STATE_CHANGE} event ({error}): {dict(event)!r}") from None


def handle(
    event: Mapping[str, Any],
    *,
    settings: Settings,
    clients: ClientFactory,
    now: datetime,
    decisions: DecisionLog | None = None,
) -> dict[str, Any]:
    """``decisions`` (by default log lines only) is keyed by the event's id: a redelivery logs nothing twice."""
    change = parse_state_change(event)
    decisions = decisions or DecisionLog(
        guardrail=heartbeat.DEADLINE, origin=str(event.get("id") or f"deadline-{now.isoformat()}")
    )
    return act_on_state_change(change, settings=settings, clients=clients, now=now, decisions=decisions)


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    configure_logging(heartbeat.DEADLINE)
    return handle(
        event,
        settings=container_settings(),
        clients=default_clients,
        now=utc_now(),
        decisions=decision_log(heartbeat.DEADLINE, str(event.get("id") or "") or None),
    )
