"""The launching engine: ``{"pool": "training"}`` (optionally ``"capacity": N``) starts a GPU pool; the
nightly launcher Lambda runs :func:`start_pool`, ``parkbrake schedule run-now`` :func:`launch`.

``"report_wait_s"`` (default 30, at most 40: the function times out at 60) bounds how long, after a
start, it reads what the group launched (per instance type and zone), which types and zones EC2 had
no capacity for, and what is still pending; a group left short because EC2 had no capacity for any
of its types is a finding: logged, counted and published to the alarm topic.

A stack with a calendar of closed days adds ``"calendar"`` (the SSM parameter holding it),
``"timezone"`` (the schedule's) and ``"scheduled_time"`` (Scheduler's ``<aws.scheduler.scheduled-time>``,
so that a retried start is judged on the day it was due).

It refuses, logs the reason and counts it when the stack is parked (SSM ``/parkbrake/<stack>/parked``)
or an organisation's hub parked the account (its spoke's ``/parkbrake/<hub stack>/spoke-<region>/parked``),
when the calendar closes the day the start was due, when the pool's Auto Scaling group already wants
that many hosts, or when a budget gate is configured and the tenant's runway cannot pay for the hosts
to be started running their full cap (at the dearest of the group's instance types: with fallback
types, which one starts is the group's choice, after the admission). Otherwise it sets the group's
desired capacity. Without a gate the result says ``"budget": "not checked"``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from guardrails import names, tags
from guardrails.closed_days import ClosedDays, parse_closed_days
from guardrails.deadlines import cap_for
from guardrails.decisions import launch_decision
from guardrails.errors import ParkbrakeError
from guardrails.hosts import as_utc
from guardrails.launch import BudgetGate, LaunchDecision, PoolState, decide_launch
from guardrails.pricing import load_price_table
from guardrails.settings import Settings
from guardrails.time_zones import zone_problem
from lambdas.aws import heartbeat, notices
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.environment import ClientFactory, container_settings, ledger_configured
from lambdas.aws.errors import AWS_ERRORS, describe_error
from lambdas.aws.park_switches import organisation_parked
from lambdas.aws.pool_capacity import await_report

log = logging.getLogger(__name__)
CENTS = Decimal("0.01")
DEFAULT_REPORT_WAIT_S = 30
MAX_REPORT_WAIT_S = 40  # well inside the function's 60 s timeout
SHORT = "insufficient-capacity"


def is_parked(ssm: Any, stack: str) -> bool:
    """The runtime park state. A missing or unreadable value is an error, never "unparked"."""
    name = names.park_parameter(stack)
    try:
        value = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ssm.exceptions.ParameterNotFound:
        raise ParkbrakeError(
            f"SSM parameter {name} does not exist; deploy the stack before launching"
        ) from None
    normalized = value.strip().lower()
    if normalized not in ("true", "false"):
        raise ParkbrakeError(f"SSM parameter {name} is {value!r}, neither 'true' nor 'false'")
    return normalized == "true"


@dataclass(frozen=True)
class LaunchEvent:
    """What a nightly start asks for."""

    pool: str
    capacity: int | None = None
    calendar: str | None = None  # the SSM parameter holding the stack's closed days (iCalendar)
    timezone: str = "UTC"  # the schedule's: a closed day is a day there
    scheduled_time: datetime | None = None  # when Scheduler meant it to run; None: now
    report_wait_s: float = DEFAULT_REPORT_WAIT_S  # how long to read what the group launched

    def due_day(self, now: datetime) -> datetime:
        """The moment the start was due, in the schedule's time zone."""
        return (self.scheduled_time or now).astimezone(ZoneInfo(self.timezone))


def read_closed_days(ssm: Any, parameter: str) -> ClosedDays:
    """The calendar a nightly start names. Missing or unreadable is an error, never "open"."""
    try:
        text = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
    except ssm.exceptions.ParameterNotFound:
        raise ParkbrakeError(
            f"SSM parameter {parameter} (the calendar of closed days) does not exist; deploy the stack"
        ) from None
    return parse_closed_days(text, f"SSM parameter {parameter}")


def closure(event: LaunchEvent, ssm: Any, now: datetime) -> str | None:
    """Why the calendar closes the day the start was due, or None (open, or no calendar)."""
    if event.calendar is None:
        return None
    due = event.due_day(now)
    reason = read_closed_days(ssm, event.calendar).closure(due.date())
    if reason is None:
        return None
    return f"{due.date().isoformat()} ({event.timezone}) is a closed day in {event.calendar}: {reason}"


