"""A stack's EventBridge Scheduler schedules as the CLI sees them: list, pause/resume, next run.

Used by ``parkbrake schedule``, by ``park --now`` (which disables the nightly starts, never the
reaper) and by ``parkbrake status`` (the next scheduled start).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo

from croniter import croniter

from guardrails import names
from guardrails.closed_days import ClosedDays, next_open
from guardrails.errors import InputError
from guardrails.schedules import eventbridge_cron_to_five_fields
from guardrails.time_zones import zone_problem

if TYPE_CHECKING:
    from guardrails.launch import BudgetGate, LaunchDecision
    from lambdas.aws.environment import ClientFactory
    from lambdas.engines.launching import LaunchEvent

ScheduleKind = Literal["nightly", "reaper", "other"]
ScheduleState = Literal["ENABLED", "DISABLED"]
# Every field UpdateSchedule takes: it replaces the whole definition, so each one is carried over.
UPDATABLE_FIELDS = (
    "ScheduleExpression",
    "ScheduleExpressionTimezone",
    "FlexibleTimeWindow",
    "Target",
    "Description",
    "StartDate",
    "EndDate",
    "KmsKeyArn",
    "ActionAfterCompletion",
)


@dataclass(frozen=True)
class Schedule:
    name: str
    group: str
    kind: ScheduleKind
    state: str
    expression: str
    timezone: str
    payload: Mapping[str, Any] | None  # the target's Input, parsed; None when absent or not JSON
    definition: Mapping[str, Any]  # GetSchedule's answer, for UpdateSchedule

    @property
    def enabled(self) -> bool:
        return self.state == "ENABLED"

    @property
    def pool(self) -> str | None:
        pool = (self.payload or {}).get("pool")
        return pool if isinstance(pool, str) else None

    def next_run(self, now: datetime) -> datetime | None:
        """When it fires next (UTC), or None: disabled or ended. A ``rate()`` counts from its start date
        (else its creation), as Scheduler does."""
        if not self.enabled:
            return None
        start = self.definition.get("StartDate") or self.definition.get("CreationDate")
        anchor = start if isinstance(start, datetime) else None
        moment = next_occurrence(self.expression, self.timezone, now, anchor=anchor)
        end = self.definition.get("EndDate")
        if moment is not None and isinstance(end, datetime) and moment > end:
            return None
        return moment

    @property
    def calendar(self) -> str | None:
        """The SSM parameter of the closed days a nightly start honours (None: no calendar)."""
        calendar = (self.payload or {}).get("calendar")
        return calendar if self.kind == "nightly" and isinstance(calendar, str) else None

    def next_open_run(
        self, now: datetime, closed: ClosedDays | None
    ) -> tuple[datetime | None, list[tuple[date, str]]]:
        """The next firing on an open day, and the closed days skipped before it (the launcher
        refuses on those, so the pool does not start)."""
        if closed is None:
            return self.next_run(now), []
        zone = ZoneInfo(self.timezone)
        return next_open(self.next_run, now, lambda moment: moment.astimezone(zone).date(), closed)

    def as_dict(self, now: datetime, closed: ClosedDays | None = None) -> dict[str, Any]:
        upcoming, skipped = self.next_open_run(now, closed)
        return {
            "name": self.name,
            "group": self.group,
            "kind": self.kind,
            "state": self.state,
            "expression": self.expression,
            "timezone": self.timezone,
            "pool": self.pool,
            "payload": self.payload,
            "calendar": self.calendar,
            "next_run": upcoming.isoformat() if upcoming else None,
            "skipped_closed_days": [{"day": day.isoformat(), "reason": reason} for day, reason in skipped],
        }


def closed_days_of(schedules: list[Schedule], ssm: Any) -> dict[str, ClosedDays]:
    """Each calendar the nightly starts name, read once, by SSM parameter name."""
    parameters = {schedule.calendar for schedule in schedules if schedule.calendar is not None}
    if not parameters:  # most stacks: the launcher's module (and its imports) is not needed
        return {}
    from lambdas.engines.launching import read_closed_days

    return {parameter: read_closed_days(ssm, parameter) for parameter in sorted(parameters)}


def kind_of(stack: str, name: str, payload: Mapping[str, Any] | None) -> ScheduleKind:
    """A nightly start is the schedule named for the pool its payload starts; the reaper has its own name."""
    if name == names.reaper_schedule(stack):
        return "reaper"
    pool = (payload or {}).get("pool")
    if isinstance(pool, str) and name == names.nightly_schedule(stack, pool):
        return "nightly"
    return "other"


RATE = re.compile(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)")
RATE_UNITS = {"minute": 60, "hour": 3600, "day": 86400}


def next_occurrence(
    expression: str, timezone: str, now: datetime, *, anchor: datetime | None = None
) -> datetime | None:
    """The next firing of a Scheduler expression after ``now``: ``cron(...)`` in its zone, ``at(...)``,
    or ``rate(...)`` counted in whole periods from ``anchor`` (None without one)."""
    rate = RATE.fullmatch(expression)
    if rate:
        if anchor is None:
            return None
        period = int(rate[1]) * RATE_UNITS[rate[2].rstrip("s")]
        if period <= 0:
            return None
        elapsed = (now - anchor).total_seconds()
        periods = max(0, int(elapsed // period) + 1)
        return (anchor + timedelta(seconds=periods * period)).astimezone(UTC)
    if zone_problem(timezone or "UTC") is not None:
        return None
    zone = ZoneInfo(timezone or "UTC")
    if expression.startswith("cron("):
        five_fields = eventbridge_cron_to_five_fields(expression)
        if not croniter.is_valid(five_fields):
            return None
        upcoming: datetime = croniter(five_fields, now.astimezone(zone)).get_next(datetime)
        return upcoming.astimezone(UTC)
    if expression.startswith("at("):
        try:
            moment = datetime.fromisoformat(expression[3:-1]).replace(tzinfo=zone).astimezone(UTC)
        except ValueError:
            return None
        return moment if moment > now else None
    return None


def _payload(definition: Mapping[str, Any]) -> Mapping[str, Any] | None:
    try:
        payload = json.loads(definition.get("Target", {}).get("Input") or "null")
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def schedule_from_definition(stack: str, definition: Mapping[str, Any]) -> Schedule:
    payload = _payload(definition)
    return Schedule(
        name=definition["Name"],
        group=definition.get("GroupName") or "default",
        kind=kind_of(stack, definition["Name"], payload),
        state=definition.get("State", "ENABLED"),
        expression=definition.get("ScheduleExpression", ""),
        timezone=definition.get("ScheduleExpressionTimezone") or "UTC",
        payload=payload,
        definition={key: value for key, value in definition.items() if key != "ResponseMetadata"},
    )


def list_schedules(scheduler: Any, stack: str) -> list[Schedule]:
    """Every schedule in the stack's group, with its full definition, by name; none when the group is absent."""
    group = names.schedule_group(stack)
    try:
        summaries = [
            summary
            for page in scheduler.get_paginator("list_schedules").paginate(GroupName=group)
            for summary in page["Schedules"]
            if summary.get("GroupName") == group
        ]
    except scheduler.exceptions.ResourceNotFoundException:
        return []
    return sorted(
        (get_schedule(scheduler, stack, summary["Name"]) for summary in summaries),
        key=lambda schedule: schedule.name,
    )


