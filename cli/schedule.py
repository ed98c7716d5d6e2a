"""``parkbrake schedule``: the stack's EventBridge Scheduler schedules — list, pause, resume, run now."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from cli.options import (
    confirm_or_abort,
    dry_run_option,
    organisation_options,
    output_option,
    stack_option,
    wide_option,
    yes_option,
)
from guardrails.plurals import counted

if TYPE_CHECKING:
    from cli.oncall.organisation import OrganisationScope

region_option = click.option(
    "--region", help="The stack's region [default: aws:region of Pulumi.<stack>.yaml here, else AWS_REGION]."
)


def _scheduler(stack: str, region: str | None) -> tuple[Any, str]:
    from cli.oncall.park.switch import stack_region
    from lambdas.clients import client

    chosen = stack_region(stack, Path("."), region)
    return client("scheduler", chosen), chosen


@click.group()
def schedule() -> None:
    """The stack's nightly schedules (EventBridge Scheduler group parkbrake-<stack>).

    The group also holds the reaper's sweep, which is a guardrail: it is listed, never paused.
    """


@schedule.command("list")
@stack_option
@region_option
@output_option
@wide_option
@organisation_options
def list_command(stack: str, region: str | None, output: str, *, scope: OrganisationScope) -> None:
    """Every schedule of the stack: kind, state, expression, next run, payload.

    A nightly start with a calendar of closed days shows its next run on an open day, and the
    closed days it skips before it (the launcher refuses to start on those).

    With --accounts FILE or --org: the stack's schedules in every account and region (each
    account's regions, else --region's), the account beside each; an account whose role is denied
    is one line last (exit 1).

    \b
    Example:
      parkbrake schedule list --stack dev
    """
    if scope.spans_accounts:
        _list_across(scope, stack, region, output)
    else:
        _list_one(stack, region, output)


def _list_one(stack: str, region: str | None, output: str) -> None:
    """The stack's schedules in its one region, as a table or JSON."""
    from cli.oncall.nightly.schedules import closed_days_of, list_schedules, schedule_group_exists
    from cli.oncall.stack_inventory import unknown_stack
    from guardrails import names
    from lambdas.clients import client

    scheduler, chosen = _scheduler(stack, region)
    schedules = list_schedules(scheduler, stack)
    if not schedules and not schedule_group_exists(scheduler, stack):
        problem = f"stack {stack!r} has no schedule group {names.schedule_group(stack)} in {chosen}"
        raise unknown_stack(problem, stack, [chosen], lambda region: client("ssm", region))
    calendars = closed_days_of(schedules, client("ssm", chosen))
    now = datetime.now(UTC)

    if output == "json":
        document = {
            "stack": stack,
            "region": chosen,
            "group": names.schedule_group(stack),
            "schedules": [item.as_dict(now, calendars.get(item.calendar or "")) for item in schedules],
        }
        click.echo(json.dumps(document, indent=2))
        return
    from cli.console import console as make_console
    from cli.table import Column, Table, print_table

    table = Table(
        f"Schedules of stack {stack} ({names.schedule_group(stack)}, {chosen})",
        [
            Column("name", 0),
            Column("next run UTC", 0),
            Column("state", 1),
            Column("kind", 2),
            Column("expression", 3, detail=True),
            Column("timezone", 4),
            Column("payload", 5, detail=True),
        ],
    )
    skipped_days: list[str] = []
    for item in schedules:
        upcoming, skipped = item.next_open_run(now, calendars.get(item.calendar or ""))
        table.add_row(
            item.name,
            f"{upcoming:%Y-%m-%d %H:%M}" if upcoming else "-",
            item.state,
            item.kind,
            item.expression,
            item.timezone,
            json.dumps(item.payload),
        )
        skipped_days += [f"{item.name} skips {day.isoformat()} (closed: {reason})" for day, reason in skipped]
    print_table(make_console(), table)
    for line in skipped_days:
        click.echo(line)
    if not schedules:
        click.echo(f"No schedules in group {names.schedule_group(stack)} in {chosen}.")


def _list_across(scope: OrganisationScope, stack: str, region: str | None, output: str) -> None:
    """Every account's and region's schedules of the stack: one table, then the failure lines."""
    from cli.console import console as make_console
    from cli.oncall.nightly.across import organisation_schedules
    from cli.oncall.organisation import echo_failures, organisation_run
    from cli.oncall.park.switch import stack_region
    from cli.table import Column, Table, print_table
    from guardrails import names
    from lambdas.clients import one_session_clients

    run = organisation_run(scope, [stack_region(stack, Path("."), region)], one_session_clients())
    found, now = organisation_schedules(run, stack), datetime.now(UTC)
    if output == "json":
        click.echo(
            json.dumps({"stack": stack, "group": names.schedule_group(stack), **found.as_dict(now)}, indent=2)
        )
    else:
        rows = found.as_dict(now)["schedules"]
        table = Table(
            f"Schedules of stack {stack} ({names.schedule_group(stack)}) in {counted(found.accounts, 'account')}",
            [Column("name", 0), Column("account", 0), Column("next run UTC", 0), Column("state", 1),
             Column("kind", 2), Column("region", 3), Column("expression", 4, detail=True)],
        )  # fmt: skip
        for row in rows:
            upcoming = row["next_run"][:16].replace("T", " ") if row.get("next_run") else "-"
            table.add_row(row["name"], row["account"], upcoming, row["state"], row["kind"], row["region"],
                          row["expression"])  # fmt: skip
        print_table(make_console(), table)
        if not rows:
            click.echo(f"No schedules in group {names.schedule_group(stack)} in any account.")
        echo_failures(found.errors)
    if found.errors:
        sys.exit(1)


