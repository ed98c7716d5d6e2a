"""The deadlines engine: on a host's state change, arm or disarm its one-time deadline schedule.

``running`` arms ``at(launch time + cap)`` (or the end of a valid exemption) in UTC, and the owner's
warning ``warn_before`` ahead of it; ``stopping``, ``stopped``, ``shutting-down`` and ``terminated``
disarm both. EventBridge delivers at least once and
out of order, so every event is checked against the instance as it is now: a ``running`` from an
earlier start, or one that arrives after the host stopped, changes nothing; a stop event older than
the host's current start does not disarm the new deadline. A host already past its deadline when
its event arrives is judged at once, through the sweep (:mod:`lambdas.engines.sweeping`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from guardrails import settings as variables
from guardrails.decisions import Decision
from guardrails.durations import format_duration
from guardrails.hosts import Host, as_utc
from guardrails.rules.base import instant
from guardrails.settings import Settings, SettingsError
from guardrails.sweep import (
    host_deadline,
    names_another_stack,
    orphan_reason,
    owner_stack,
    policy_from_settings,
)
from lambdas.aws import heartbeat
from lambdas.aws.deadline_schedules import arm_deadline, disarm_deadline
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.ec2_hosts import list_hosts, live_stacks
from lambdas.aws.environment import ClientFactory
from lambdas.engines import sweeping

log = logging.getLogger(__name__)
STOPPED_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


@dataclass(frozen=True)
class StateChange:
    instance_id: str
    state: str
    time: datetime
    region: str


STATE_CHANGE = "EC2 Instance State-change Notification"


def parse_state_change(event: object) -> StateChange:
    """The state change an event reports; ValueError (quoting at most its first characters) for any
    event that is not one: the wrong type, a field missing, a field of the wrong JSON type."""
    shown = json.dumps(event, default=str)[:300] if isinstance(event, Mapping) else repr(event)[:300]
    if not isinstance(event, Mapping):
        raise ValueError(f"not an {STATE_CHANGE!r} event: {shown}")
    if event.get("detail-type") != STATE_CHANGE or event.get("source") != "aws.ec2":
        raise ValueError(f"not an {STATE_CHANGE!r} event from aws.ec2: {shown}")
    detail = event.get("detail")
    instance_id = detail.get("instance-id") if isinstance(detail, Mapping) else None
    state = detail.get("state") if isinstance(detail, Mapping) else None
    region = event.get("region")
    problems = [
        f"{name} is not text"
        for name, value in (("detail.instance-id", instance_id), ("detail.state", state), ("region", region))
        if not isinstance(value, str) or not value
    ]
    if isinstance(instance_id, str) and not instance_id.startswith("i-"):
        problems.append(f"detail.instance-id {instance_id[:40]!r} is not an instance id")
    try:
        time = as_utc(event.get("time"))
    except ValueError as error:
        problems.append(f"time: {error}")
    if problems:
        raise ValueError(f"malformed {STATE_CHANGE} event ({'; '.join(problems)}): {shown}")
    return StateChange(instance_id=str(instance_id), state=str(state), time=time, region=str(region))


@dataclass(frozen=True)
class DeadlineResult:
    instance_id: str
    state: str
    action: str  # armed, moved, disarmed, judged, ignored
    reason: str
    deadline: datetime | None = None
    tenant: str | None = None

    def decision(self, now: datetime) -> Decision:
        details = {"state": self.state} | ({"deadline": instant(self.deadline)} if self.deadline else {})
        return Decision(
            f"deadline-{self.action}",
            heartbeat.DEADLINE,
            self.reason,
            now,
            self.instance_id,
            self.tenant,
            details,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "state": self.state,
            "action": self.action,
            "reason": self.reason,
            "deadline": instant(self.deadline) if self.deadline else None,
        }


def require_targets(settings: Settings) -> tuple[str, str, str]:
    """The stack, target and role every deadline schedule needs; all missing ones are named at once."""
    stack, target_arn, role_arn = settings.stack, settings.deadline_target_arn, settings.scheduler_role_arn
    if stack and target_arn and role_arn:
        return stack, target_arn, role_arn
    raise SettingsError(
        [
            f"{name}: not set; the deadline guardrail needs it"
            for name, value in (
                (variables.STACK, stack),
                (variables.DEADLINE_TARGET_ARN, target_arn),
                (variables.SCHEDULER_ROLE_ARN, role_arn),
            )
            if not value
        ]
    )


def on_state_change(
    change: StateChange,
    settings: Settings,
    *,
    clients: ClientFactory,
    now: datetime,
    decisions: DecisionLog | None = None,
) -> DeadlineResult:
    """Arm, move or disarm the host's deadline; ``decisions`` logs what a sweep of a host already due did."""
    stack, target_arn, role_arn = require_targets(settings)
    found = list_hosts(clients("ec2", change.region), change.region, instance_ids=[change.instance_id])
    host = found[0] if found else None

    def result(action: str, reason: str, deadline: datetime | None = None) -> DeadlineResult:
        log.info("%s %s (%s): %s", action, change.instance_id, change.state, reason)
        tenant = host.tenant if host is not None else None
        return DeadlineResult(change.instance_id, change.state, action, reason, deadline, tenant)

    if change.state in STOPPED_STATES:
        if host is not None and host.state in ("pending", "running") and host.launch_time > change.time:
            return result("ignored", f"stale event: the host started again at {instant(host.launch_time)}")
        scheduler = clients("scheduler", change.region)
        if disarm_deadline(scheduler, stack=stack, instance_id=change.instance_id):
            return result("disarmed", "the host stopped; its deadline schedule is deleted")
        return result("ignored", "no deadline schedule to delete (a duplicate event, or it already fired)")
    if change.state != "running":
        return result("ignored", f"nothing to do on {change.state!r}")
    if host is None:
        return result("ignored", "the instance no longer exists")
    policy = policy_from_settings(settings)
    stacks = _stacks_if_tagged_elsewhere(host, settings, clients, change.region)
    ignored = _not_ours(host, change, settings, stacks)
    if ignored is not None:
        return result("ignored", ignored)
    deadline = host_deadline(host, policy, now, orphan=orphan_reason(host, policy, stacks) is not None)
    if deadline is None:  # _not_ours said why already; this keeps the type honest
        return result("ignored", "not managed by parkbrake")
    for problem in deadline.problems:
        log.warning("%s: %s", host.instance_id, problem)
    if deadline.due(now):
        _sweep_due(host, settings, clients=clients, now=now, decisions=decisions)
        return result("judged", "already past its deadline when the event arrived", deadline.enforce_at)
    armed = arm_deadline(
        clients("scheduler", change.region),
        stack=stack,
        instance_id=host.instance_id,
        at=deadline.enforce_at,
        target_arn=target_arn,
        role_arn=role_arn,
        dead_letter_arn=settings.deadline_dead_letter_arn,
        warn_before=settings.warn_before,
        now=now,
    )
    return result(
        "armed" if armed == "created" else "moved",
        f"judged at {instant(deadline.enforce_at)} (cap {format_duration(deadline.cap)}, {deadline.cap_source})",
        deadline.enforce_at,
    )