def read_pool(autoscaling: Any, ec2: Any, *, stack: str, pool: str, settings: Settings) -> PoolState:
    group_name = names.autoscaling_group(stack, pool)
    groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group_name])["AutoScalingGroups"]
    if not groups:
        raise ParkbrakeError(f"no Auto Scaling group {group_name} for pool {pool!r} of stack {stack!r}")
    group = groups[0]
    candidates = _instance_types(group, ec2)
    group_tags = {tag["Key"]: tag["Value"] for tag in group.get("Tags", [])}
    problems: list[str] = []
    cap, _source = cap_for(
        group_tags, pool, settings.pool_max_runtimes, settings.default_max_runtime, problems
    )
    for problem in problems:
        log.warning("group %s: %s", group_name, problem)
    return PoolState(
        pool=pool,
        group_name=group_name,
        desired=int(group["DesiredCapacity"]),
        max_size=int(group["MaxSize"]),
        instance_type=_dearest(candidates),
        instance_types=candidates,
        tenant=group_tags.get(tags.TENANT),
        cap=cap,
    )


def _instance_types(group: Mapping[str, Any], ec2: Any) -> tuple[str, ...]:
    """What the group launches, in order of preference: a mixed-instances policy's overrides (the
    pool's type, then its fallbacks), else its launch template's type."""
    mixed = group.get("MixedInstancesPolicy", {}).get("LaunchTemplate", {})
    overrides = [item["InstanceType"] for item in mixed.get("Overrides", []) if item.get("InstanceType")]
    if overrides:
        return tuple(str(name) for name in overrides)
    template = group.get("LaunchTemplate") or mixed.get("LaunchTemplateSpecification")
    if template:
        selector = (
            {"LaunchTemplateId": template["LaunchTemplateId"]}
            if template.get("LaunchTemplateId")
            else {"LaunchTemplateName": template["LaunchTemplateName"]}
        )
        versions = ec2.describe_launch_template_versions(
            **selector, Versions=[str(template.get("Version") or "$Default")]
        )["LaunchTemplateVersions"]
        instance_type = versions[0]["LaunchTemplateData"].get("InstanceType") if versions else None
        if instance_type:
            return (str(instance_type),)
    raise ParkbrakeError(f"cannot tell which instance type group {group['AutoScalingGroupName']} launches")


def _dearest(instance_types: tuple[str, ...]) -> str:
    """The type whose hosts cost most an hour: what a start is admitted at, whichever the group picks."""
    prices = load_price_table()
    return max(instance_types, key=lambda name: prices.instance(name).usd_per_hour)


def launch(
    event: LaunchEvent,
    *,
    settings: Settings,
    clients: ClientFactory,
    gate: BudgetGate | None,
    now: datetime,
    dry_run: bool = False,
    honour_calendar: bool = True,
) -> LaunchDecision:
    """Decide, then (unless ``dry_run``, which only decides) raise the pool's desired capacity.

    ``honour_calendar=False`` is an operator's deliberate start on a closed day (``run-now --force``).
    """
    stack = settings.require_stack()
    region = settings.regions[0]
    pool, capacity = event.pool, event.capacity
    ssm = clients("ssm", region)
    parked = is_parked(ssm, stack)
    closed = closure(event, ssm, now) if honour_calendar else None
    autoscaling = clients("autoscaling", region)
    state = read_pool(autoscaling, clients("ec2", region), stack=stack, pool=pool, settings=settings)
    # The nightly capacity never exceeds what the group allows: MaxSize is the IaC's ceiling.
    target = state.max_size if capacity is None else min(capacity, state.max_size)
    usd_per_hour = load_price_table().instance(state.instance_type).usd_per_hour
    decision = decide_launch(
        state, parked=parked, target=target, usd_per_hour=usd_per_hour, gate=gate, now=now, closed=closed,
        organisation_parked=organisation_parked(ssm, region),
    )  # fmt: skip
    if decision.refusal is not None:
        log.warning("refused to start pool %s: %s: %s", pool, decision.refusal.kind, decision.refusal.reason)
        if not dry_run:
            heartbeat.count_action(heartbeat.LAUNCHER, "refuse", decision.refusal.kind)
        return decision
    if dry_run:
        return decision
    since = datetime.now(UTC)  # AWS stamps the group's activities with the real time
    try:
        autoscaling.set_desired_capacity(
            AutoScalingGroupName=state.group_name, DesiredCapacity=target, HonorCooldown=False
        )
    except Exception:
        # The hosts will not start: the money reserved for them goes back to the tenant.
        if gate is not None and decision.reservation_id is not None:
            gate.release(decision.reservation_id, now)
        raise
    checked = "budget checked" if decision.budget_checked else "budget not checked"
    log.info(
        "started pool %s: %s desired %d -> %d (%s)", pool, state.group_name, state.desired, target, checked
    )
    heartbeat.count_action(heartbeat.LAUNCHER, "start", "nightly", decision.start)
    got = await_report(autoscaling, state.group_name, wanted=target, since=since, wait_s=event.report_wait_s)
    log.info("pool %s got %s", pool, got.describe())
    if got.finding:
        log.error("pool %s is short of %d host(s): %s", pool, got.short, got.describe())
        heartbeat.count_action(heartbeat.LAUNCHER, "short", SHORT, got.short)
    return replace(decision, got=got)


