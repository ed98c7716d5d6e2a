"""``parkbrake reap``: run the sweep now, with the Lambda's settings and rules."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from cli.options import confirm_or_abort, dry_run_option, output_option, stack_option, yes_option
from guardrails.errors import ParkbrakeError
from guardrails.settings import STACK, settings_from_environment

if TYPE_CHECKING:
    from lambdas.aws.environment import ClientFactory
    from lambdas.reaper import SweepPlan, SweepReport


@click.command()
@stack_option
@dry_run_option
@yes_option
@output_option
def reap(stack: str, dry_run: bool, yes: bool, output: str) -> None:
    """Run the sweep now: stop every running managed GPU host past its deadline.

    Reads the same PARKBRAKE_* variables as the reaper Lambda (regions, default cap, exemption
    limit, whether untagged GPU hosts are stopped), so it decides exactly as the Lambda would.
    Hosts in an Auto Scaling group are removed with the group's desired capacity decremented.
    """
    from lambdas.aws.environment import default_clients

    report = run_reap(
        environ={**os.environ, STACK: stack},
        clients=default_clients,
        now=datetime.now(UTC),
        dry_run=dry_run,
        assume_yes=yes,
        output=output,
    )
    if report.errors:
        raise ParkbrakeError(f"the sweep finished with {len(report.errors)} error(s); see above")


def run_reap(
    *,
    environ: Mapping[str, str],
    clients: ClientFactory,
    now: datetime,
    dry_run: bool,
    assume_yes: bool,
    output: str,
) -> SweepReport:
    """List and judge, show the plan, ask, act, show what happened."""
    from lambdas import reaper

    settings = settings_from_environment(environ)
    plan = reaper.plan_sweep(settings, now=now, clients=clients)
    if output == "text":
        print_plan(plan, dry_run=dry_run, now=now)
    if (plan.to_stop or plan.to_rotate) and not dry_run:
        rotating = f" and rotate {len(plan.to_rotate)} serving host(s)" if plan.to_rotate else ""
        confirm_or_abort(f"Stop {len(plan.to_stop)} GPU host(s){rotating}?", assume_yes=assume_yes)
    report = reaper.execute_sweep(plan, settings, now=now, clients=clients, dry_run=dry_run)
    if output == "json":
        result = report.as_dict()
        click.echo(json.dumps(result, indent=2))
    else:
        print_outcome(report)
    return report


def print_plan(plan: SweepPlan, *, dry_run: bool, now: datetime) -> None:
    from rich.table import Table

    from cli.console import console as make_console
    from guardrails.durations import format_duration
    from guardrails.rules.base import instant

    table = Table(
        title="GPU hosts" + (" (dry run: nothing will change)" if dry_run else ""), show_lines=False
    )
    for column in ("instance", "region", "type", "pool", "tenant", "running", "deadline", "verdict", "why"):
        table.add_column(column, overflow="fold")
    for verdict in sorted(plan.verdicts, key=lambda v: (v.action != "stop", v.host.instance_id)):
        host = verdict.host
        label = ("would stop" if dry_run else "stop") if verdict.action == "stop" else "skip"
        table.add_row(
            host.instance_id,
            host.region,
            host.instance_type,
            host.pool or "-",
            host.tenant or "-",
            format_duration(now - host.launch_time),
            instant(verdict.deadline.enforce_at) if verdict.deadline else "-",
            f"[bold red]{label}[/]" if verdict.action == "stop" else label,
            verdict.reason,
        )
    console = make_console()
    if plan.verdicts:
        console.print(table)
    else:
        console.print("No running GPU hosts.")
    for error in plan.errors:
        console.print(f"[red]could not list {error['region']}: {error['error']}[/]")


def print_outcome(report: SweepReport) -> None:
    result: dict[str, Any] = report.as_dict()
    if report.dry_run:
        click.echo(
            f"Dry run: would stop {len(result['would_stop'])} of {result['checked']} host(s); nothing changed."
        )
        return
    outcome = report.outcome
    click.echo(f"Checked {result['checked']} host(s).")
    for label, ids in (
        ("Stopped", outcome.stopped),
        ("Terminated (spot)", outcome.terminated),
        ("Removed from their Auto Scaling group (desired capacity decremented)", outcome.removed_from_group),
    ):
        if ids:
            click.echo(f"{label}: {', '.join(ids)}")
    if not outcome.acted:
        click.echo("Nothing to stop.")
    for error in report.errors:
        click.echo(f"Error: {error.get('instance_id') or error.get('region')}: {error['error']}", err=True)
