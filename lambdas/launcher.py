"""The nightly launcher's Lambda entry point: ``{"pool": "training"}`` (optionally ``"capacity": N``)
starts a GPU pool, unless the stack is parked, the calendar closes the day, the pool already runs
that many hosts or the tenant's runway cannot pay for them (:mod:`lambdas.engines.launching`).

A stack with a calendar of closed days adds ``"calendar"``, ``"timezone"`` and ``"scheduled_time"``;
``"report_wait_s"`` (at most 40: the function times out at 60) bounds how long it reads what the group
launched. The result is ``{"pool", "target", "started", "refused", "budget", "required_usd",
"reservation_id", "instance_types", "priced_as", "got"}``, with ``"errors"`` when something could not
be published or recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from guardrails.launch import BudgetGate
from guardrails.settings import Settings
from lambdas.aws import heartbeat
from lambdas.aws.decision_log import DecisionLog, origin_of
from lambdas.aws.environment import ClientFactory, container_settings, default_clients, utc_now
from lambdas.aws.logs import configure_logging
from lambdas.aws.refusals import refuse_event
from lambdas.engines.decision_logs import decision_log
from lambdas.engines.launching import budget_gate, parse_event, start_pool


def handle(
    event: Mapping[str, Any],
    *,
    settings: Settings,
    clients: ClientFactory,
    gate: BudgetGate | None,
    now: datetime,
    decisions: DecisionLog | None = None,
) -> dict[str, Any]:
    """Start the pool; ``decisions`` (by default log lines only) records the start or the refusal."""
    try:
        start = parse_event(event)
    except ValueError as error:
        answer = {"pool": None, "started": 0, "refused": {"kind": "malformed-event", "reason": str(error)}}
        return refuse_event(heartbeat.LAUNCHER, "refuse", error, answer)
    decisions = decisions or DecisionLog(guardrail=heartbeat.LAUNCHER, origin=f"launcher-{now.isoformat()}")
    return start_pool(start, settings=settings, clients=clients, gate=gate, now=now, decisions=decisions)


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    configure_logging(heartbeat.LAUNCHER)
    return handle(
        event,
        settings=container_settings(),
        clients=default_clients,
        gate=budget_gate(getattr(context, "invoked_function_arn", None)),
        now=utc_now(),
        decisions=decision_log(heartbeat.LAUNCHER, origin_of(context)),
    )
