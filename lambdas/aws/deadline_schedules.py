"""One-time EventBridge Scheduler schedules that judge one host at its deadline, and warn its owner before.

Each deadline invokes the reaper with ``{"instance_ids": [id]}``, so the host is judged by the same rules
and stopped by the same, Auto Scaling-aware, path as the sweep's; a cap extended or an exemption
added after launch is honoured at the deadline, and the reaper re-arms the schedule for it.
Beside it, ``warn_before`` ahead, a warning schedule invokes the reaper with ``{"warn": [id]}``
(the same target, role and dead-letter queue), which tells the host's owner; both move together.

An organisation's hub arms the deadlines of its member accounts' hosts in its own group ("central
deadlines", docs/organisation.md): the payloads then name the host's place too,
``{"instance_ids": [id], "account": "<12 digits>", "region": "<region>"}``, and the hub's reaper judges
the host there through the spoke role. The schedule's name is the instance id's either way: EC2's
instance ids are not reused, so two accounts' hosts never share one.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from botocore.exceptions import ClientError

from guardrails import names
from guardrails.errors import ParkbrakeError

log = logging.getLogger(__name__)
# A deadline invocation that Scheduler could not deliver is retried for an hour, then dead-lettered.
RETRY_POLICY = {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 2}


@dataclass(frozen=True)
class HostPlace:
    """A member account and region of the organisation, where a host the hub judges runs."""

    account: str
    region: str

    def payload(self) -> dict[str, str]:
        return {"account": self.account, "region": self.region}


def schedule_expression(at: datetime) -> str:
    """``at(...)`` in UTC, rounded *up* to the second so that a host is never judged before its deadline."""
    if at.microsecond:
        at = at.replace(microsecond=0) + timedelta(seconds=1)
    return f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})"


def arm_deadline(
    scheduler: Any,
    *,
    group: str,
    instance_id: str,
    at: datetime,
    target_arn: str,
    role_arn: str,
    dead_letter_arn: str | None,
    warn_before: timedelta | None = None,
    now: datetime | None = None,
    place: HostPlace | None = None,
) -> Literal["created", "updated"]:
    """Create the host's deadline schedule, or move it: duplicate events and re-arming are harmless.

    With ``warn_before`` (and ``now``), the warning schedule moves with it, unless its time has
    passed: a warning armed earlier for a later deadline then finds the host judged and says nothing.
    ``group``: the Scheduler group (``Settings.deadline_schedule_group``: the stack's, or a spoke's own).
    ``place``: the member account and region of a host whose deadline the hub arms (its payloads name them).
    """
    target = (target_arn, role_arn, dead_letter_arn)
    named = place.payload() if place is not None else {}
    armed = _create_or_update(
        scheduler,
        _one_time(
            names.deadline_schedule(instance_id),
            group,
            at,
            f"parkbrake deadline of {instance_id}",
            _target(*target, {"instance_ids": [instance_id], **named}),
        ),
    )
    if warn_before is not None and now is not None and at - warn_before > now:
        _create_or_update(
            scheduler,
            _one_time(
                names.warning_schedule(instance_id),
                group,
                at - warn_before,
                f"parkbrake warning to the owner of {instance_id}, {int(warn_before.total_seconds())}s "
                "before its deadline",
                _target(*target, {"warn": [instance_id], **named}),
            ),
        )
    return armed


def _one_time(
    name: str, group: str, at: datetime, description: str, target: dict[str, Any]
) -> dict[str, Any]:
    return {
        "Name": name,
        "GroupName": group,
        "ScheduleExpression": schedule_expression(at),
        "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "ActionAfterCompletion": "DELETE",
        "Description": description,
        "Target": target,
    }


def _target(target_arn: str, role_arn: str, dead_letter_arn: str | None, payload: object) -> dict[str, Any]:
    target: dict[str, Any] = {
        "Arn": target_arn,
        "RoleArn": role_arn,
        "Input": json.dumps(payload),
        "RetryPolicy": RETRY_POLICY,
    }
    if dead_letter_arn is not None:
        target["DeadLetterConfig"] = {"Arn": dead_letter_arn}
    return target


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
    scheduler: Any, *, group: str, tenant: str, at: datetime, target_arn: str, role_arn: str
) -> Literal["created", "updated"]:
    """A one-time check of ``tenant``'s budget at the instant its spend reaches the limit (the budget
    Lambda with ``{"tenants": [tenant]}``), in the deadlines' group; moved as the burn changes."""
    return _create_or_update(
        scheduler,
        {
            "Name": names.budget_crossing_schedule(tenant),
            "GroupName": group,
            "ScheduleExpression": schedule_expression(at),
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "ActionAfterCompletion": "DELETE",
            "Description": f"parkbrake budget limit of tenant {tenant}"[:512],
            "Target": {"Arn": target_arn, "RoleArn": role_arn, "Input": json.dumps({"tenants": [tenant]})},
        },
    )


def disarm_deadline(scheduler: Any, *, group: str, instance_id: str) -> bool:
    """Delete the host's deadline and warning schedules; False when there was no deadline (already fired,
    or a duplicate event)."""
    if _delete(scheduler, group, names.warning_schedule(instance_id)):
        log.info("disarmed the warning of %s", instance_id)
    if not _delete(scheduler, group, names.deadline_schedule(instance_id)):
        return False
    log.info("disarmed the deadline of %s", instance_id)
    return True


def disarm_budget_crossing(scheduler: Any, *, group: str, tenant: str) -> bool:
    """Delete ``tenant``'s budget crossing check; False when there was none."""
    if not _delete(scheduler, group, names.budget_crossing_schedule(tenant)):
        return False
    log.info("disarmed the budget crossing of tenant %s", tenant)
    return True


def _delete(scheduler: Any, group: str, name: str) -> bool:
    try:
        scheduler.delete_schedule(Name=name, GroupName=group)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        return False
    return True


def armed_place(scheduler: Any, *, group: str, instance_id: str) -> HostPlace | None:
    """The place a host's armed deadline names (a member account's host, armed by the hub), or None:
    no deadline schedule in ``group``, or one for a host of the group's own account."""
    try:
        schedule = scheduler.get_schedule(Name=names.deadline_schedule(instance_id), GroupName=group)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        return None
    text = schedule.get("Target", {}).get("Input") or "{}"
    try:
        payload = json.loads(text)
    except json.JSONDecodeError:
        payload = None
    if not isinstance(payload, dict):
        raise ParkbrakeError(
            f"the deadline schedule {names.deadline_schedule(instance_id)} in {group} holds no JSON object "
            f"as its input ({text[:60]!r}); delete it, then give the host's --account"
        )
    account, region = payload.get("account"), payload.get("region")
    if isinstance(account, str) and isinstance(region, str) and account and region:
        return HostPlace(account, region)
    return None