def _sweep_due(
    host: Host, settings: Settings, *, clients: ClientFactory, now: datetime, decisions: DecisionLog | None
) -> None:
    """Sweep a host already past its deadline now; raise, so that Lambda retries, if it was not stopped."""
    report = sweeping.sweep(settings, now=now, clients=clients, instance_ids=[host.instance_id])
    if decisions is not None:
        report.errors += decisions.record(report.decisions(actor=heartbeat.DEADLINE, now=now))
    if report.errors:
        raise RuntimeError(f"could not stop {host.instance_id}, already past its deadline: {report.errors}")


def _stacks_if_tagged_elsewhere(
    host: Host, settings: Settings, clients: ClientFactory, region: str
) -> list[str] | None:
    """The stacks deployed in the region, read only when the host names another stack (is it alive?)."""
    if not names_another_stack(host, settings.stack):
        return None
    return live_stacks(clients("ssm", region))


def _not_ours(host: Host, change: StateChange, settings: Settings, stacks: list[str] | None) -> str | None:
    """Why a ``running`` event arms nothing, or None when it should."""
    if host.state != "running":
        return f"late event: the host is {host.state} now"
    if change.time < host.launch_time:
        return f"late event from an earlier start (the host last started at {instant(host.launch_time)})"
    if not host.accelerator:
        return f"{host.instance_type} is not an accelerator instance type"
    if not host.managed:
        return "not managed by parkbrake (the sweep reports untagged GPU hosts)"
    other = owner_stack(host, policy_from_settings(settings), stacks)
    if other is not None:
        return f"belongs to stack {other!r}"
    return None


def act_on_state_change(
    change: StateChange,
    *,
    settings: Settings,
    clients: ClientFactory,
    now: datetime,
    decisions: DecisionLog,
) -> dict[str, Any]:
    """Act on ``change``, count it, and record what was decided in ``decisions``; the result."""
    outcome = on_state_change(change, settings, clients=clients, now=now, decisions=decisions)
    heartbeat.count_action(heartbeat.DEADLINE, outcome.action, outcome.state)
    # An ignored event (another host, a stale or duplicate delivery) decides nothing: its log line says why.
    errors = decisions.record([outcome.decision(now)] if outcome.action != "ignored" else [])
    if not errors:
        heartbeat.record_success(
            heartbeat.DEADLINE, stack=settings.stack, cloudwatch=clients("cloudwatch", None), now=now
        )
    return outcome.as_dict() | ({"errors": errors} if errors else {})