def result_of(decision: LaunchDecision) -> dict[str, Any]:
    return {
        "pool": decision.pool,
        "target": decision.target,
        "started": decision.start,
        "refused": (
            {"kind": decision.refusal.kind, "reason": decision.refusal.reason} if decision.refusal else None
        ),
        "budget": "checked" if decision.budget_checked else "not checked",
        "required_usd": str(decision.required_usd.quantize(CENTS)),
        "reservation_id": decision.reservation_id,
        "instance_types": list(decision.instance_types),
        "priced_as": decision.priced_as,
        "got": decision.got.as_dict() if decision.got else None,
    }


# What a pool may be called (the stack's pool names are YAML keys; the group is parkbrake-<stack>-<pool>).
POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def parse_event(event: Mapping[str, Any]) -> LaunchEvent:
    """The nightly start's payload; ValueError naming the field for anything else."""
    if not isinstance(event, Mapping):
        raise ValueError(f'the launcher needs {{"pool": "<name>"}}, got {str(event)[:200]}')
    pool = event.get("pool")
    capacity = event.get("capacity")
    if not isinstance(pool, str) or POOL_NAME.fullmatch(pool) is None:
        shown = json.dumps(dict(event), default=str)[:200]
        raise ValueError(f'the launcher needs {{"pool": "<name>"}} (letters, digits, - _ .), got {shown}')
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
        raise ValueError(f"capacity must be a positive integer, not {capacity!r}")
    calendar = event.get("calendar")
    if calendar is not None and (not isinstance(calendar, str) or not calendar.startswith("/")):
        raise ValueError(f"calendar must name an SSM parameter (/parkbrake/<stack>/...), not {calendar!r}")
    timezone = event.get("timezone", "UTC")
    if zone_problem(timezone) is not None:
        raise ValueError(
            f"timezone must be an IANA time zone such as Europe/Berlin, not {timezone!r}"
        ) from None
    wait = event.get("report_wait_s", DEFAULT_REPORT_WAIT_S)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= MAX_REPORT_WAIT_S:
        raise ValueError(f"report_wait_s must be seconds from 0 to {MAX_REPORT_WAIT_S}, not {wait!r}")
    return LaunchEvent(
        pool, capacity, calendar, timezone, _scheduled_time(event.get("scheduled_time")), float(wait)
    )


def _scheduled_time(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return as_utc(value)
        except ValueError:
            pass
    raise ValueError(
        f"scheduled_time must be an ISO-8601 UTC time (Scheduler's <aws.scheduler.scheduled-time>), not {value!r}"
    )


def start_pool(
    event: LaunchEvent,
    *,
    settings: Settings,
    clients: ClientFactory,
    gate: BudgetGate | None,
    now: datetime,
    decisions: DecisionLog,
) -> dict[str, Any]:
    """The launcher Lambda's run: start the pool, publish a shortfall, and record the start or the
    refusal in ``decisions``; the heartbeat once everything was recorded."""
    decision = launch(event, settings=settings, clients=clients, gate=gate, now=now)
    errors = short_notice(decision, settings=settings, clients=clients)
    errors += decisions.record([launch_decision(decision, actor=heartbeat.LAUNCHER, now=now)])
    if not errors:
        heartbeat.record_success(
            heartbeat.LAUNCHER, stack=settings.stack, cloudwatch=clients("cloudwatch", None), now=now
        )
    return result_of(decision) | ({"errors": errors} if errors else {})


def short_notice(
    decision: LaunchDecision, *, settings: Settings, clients: ClientFactory
) -> list[dict[str, str]]:
    """A pool left short for want of capacity, published to the alarm topic; the errors."""
    got = decision.got
    if got is None or not got.finding:
        return []
    subject = f"parkbrake: pool {decision.pool} short of {got.short} host(s): insufficient capacity"
    body = (
        f"The nightly start of pool {decision.pool} (tenant {decision.tenant or 'none'}) asked for "
        f"{got.wanted} host(s) of {', '.join(decision.instance_types)}; it got {got.describe()}. "
        "EC2 had no capacity for the types and zones above; the group keeps trying. Add fallback types "
        "or subnets in other zones to the pool, or start it later with `parkbrake schedule run-now`."
    )
    if settings.sns_topic_arn is None:  # the error log line and the counted action still show it
        return []
    try:
        notices.publish(settings.sns_topic_arn, subject, body, [], clients=clients)
    except AWS_ERRORS as error:
        log.error("could not publish %r: %s", subject, describe_error(error))
        return [{"action": "notify", "error": describe_error(error)}]
    return []


def budget_gate(invoked_function_arn: str | None = None) -> BudgetGate | None:
    """The ledger's gate when a ledger database is configured; None means "budget not checked". Its
    admissions re-arm the tenant's budget crossing check (the budget Lambda is found beside this one).

    Imported here, not at the top: psycopg is only needed (and only packaged in a layer) when the
    stack has a ledger, and the launcher must run without one.
    """
    if not ledger_configured():
        return None
    from lambdas.engines.budgeting import gate_from_environment

    return gate_from_environment(container_settings(), invoked_function_arn=invoked_function_arn)