def schedule_group_exists(scheduler: Any, stack: str) -> bool:
    try:
        scheduler.get_schedule_group(Name=names.schedule_group(stack))
    except scheduler.exceptions.ResourceNotFoundException:
        return False
    return True


def get_schedule(scheduler: Any, stack: str, name: str) -> Schedule:
    group = names.schedule_group(stack)
    try:
        definition = scheduler.get_schedule(GroupName=group, Name=name)
    except scheduler.exceptions.ResourceNotFoundException:
        raise InputError(
            f"no schedule {name!r} in group {group}; `parkbrake schedule list --stack {stack}` shows them"
        ) from None
    return schedule_from_definition(stack, definition)


def set_state(scheduler: Any, schedule: Schedule, state: ScheduleState) -> bool:
    """Enable or disable ``schedule``, keeping every other field; False when it already was."""
    if schedule.state == state:
        return False
    fields = {
        key: schedule.definition[key] for key in UPDATABLE_FIELDS if schedule.definition.get(key) is not None
    }
    scheduler.update_schedule(Name=schedule.name, GroupName=schedule.group, State=state, **fields)
    return True


@dataclass(frozen=True)
class StateChange:
    schedule: str
    before: str
    after: str
    changed: bool
    dry_run: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule,
            "before": self.before,
            "after": self.after,
            "changed": self.changed,
            "dry_run": self.dry_run,
        }


