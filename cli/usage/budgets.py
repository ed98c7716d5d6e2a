"""``parkbrake ledger budget`` and ``runway``'s engines: a budget from the flags, every tenant's
runway, and the runway table."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from guardrails.errors import InputError

if TYPE_CHECKING:
    from guardrails.runway import Budget, Period, TenantRunway
    from guardrails.settings import Settings
    from lambdas.ledger.store import LedgerStore


def metering_settings(environ: Mapping[str, str]) -> Settings:
    """The caps the meter resolves (``PARKBRAKE_DEFAULT_MAX_RUNTIME``, ``PARKBRAKE_POOL_MAX_RUNTIMES``).

    The events name their own regions, so the guarded-region list is not needed here.
    """
    from guardrails.settings import REGIONS, settings_from_environment

    return settings_from_environment({REGIONS: "any", **environ})


def tenant_runways(
    *, now: datetime, environ: Mapping[str, str] | None = None, tenants: Sequence[str] | None = None
) -> list[TenantRunway]:
    """Per tenant: spent this period, committed, remaining, burn rate and runway (for ``parkbrake status``)."""
    from lambdas.ledger.store import store_from_environment

    environ = os.environ if environ is None else environ
    store = store_from_environment(environ)
    try:
        default_cap = metering_settings(environ).default_max_runtime
        return store.runways(now=now, default_cap=default_cap, tenants=tenants)
    finally:
        store.close()


def print_runways(statuses: Sequence[TenantRunway]) -> None:
    from cli.console import console
    from cli.table import Column, Table, print_table
    from guardrails.durations import format_duration

    table = Table(
        "Budgets and runway",
        [
            Column("tenant", 0),
            Column("budget", 2, justify="right"),
            Column("spent", 3, justify="right"),
            Column("committed", 4, justify="right"),
            Column("remaining", 0, justify="right"),
            Column("burn /h", 1, justify="right"),
            Column("runway", 0, justify="right"),
            Column("GPUs", 5, justify="right"),
            Column("GPU-h used / left", 4, justify="right"),
            Column("set by", 3),
        ],
    )
    for status in statuses:
        limit, remaining, runway_left = status.budget.limit_usd, status.remaining_usd, status.runway
        table.add_row(
            status.tenant,
            "-" if limit is None else f"{limit:,.2f} /{status.budget.period}{zone_note(status.budget)}",
            f"{status.spent_usd:,.2f}",
            f"{status.committed_usd:,.2f}",
            "-" if remaining is None else f"{remaining:,.2f}",
            f"{status.totals.burn_usd_per_hour:,.2f}",
            "∞" if runway_left is None else format_duration(runway_left),
            str(status.totals.running_accelerators),
            gpu_hours_cell(status),
            "-" if limit is None else status.budget.source,
        )
    print_table(console(), table)


def gpu_hours_cell(status: TenantRunway) -> str:
    """``12.5 / 387.5 of 400`` (used, left, limit) for a budget with a GPU-hour limit, else ``-``."""
    remaining = status.gpu_hours_remaining
    if remaining is None:
        return "-"
    return f"{status.gpu_hours_used:,.1f} / {remaining:,.1f} of {status.budget.gpu_hours:,}"


def zone_note(budget: Budget) -> str:
    """`` (Europe/Berlin)`` for a budget outside UTC, for the runway table."""
    return "" if budget.timezone == "UTC" else f" ({budget.timezone})"


# What the ledger stores a limit as: NUMERIC(14, 2) (lambdas/ledger/migrations/0001_ledger.sql).
CENT = Decimal("0.01")
LARGEST_LIMIT = Decimal("999999999999.99")


def parse_budget(
    tenant: str, *, limit_usd: str | None, period: str | None, soft: str | None, actions: str | None,
    timezone: str | None = "UTC", gpu_hours: str | None = None,
) -> Budget:  # fmt: skip
    """A Budget from the flags; every problem is reported at once."""
    from guardrails.runway import ACTIONS, PERIODS, Budget
    from guardrails.time_zones import time_zone

    period, soft, actions, timezone = period or "month", soft or "", actions or "", timezone or "UTC"
    problems: list[str] = []
    hours = None if gpu_hours is None else _gpu_hours(gpu_hours, problems)
    limit = Decimal(0)
    try:
        if limit_usd is None:
            problems.append("--limit-usd: required (the hard limit for each period, e.g. --limit-usd 5000)")
        else:
            limit = Decimal(limit_usd)
            if not limit.is_finite() or limit <= 0:
                problems.append(f"--limit-usd: {limit_usd!r} must be a positive amount")
            elif limit != limit.quantize(CENT):
                problems.append(
                    f"--limit-usd: {limit_usd!r} has more than 2 decimals; the ledger keeps whole cents"
                )
            elif limit > LARGEST_LIMIT:
                problems.append(
                    f"--limit-usd: {limit_usd!r} is above the largest the ledger stores ({LARGEST_LIMIT})"
                )
    except InvalidOperation:
        problems.append(f"--limit-usd: {limit_usd!r} is not a number")
    try:
        time_zone(timezone, "--timezone")
    except InputError as error:
        problems.append(str(error))
    thresholds = []
    for part in filter(None, (piece.strip().rstrip("%") for piece in soft.split(","))):
        try:
            value = Decimal(part)
        except InvalidOperation:
            value = Decimal(-1)
        if not 0 < value < 100:
            problems.append(f"--soft: {part!r} is not a percentage between 0 and 100")
        else:
            thresholds.append(value / 100)
    chosen = {piece.strip() for piece in actions.split(",") if piece.strip()}
    for unknown in sorted(chosen - set(ACTIONS)):
        problems.append(f"--actions: {unknown!r} is not one of {', '.join(ACTIONS)}")
    if period not in PERIODS:
        problems.append(f"--period: {period!r} is not one of {', '.join(PERIODS)}")
    if problems:
        raise InputError("invalid budget:\n  " + "\n  ".join(problems))
    return Budget(
        tenant,
        limit,
        cast("Period", period),
        tuple(sorted(set(thresholds))),
        frozenset(action for action in ACTIONS if action in chosen),
        timezone,
        hours,
    )


def _gpu_hours(text: str, problems: list[str]) -> Decimal | None:
    """``--gpu-hours``: a positive number of accelerator-hours, to the hundredth (the ledger's NUMERIC(14, 2))."""
    try:
        hours = Decimal(text)
    except InvalidOperation:
        problems.append(f"--gpu-hours: {text!r} is not a number (accelerator-hours per period, e.g. 400)")
        return None
    if not hours.is_finite() or hours <= 0 or hours > LARGEST_LIMIT or hours != hours.quantize(CENT):
        problems.append(f"--gpu-hours: {text!r} must be a positive number of hours with at most 2 decimals")
        return None
    return hours


def budget_summary(budget: Budget) -> tuple[dict[str, Any], str]:
    """The budget as JSON and as one line."""
    actions = sorted(budget.actions)
    summary = {
        "tenant": budget.tenant,
        "period": budget.period,
        "timezone": budget.timezone,
        "limit_usd": None
        if budget.limit_usd is None
        else f"{budget.limit_usd:.2f}",  # as the ledger keeps it
        "soft_thresholds": [float(threshold) for threshold in budget.soft_thresholds],
        "actions": actions,
        "gpu_hours": None if budget.gpu_hours is None else str(budget.gpu_hours),
        "source": budget.source,
    }
    percentages = ", ".join(f"{threshold:.0%}" for threshold in budget.soft_thresholds)
    hours = "" if budget.gpu_hours is None else f" and {budget.gpu_hours:,} GPU-hours"
    line = (
        f"{budget.tenant}: {budget.limit_usd:,.2f} USD{hours} per {budget.period} ({budget.timezone}), "
        f"notify at {percentages or 'the limit only'}, actions: {', '.join(actions) or 'none'}"
    )
    return summary, line


def budgets_from_stack(
    stack: str, tenant: str | None, *, project_dir: Path, replace_hand: bool, dry_run: bool, output: str
) -> None:
    """``ledger budget --from-stack``: apply (or with ``dry_run`` show) the budgets ``stack`` declares,
    every tenant's or ``tenant``'s, as the caller; a conflict exits 1 after printing every outcome."""
    import json

    import click

    from cli.usage.closes import caller_actor
    from guardrails.stack_budgets import budgets_of_config
    from lambdas.aws.environment import default_clients
    from lambdas.ledger.stack_budgets import apply_stack_budgets
    from lambdas.ledger.store import store_from_environment
    from stacks.config import load_stack_config

    declared = budgets_of_config(load_stack_config(stack, project_dir).tenants)
    if tenant is not None:
        declared = [budget for budget in declared if budget.tenant == tenant]
        if not declared:
            raise InputError(
                f"TENANT: stack {stack!r} declares no budget for {tenant!r}; drop TENANT or fix its name"
            )
    store = store_from_environment()
    try:
        actor = "dry run" if dry_run else caller_actor(default_clients)
        outcomes = apply_stack_budgets(
            store,
            stack,
            declared,
            now=datetime.now(UTC),
            actor=actor,
            replace_hand=replace_hand,
            dry_run=dry_run,
        )
    finally:
        store.close()
    if output == "json":
        click.echo(
            json.dumps({"dry_run": dry_run, "budgets": [outcome.as_dict() for outcome in outcomes]}, indent=2)
        )
    else:
        prefix = "would be: " if dry_run else ""
        click.echo("\n".join(prefix + outcome.line() for outcome in outcomes))
    if any(outcome.outcome == "conflict" for outcome in outcomes):
        raise SystemExit(1)


def rearm_after_change(
    store: LedgerStore, tenant: str, *, stack: str | None, region: str | None, environ: Mapping[str, str]
) -> dict[str, Any]:
    """After ``tenant``'s budget changed or an admission: arm its budget crossing check (the stack's
    budget Lambda and Scheduler role, named as the Guardrails component names them in the caller's
    account), move it, or remove it when nothing would cross. Without a stack nothing is armed: the
    one-minute rule checks."""
    from lambdas.clients import client
    from lambdas.engines.budgeting import AwsEnforcer, crossing_target_of_caller, rearm_crossing

    if not stack:
        return {"tenant": tenant, "crossing": "not armed", "reason": "no --stack (or PARKBRAKE_STACK)"}
    sts = client("sts", region)
    where = region or sts.meta.region_name
    target = crossing_target_of_caller(stack, caller_arn=str(sts.get_caller_identity()["Arn"]), region=where)
    enforcer = AwsEnforcer(
        clients=client, regions=[where], topic_arn=None, spot_action="terminate", crossing=target
    )  # it only arms: the budget Lambda acts at the crossing
    now = datetime.now(UTC)
    default_cap = metering_settings(environ).default_max_runtime
    armed = rearm_crossing(store, enforcer, tenant=tenant, now=now, default_cap=default_cap)
    if armed is None:
        return {"tenant": tenant, "crossing": "removed", "reason": "nothing would reach a limit that stops"}
    return {"tenant": tenant, "crossing": "armed", "at": armed.isoformat()}


def crossing_line(outcome: Mapping[str, Any]) -> str:
    """What :func:`rearm_after_change` did, for people."""
    if outcome["crossing"] == "armed":
        return f"budget crossing check armed at {outcome['at']}"
    return f"budget crossing check {outcome['crossing']}: {outcome['reason']}"


def rearm_or_report(
    store: LedgerStore, tenant: str, *, stack: str | None, region: str | None
) -> dict[str, Any]:
    """:func:`rearm_after_change` for an admission: a failure to arm is reported on stderr, never a
    refusal (exit 1 means refused); the budget's one-minute rule still checks."""
    import click

    try:
        return rearm_after_change(store, tenant, stack=stack, region=region, environ=os.environ)
    except Exception as error:
        click.echo(f"warning: re-arming the budget crossing check of {tenant} failed: {error}", err=True)
        return {"tenant": tenant, "crossing": "failed", "reason": str(error)}