@schedule.command()
@click.argument("name")
@stack_option
@region_option
@dry_run_option
@yes_option
@output_option
def pause(**options: Any) -> None:
    """Disable schedule NAME, keeping every other field of it (the reaper's sweep is refused).

    \b
    Example:
      parkbrake schedule pause parkbrake-dev-nightly-training --stack dev
    """
    _change_state("DISABLED", **options)


@schedule.command()
@click.argument("name")
@stack_option
@region_option
@dry_run_option
@yes_option
@output_option
def resume(**options: Any) -> None:
    """Enable schedule NAME again, keeping every other field of it.

    \b
    Example:
      parkbrake schedule resume parkbrake-dev-nightly-training --stack dev
    """
    _change_state("ENABLED", **options)


def _change_state(
    state: Literal["ENABLED", "DISABLED"],
    *,
    name: str,
    stack: str,
    region: str | None,
    dry_run: bool,
    yes: bool,
    output: str,
) -> None:
    from cli.oncall.nightly.schedules import change_state

    scheduler, chosen = _scheduler(stack, region)
    if not dry_run:
        verb = "pause" if state == "DISABLED" else "resume"
        confirm_or_abort(f"{verb.capitalize()} schedule {name} of stack {stack} in {chosen}?", assume_yes=yes)
    change = change_state(scheduler, stack, name, state, dry_run=dry_run)
    if output == "json":
        click.echo(json.dumps(change.as_dict(), indent=2))
    elif not change.changed:
        click.echo(f"{name} is already {change.after}; nothing to change.")
    else:
        prefix = "Would change" if dry_run else "Changed"
        click.echo(f"{prefix} {name}: {change.before} → {change.after} (every other field kept).")


@schedule.command("run-now")
@click.argument("name")
@stack_option
@region_option
@dry_run_option
@yes_option
@output_option
@click.option(
    "--force",
    is_flag=True,
    help="Start even though today is a closed day in the stack's calendar (never when parked).",
)
def run_now_command(
    *, name: str, stack: str, region: str | None, dry_run: bool, yes: bool, output: str, force: bool
) -> None:
    """Run nightly start NAME now: the launcher, in-process, with the schedule's own payload.

    It obeys the launcher's refusals — the stack is parked, today is a closed day in the stack's
    calendar (unless --force), the pool is already at that capacity, the tenant's runway cannot pay
    for the hosts' caps — and exits 1 when it refuses.

    \b
    Example:
      parkbrake schedule run-now parkbrake-dev-nightly-training --stack dev \\
          --dry-run
    """
    from cli.oncall.nightly.schedules import run_now
    from lambdas.clients import client
    from lambdas.engines.launching import budget_gate

    scheduler, chosen = _scheduler(stack, region)
    if not dry_run:
        confirm_or_abort(f"Start the pool of {name} (stack {stack}, {chosen}) now?", assume_yes=yes)
    result = run_now(
        scheduler,
        stack,
        name,
        region=chosen,
        clients=client,
        environ=os.environ,
        gate=budget_gate(),
        now=datetime.now(UTC),
        dry_run=dry_run,
        force=force,
    )
    decision = result.decision
    if output == "json":
        click.echo(json.dumps(result.as_dict(), indent=2))
    elif decision.refusal is not None:
        refusal = decision.refusal
        prefix = "Would be refused" if dry_run else "Refused"
        click.echo(f"{prefix} ({refusal.kind}): {refusal.reason}", err=True)
        if refusal.kind == "closed":
            click.echo("To start it anyway, run again with --force.", err=True)
    else:
        budget = "budget checked" if decision.budget_checked else "budget not checked (no ledger gate)"
        verb = "Would start" if dry_run else "Started"
        click.echo(
            f"{verb} {counted(decision.start, 'host')} in pool {decision.pool}: desired → {decision.target} ({budget})."
        )
        if decision.got is not None:
            click.echo(f"Got {decision.got.describe()}.")
    for error in result.errors:
        click.echo(f"Could not record the decision ({error['action']}): {error['error']}", err=True)
    if result.refused or result.errors:
        sys.exit(1)
