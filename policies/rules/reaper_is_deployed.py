"""A stack that runs GPU pools also runs the sweep that stops hosts past their caps, and is told when it fails.

The reaper is found by the names every part of parkbrake shares (``guardrails.names``): its Lambda
function, its EventBridge Scheduler rate schedule (never disabled: the guardrails are never parked),
an alarm on the function's errors and an alarm on its heartbeat that treats missing data as breaching.
Alarms count only when they notify someone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from guardrails import names
from policies.resources import (
    LAMBDA_FUNCTION,
    METRIC_ALARM,
    SCHEDULE,
    accelerator_hosts,
    gpu_autoscaling_groups,
    items,
    mapping,
    of_type,
    text,
)
from policies.rule import PolicyContext, PolicyRule, ResourceView, Violation, stack_name, stack_urn

REAPER = "reaper"
LAMBDA_NAMESPACE = "AWS/Lambda"


def _metrics(alarm: ResourceView) -> Iterator[Mapping[str, Any]]:
    """The metrics an alarm watches: its own, or those of its metric-math queries."""
    yield alarm.inputs
    for query in map(mapping, items(alarm.inputs.get("metricQueries"))):
        yield mapping(query.get("metric"))


def _watches(alarm: ResourceView, namespace: str, metric_name: str, subjects: set[str]) -> bool:
    """True when the alarm watches ``namespace/metric_name`` for one of ``subjects`` (or, undimensioned, for all)."""
    for metric in _metrics(alarm):
        if metric.get("namespace") != namespace or metric.get("metricName") != metric_name:
            continue
        values = {value for value in mapping(metric.get("dimensions")).values() if isinstance(value, str)}
        if not values or values & subjects:
            return True
    return False


def _notifies(alarm: ResourceView) -> bool:
    return alarm.inputs.get("actionsEnabled") is not False and bool(items(alarm.inputs.get("alarmActions")))


def _reaper_schedules(schedules: list[ResourceView], stack: str, function: str) -> list[ResourceView]:
    def is_reapers(schedule: ResourceView) -> bool:
        target_arn = text(mapping(schedule.inputs.get("target")).get("arn")) or ""
        return schedule.inputs.get("name") == names.reaper_schedule(stack) or target_arn.endswith(
            f":function:{function}"
        )

    return [schedule for schedule in schedules if is_reapers(schedule)]


def _schedule_problems(schedules: list[ResourceView], stack: str, function: str) -> Iterator[str]:
    found = _reaper_schedules(schedules, stack, function)
    if not found:
        yield (
            f"no EventBridge Scheduler schedule {names.reaper_schedule(stack)!r} invokes the reaper; "
            "the sweep never runs"
        )
        return
    for schedule in found:
        expression = text(schedule.inputs.get("scheduleExpression")) or ""
        if not expression.startswith("rate("):
            yield f"the reaper's schedule {schedule.name} is {expression!r}; the sweep runs on a rate(...) schedule"
        if schedule.inputs.get("state") == "DISABLED":
            yield f"the reaper's schedule {schedule.name} is DISABLED; the guardrails are never parked"


def _alarm_problems(alarms: list[ResourceView], function: str) -> Iterator[str]:
    paging = [alarm for alarm in alarms if _notifies(alarm)]
    if not any(_watches(alarm, LAMBDA_NAMESPACE, "Errors", {function}) for alarm in paging):
        yield f"no alarm with an action watches {LAMBDA_NAMESPACE} Errors of {function}"
    heartbeat = [
        alarm
        for alarm in paging
        if _watches(alarm, names.heartbeat_namespace(), names.HEARTBEAT_METRIC, {REAPER, function})
    ]
    if not heartbeat:
        yield (
            f"no alarm with an action watches the reaper's heartbeat "
            f"({names.heartbeat_namespace()} {names.HEARTBEAT_METRIC}); a silent sweep would go unnoticed"
        )
    elif not any(alarm.inputs.get("treatMissingData") == "breaching" for alarm in heartbeat):
        yield "the reaper's heartbeat alarm must treat missing data as breaching, or a sweep that stops reports nothing"


def reaper_problems(resources: Sequence[ResourceView], _context: PolicyContext) -> Iterator[Violation]:
    gpu_resources = [*accelerator_hosts(resources), *gpu_autoscaling_groups(resources)]
    if not gpu_resources:
        return
    stack = stack_name(gpu_resources[0])
    where = stack_urn(gpu_resources[0])
    function = names.function_name(stack, REAPER)
    if not any(resource.inputs.get("name") == function for resource in of_type(resources, LAMBDA_FUNCTION)):
        yield Violation(where, f"the stack has GPU pools but no reaper Lambda function named {function!r}")
    problems = [
        *_schedule_problems(of_type(resources, SCHEDULE), stack, function),
        *_alarm_problems(of_type(resources, METRIC_ALARM), function),
    ]
    yield from (Violation(where, problem) for problem in problems)


RULE = PolicyRule(
    name="reaper-is-deployed",
    description=(
        "A stack with GPU pools has the reaper Lambda, its enabled rate schedule, an alarm on its errors "
        "and a heartbeat alarm that treats missing data as breaching."
    ),
    enforcement="mandatory",
    check=reaper_problems,
)
