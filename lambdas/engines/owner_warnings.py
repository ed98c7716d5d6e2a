"""The owner's warning before a deadline: what the warning schedule's ``{"warn": [id]}`` does
(:func:`warn_and_record`, the reaper's run for that payload).

The host is judged again when the schedule fires: a deadline moved later since (an extension, a new
exemption) re-arms the warning for it and sends nothing; a host already due, stopped or not this
stack's gets nothing. Otherwise its owner is told (the SNS ``owner`` attribute, and the chat channel).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from guardrails.decisions import Decision
from guardrails.owners import owner_of
from guardrails.rules.base import instant
from guardrails.settings import Settings
from guardrails.sweep import owner_stack, policy_from_settings
from guardrails.sweep_notice import running_cost
from guardrails.warning import OwnerWarning, warning_decision, warning_timing
from lambdas.aws import heartbeat
from lambdas.aws.deadline_schedules import HostPlace, arm_deadline
from lambdas.aws.decision_log import RECORD_ERROR, DecisionLog
from lambdas.aws.environment import ClientFactory
from lambdas.aws.errors import AWS_ERRORS, describe_error
from lambdas.aws.heartbeat import REAPER
from lambdas.aws.notices import notify
from lambdas.engines.sweeping import plan_sweep

log = logging.getLogger(__name__)


class WarningFailed(RuntimeError):
    """An owner's warning could not be published; raised so that Scheduler retries it (then dead-letters)."""


def warn_and_record(
    instance_ids: Sequence[str],
    *,
    settings: Settings,
    clients: ClientFactory,
    now: datetime,
    decisions: DecisionLog,
    place: HostPlace | None = None,
) -> dict[str, Any]:
    """The warning schedule's payload: tell the owners; a warning that could not be published raises.
    ``place``: a hub's warning of a member account's hosts (``clients`` reach them there)."""
    result, decided = warn_owners(settings, instance_ids=instance_ids, clients=clients, now=now, place=place)
    result["errors"] += decisions.record(decided)
    if result["warned"]:
        heartbeat.count_action(REAPER, "warn", "before-deadline", len(result["warned"]))
    # Retried, a warning would be sent twice: only a publication that failed is worth it. The chat
    # channel is best effort, and a decision log that could not be written counts its own error.
    failed = [error for error in result["errors"] if error.get("action") not in ("chat", RECORD_ERROR)]
    if failed:
        raise WarningFailed(f"the warning of {', '.join(instance_ids)} failed: {failed}")
    return result


def warn_owners(
    settings: Settings,
    *,
    instance_ids: Sequence[str],
    clients: ClientFactory,
    now: datetime,
    place: HostPlace | None = None,
) -> tuple[dict[str, Any], list[Decision]]:
    """Warn the owner of each host whose deadline is ``warn_before`` away; returns what was done, and
    the decisions to log (one per warning sent)."""
    plan = plan_sweep(settings, now=now, clients=clients, instance_ids=instance_ids)
    policy = policy_from_settings(settings)
    decisions: list[Decision] = []
    result: dict[str, Any] = {"warned": [], "moved": [], "skipped": [], "errors": list(plan.errors)}
    for verdict in plan.verdicts:
        host, deadline = verdict.host, verdict.deadline
        ours = owner_stack(host, policy, plan.live_stacks.get(host.region)) is None
        if verdict.action == "stop" or deadline is None or host.state != "running" or not ours:
            result["skipped"].append({"instance_id": host.instance_id, "reason": verdict.reason})
            continue
        timing = warning_timing(deadline, now, settings.warn_before)
        if timing == "due":
            result["skipped"].append(
                {
                    "instance_id": host.instance_id,
                    "reason": "at its deadline: its deadline schedule judges it",
                }
            )
        elif timing == "moved":
            result["moved"].append(host.instance_id)
            result["errors"] += _rearm(
                settings,
                host.instance_id,
                host.region,
                deadline.enforce_at,
                clients=clients,
                now=now,
                place=place,
            )
        else:
            running, cost = running_cost(host, now)
            warning = OwnerWarning(host, deadline, now, running, cost, settings.stack, settings.max_exemption)
            owner = owner_of(host.tags)
            errors = notify(
                warning.subject(), warning.body(), [owner] if owner else [], settings, clients=clients
            )
            result["errors"] += [{"instance_id": host.instance_id, **error} for error in errors]
            result["warned"].append(host.instance_id)
            decisions.append(warning_decision(warning, actor=REAPER, errors=errors))
    return result, decisions


def _rearm(
    settings: Settings,
    instance_id: str,
    region: str,
    at: datetime,
    *,
    clients: ClientFactory,
    now: datetime,
    place: HostPlace | None = None,
) -> list[dict[str, str]]:
    """The deadline moved later: its warning (and, harmlessly, the deadline itself) follow it."""
    if not (settings.stack and settings.deadline_target_arn and settings.scheduler_role_arn):
        return [
            {"instance_id": instance_id, "action": "arm-warning", "error": "no deadline target configured"}
        ]
    try:
        arm_deadline(
            clients("scheduler", region if place is None else None),  # a member's: the hub's own group
            group=settings.deadline_schedule_group(),
            instance_id=instance_id,
            at=at,
            target_arn=settings.deadline_target_arn,
            role_arn=settings.scheduler_role_arn,
            dead_letter_arn=settings.deadline_dead_letter_arn,
            warn_before=settings.warn_before,
            now=now,
            place=place,
        )
    except AWS_ERRORS as error:
        return [{"instance_id": instance_id, "action": "arm-warning", "error": describe_error(error)}]
    log.info("the deadline of %s moved to %s; its warning follows", instance_id, instant(at))
    return []
