"""One-time EventBridge Scheduler schedules that judge one host at its deadline.

Each invokes the reaper with ``{"instance_ids": [id]}``, so the host is judged by the same rules
and stopped by the same, Auto Scaling-aware, path as the sweep's; a cap extended or an exemption
added after launch is honoured at the deadline, and the reaper re-arms the schedule for it.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import Any, Literal

from botocore.exceptions import ClientError

from guardrails import names

log = logging.getLogger(__name__)
# A deadline invocation that Scheduler could not deliver is retried for an hour, then dead-lettered.
RETRY_POLICY = {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 2}


def schedule_expression(at: datetime) -> str:
    """``at(...)`` in UTC, rounded *up* to the second so that a host is never judged before its deadline."""
    if at.microsecond:
        at = at.replace(microsecond=0) + timedelta(seconds=1)
    return f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})"


def arm_deadline(
    scheduler: Any,
    *,
    stack: str,
    instance_id: str,
    at: datetime,
    target_arn: str,
    role_arn: str,
    dead_letter_arn: str | None,
) -> Literal["created", "updated"]:
    """Create the host's deadline schedule, or move it: duplicate events and re-arming are harmless."""
    target: dict[str, Any] = {
        "Arn": target_arn,
        "RoleArn": role_arn,
        "Input": json.dumps({"instance_ids": [instance_id]}),
        "RetryPolicy": RETRY_POLICY,
    }
    if dead_letter_arn is not None:
        target["DeadLetterConfig"] = {"Arn": dead_letter_arn}
    request: dict[str, Any] = {
        "Name": names.deadline_schedule(instance_id),
        "GroupName": names.deadline_schedule_group(stack),
        "ScheduleExpression": schedule_expression(at),
        "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "ActionAfterCompletion": "DELETE",
        "Description": f"parkbrake deadline of {instance_id}",
        "Target": target,
    }
    return _create_or_update(scheduler, request)


def _create_or_update(scheduler: Any, request: dict[str, Any]) -> Literal["created", "updated"]:
    try:
        scheduler.create_schedule(**request)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ConflictException":
            raise
        scheduler.update_schedule(**request)
        log.info("moved %s to %s", request["Name"], request["ScheduleExpression"])
        return "updated"
    log.info("armed %s at %s", request["Name"], request["ScheduleExpression"])
    return "created"


def arm_budget_crossing(
    scheduler: Any, *, stack: str, tenant: str, at: datetime, target_arn: str, role_arn: str
) -> Literal["created", "updated"]:
    """A one-time check of ``tenant``'s budget at the instant its spend reaches the limit (the budget
    Lambda with ``{"tenants": [tenant]}``), in the deadlines' group; moved as the burn changes."""
    return _create_or_update(
        scheduler,
        {
            "Name": names.budget_crossing_schedule(tenant),
            "GroupName": names.deadline_schedule_group(stack),
            "ScheduleExpression": schedule_expression(at),
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "ActionAfterCompletion": "DELETE",
            "Description": f"parkbrake budget limit of tenant {tenant}"[:512],
            "Target": {"Arn": target_arn, "RoleArn": role_arn, "Input": json.dumps({"tenants": [tenant]})},
        },
    )


def disarm_deadline(scheduler: Any, *, stack: str, instance_id: str) -> bool:
    """Delete the host's deadline schedule; False when there was none (already fired, or a duplicate event)."""
    try:
        scheduler.delete_schedule(
            Name=names.deadline_schedule(instance_id), GroupName=names.deadline_schedule_group(stack)
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        return False
    log.info("disarmed the deadline of %s", instance_id)
    return True
