"""The Guardrails component's EventBridge Scheduler wiring: the role Scheduler runs as, and the groups
and schedules the stack declares.

Declared by the component (these resources are its children, their names unchanged); the one-time
schedules per host (a deadline, and the owner's warning ``warn_before`` ahead of it) are created at
run time in the deadlines' group by ``lambdas/aws/deadline_schedules.py``, and invoke the reaper as
the role declared here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

import pulumi
import pulumi_aws as aws

from components.common import child_of, named_child_of
from components.guardrail_alerting import GuardrailAlerting
from components.iam_policies import Grants, scheduler_policy, trust_policy
from guardrails import names
from guardrails.schedules import eventbridge_cron, rate_expression


@dataclass
class NightlyStart:
    pool: str
    cron: str  # five-field cron, in ``timezone``
    timezone: str
    capacity: int  # the pool's desired capacity the launcher sets
    autoscaling_group_arn: pulumi.Input[str]
    calendar: str | None = None  # iCalendar text of the closed days: no start on those


def nightly_input(stack: str, nightly: NightlyStart) -> dict[str, object]:
    """The launcher's event; with a calendar, where it is, the day's zone and when the start was due."""
    payload: dict[str, object] = {"pool": nightly.pool, "capacity": nightly.capacity}
    if nightly.calendar is None:
        return payload
    return payload | {
        "calendar": names.calendar_parameter(stack),
        "timezone": nightly.timezone,
        # A context attribute Scheduler fills in: a retried start is judged on the day it was due.
        "scheduled_time": "<aws.scheduler.scheduled-time>",
    }


@dataclass(frozen=True)
class ScheduleArgs:
    stack: str
    sweep_every: timedelta
    parked: bool
    nightly: NightlyStart | None
    tags: Mapping[str, str]


def scheduler_role(
    parent: pulumi.Resource, stack: str, account_id: pulumi.Output[str], tags: Mapping[str, str]
) -> aws.iam.Role:
    """The role EventBridge Scheduler invokes the reaper (sweeps, deadlines, warnings) and the launcher as."""
    return aws.iam.Role(
        "scheduler",
        name=names.scheduler_role(stack),
        description="EventBridge Scheduler: invokes the reaper (sweeps, deadlines, warnings) and the launcher",
        assume_role_policy=pulumi.Output.json_dumps(
            trust_policy("scheduler.amazonaws.com", {"StringEquals": {"aws:SourceAccount": account_id}})
        ),
        tags=dict(tags),
        opts=named_child_of(parent),
    )


def scheduler_role_policy(
    parent: pulumi.Resource, invoked: Sequence[str], grants: pulumi.Output[Grants], role: aws.iam.Role
) -> aws.iam.RolePolicy:
    """Invoke the ``invoked`` guardrails, and dead-letter a delivery that failed to their queues."""
    return aws.iam.RolePolicy(
        "scheduler",
        role=role.id,
        policy=grants.apply(
            lambda known: json.dumps(
                scheduler_policy(
                    [known.function_arn(name) for name in invoked],
                    [known.arn("sqs", names.dead_letter_queue(known.stack, name)) for name in invoked],
                )
            )
        ),
        opts=child_of(parent),
    )


def declare_schedules(
    parent: pulumi.Resource,
    args: ScheduleArgs,
    *,
    reaper_arn: pulumi.Output[str],
    launcher_arn: pulumi.Output[str] | None,
    role_arn: pulumi.Output[str],
    permission: aws.iam.RolePolicy,
    alerting: GuardrailAlerting,
) -> None:
    """The sweep's rate schedule and the nightly start, in the stack's group; the deadlines' own group."""
    stack = args.stack
    group = aws.scheduler.ScheduleGroup(
        "schedules", name=names.schedule_group(stack), tags=dict(args.tags), opts=named_child_of(parent)
    )
    aws.scheduler.ScheduleGroup(
        "deadline-schedules",
        name=names.deadline_schedule_group(stack),
        tags=dict(args.tags),
        opts=named_child_of(parent),
    )
    aws.scheduler.Schedule(
        "reaper",
        name=names.reaper_schedule(stack),
        group_name=group.name,
        description="the sweep: stops managed GPU hosts past their deadline (never parked)",
        schedule_expression=rate_expression(args.sweep_every),
        flexible_time_window={"mode": "OFF"},
        state="ENABLED",
        target={
            "arn": reaper_arn,
            "role_arn": role_arn,
            "input": json.dumps({"dry_run": False}),
            # A sweep older than one period is superseded by the next one.
            **alerting.delivery("reaper", args.sweep_every),
        },
        opts=named_child_of(parent, depends_on=[permission]),
    )
    nightly = args.nightly
    if nightly is None or launcher_arn is None:
        return
    closed_days = _closed_days(parent, args)
    aws.scheduler.Schedule(
        f"nightly-{nightly.pool}",
        name=names.nightly_schedule(stack, nightly.pool),
        group_name=group.name,
        description=f"nightly start of the {nightly.pool} pool ({nightly.cron} {nightly.timezone})",
        schedule_expression=eventbridge_cron(nightly.cron),
        schedule_expression_timezone=nightly.timezone,
        flexible_time_window={"mode": "OFF"},
        state="DISABLED" if args.parked else "ENABLED",
        target={
            "arn": launcher_arn,
            "role_arn": role_arn,
            "input": json.dumps(nightly_input(stack, nightly)),
            **alerting.delivery("launcher"),
        },
        opts=named_child_of(parent, depends_on=[permission, *closed_days]),
    )


def _closed_days(parent: pulumi.Resource, args: ScheduleArgs) -> list[pulumi.Resource]:
    """The calendar of closed days the launcher reads (none without a calendar)."""
    if args.nightly is None or args.nightly.calendar is None:
        return []
    calendar = args.nightly.calendar
    parameter = aws.ssm.Parameter(
        "closed-days",
        name=names.calendar_parameter(args.stack),
        type="String",
        # Standard parameters hold 4 KB, Advanced 8 KB (the stack config refuses more).
        tier="Standard" if len(calendar.encode()) <= 4096 else "Advanced",
        insecure_value=calendar,
        description="parkbrake closed days (iCalendar): the nightly launcher starts no pool on them",
        tags=dict(args.tags),
        opts=named_child_of(parent),
    )
    return [parameter]