def change_state(
    scheduler: Any, stack: str, name: str, state: ScheduleState, *, dry_run: bool
) -> StateChange:
    """Pause (DISABLED) or resume (ENABLED) one schedule of the stack; the reaper is never paused."""
    schedule = get_schedule(scheduler, stack, name)
    if state == "DISABLED" and schedule.kind == "reaper":
        raise InputError(
            f"{name} is the reaper's sweep, a guardrail, and guardrails are never paused; "
            "to stop the nightly starts, pause those or `parkbrake park`"
        )
    changed = schedule.state != state
    if changed and not dry_run:
        set_state(scheduler, schedule, state)
    return StateChange(name, schedule.state, state, changed, dry_run)


def launcher_payload(schedule: Schedule) -> LaunchEvent:
    """What a nightly start asks the launcher for; only nightly starts can run now."""
    from lambdas.engines.launching import parse_event

    if schedule.kind != "nightly" or schedule.payload is None:
        hint = "; run the sweep with `parkbrake reap`" if schedule.kind == "reaper" else ""
        raise InputError(f"{schedule.name} is not a nightly start (its payload is not the launcher's){hint}")
    # Scheduler fills in the time a start was due; run now, it is now (set by the caller).
    payload = {key: value for key, value in schedule.payload.items() if key != "scheduled_time"}
    try:
        return parse_event(payload)
    except ValueError as error:
        raise InputError(f"{schedule.name}: {error}") from None


@dataclass(frozen=True)
class RunNow:
    schedule: str
    payload: Mapping[str, Any]
    decision: LaunchDecision  # in a dry run, what the launcher would decide (it changed nothing)
    dry_run: bool
    errors: tuple[dict[str, str], ...] = ()  # the decision could not be recorded (the start stands)

    @property
    def refused(self) -> bool:
        return self.decision.refusal is not None

    def as_dict(self) -> dict[str, Any]:
        from lambdas.engines.launching import result_of

        return {
            "schedule": self.schedule,
            "payload": dict(self.payload),
            "dry_run": self.dry_run,
            **result_of(self.decision),
        } | ({"errors": list(self.errors)} if self.errors else {})


def run_now(
    scheduler: Any,
    stack: str,
    name: str,
    *,
    region: str,
    clients: ClientFactory,
    environ: Mapping[str, str],
    gate: BudgetGate | None,
    now: datetime,
    dry_run: bool,
    force: bool = False,
) -> RunNow:
    """Run the launcher in-process with the schedule's own payload: the same refusals (parked, closed
    day, at capacity, runway through ``gate``) as when Scheduler invokes it, without waiting for the
    next firing. Today counts for the calendar; ``force`` starts on a closed day (never when parked)."""
    from dataclasses import replace

    from cli.oncall.in_process import lambda_quiet
    from guardrails.settings import REGIONS, STACK, settings_from_environment
    from lambdas.engines import launching

    schedule = get_schedule(scheduler, stack, name)
    event = replace(launcher_payload(schedule), scheduled_time=now)
    payload = schedule.payload or {}
    settings = settings_from_environment({**environ, STACK: stack, REGIONS: region})
    with lambda_quiet(launching.__name__):
        decision = launching.launch(
            event,
            settings=settings,
            clients=clients,
            gate=gate,
            now=now,
            dry_run=dry_run,
            honour_calendar=not force,
        )
    if dry_run:
        return RunNow(name, payload, decision, dry_run)
    errors = record_run_now(decision, name=name, environ=environ, clients=clients, now=now)
    return RunNow(name, payload, decision, dry_run, tuple(errors))


def record_run_now(
    decision: LaunchDecision, *, name: str, environ: Mapping[str, str], clients: ClientFactory, now: datetime
) -> list[dict[str, str]]:
    """A start (or refusal) run by a person: the same ``launch-*`` decision the launcher records, with
    the person's ARN as its actor, appended to the decision log when a ledger database is configured.
    Returns the errors (the start stands)."""
    import uuid

    from guardrails.decisions import launch_decision
    from guardrails.settings import ledger_configured
    from lambdas.aws.decision_log import RECORD_ERROR, DecisionLog
    from lambdas.aws.errors import AWS_ERRORS, describe_error
    from lambdas.ledger.decisions import EnvironmentLedger

    errors = []
    try:
        actor = str(clients("sts", None).get_caller_identity()["Arn"])
    except AWS_ERRORS as error:
        actor = f"an unknown caller of parkbrake schedule run-now {name}"
        errors.append({"action": RECORD_ERROR, "error": f"who ran it: {describe_error(error)}"})
    decisions = DecisionLog(
        guardrail="run-now",
        origin=f"run-now-{uuid.uuid4()}",
        ledger=(lambda: EnvironmentLedger(environ)) if ledger_configured(environ) else None,
    )
    return errors + decisions.record([launch_decision(decision, actor=actor, now=now)])
