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
from guardrails.settings import REGIONS, STACK, settings_from_environment

if TYPE_CHECKING:
    from lambdas.aws.environment import ClientFactory
    from lambdas.reaper import SweepPlan, SweepReport


@click.command()
@stack_option
@click.option(
    "--region",
    "regions",
    help="Comma-separated regions to sweep [default: PARKBRAKE_REGIONS, else aws:region of "
    "Pulumi.<stack>.yaml here, else AWS_REGION].",
)
@dry_run_option
@yes_option
@output_option
def reap(stack: str, regions: str | None, dry_run: bool, yes: bool, output: str) -> None:
    """Run the sweep now: stop every running managed GPU host past its deadline.

    Reads the same PARKBRAKE_* variables as the reaper Lambda (default cap, exemption limit,
    whether untagged GPU hosts are stopped), so it decides exactly as the Lambda would.
    Hosts in an Auto Scaling group are removed with the group's desired capacity decremented.
    A stack with no park parameter (/parkbrake/<stack>/parked) in any region swept is an error.

    \b
    Example:
      parkbrake reap --stack dev --region us-east-1 --dry-run
    """
    from cli.oncall.regions import choose_regions
    from lambdas.aws.environment import default_clients

    chosen = choose_regions(regions, "--region", stack=stack)
    _require_stack(stack, chosen, default_clients)
    report = run_reap(
        environ={**os.environ, STACK: stack, REGIONS: ",".join(chosen)},
        clients=default_clients,
        now=datetime.now(UTC),
        dry_run=dry_run,
        assume_yes=yes,
        output=output,
    )
    if report.errors:
        raise ParkbrakeError(f"the sweep finished with {len(report.errors)} error(s); see above")


def _require_stack(stack: str, regions: list[str], clients: ClientFactory) -> None:
    """A mistyped --stack would sweep nothing and say all is well; refuse it instead."""
    from cli.oncall.stack_inventory import park_parameter_value
    from guardrails import names

    if not any(park_parameter_value(clients("ssm", region), stack) is not None for region in regions):
        raise ParkbrakeError(
            f"stack {stack!r} is not deployed in {', '.join(regions)}: no {names.park_parameter(stack)}; "
            "check --stack and --region"
        )


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
    from cli.console import console as make_console
    from cli.oncall.fitted_table import Column, fitted_table
    from guardrails.durations import format_duration
    from guardrails.rules.base import instant

    console = make_console()
    if not plan.verdicts:
        console.print("No running GPU hosts.")
    else:
        columns = [
            Column("instance", 0, whole=True),
            Column("verdict", 0, whole=True),
            Column("deadline", 1, whole=True),
            Column("why", 2),
            Column("running", 3, whole=True),
            Column("tenant", 4),
            Column("pool", 5),
            Column("type", 6),
            Column("region", 7, whole=True),
        ]
        verdicts = sorted(plan.verdicts, key=lambda v: (v.action != "stop", v.host.instance_id))
        rows = [
            [
                verdict.host.instance_id,
                (("would stop" if dry_run else "stop") if verdict.action == "stop" else "skip"),
                instant(verdict.deadline.enforce_at) if verdict.deadline else "-",
                verdict.reason,
                format_duration(now - verdict.host.launch_time),
                verdict.host.tenant or "-",
                verdict.host.pool or "-",
                verdict.host.instance_type,
                verdict.host.region,
            ]
            for verdict in verdicts
        ]
        styles = ["bold red" if verdict.action == "stop" else None for verdict in verdicts]
        title = "GPU hosts" + (" (dry run: nothing will change)" if dry_run else "")
        fitted = fitted_table(title, columns, rows, console.width, styles)
        console.print(fitted.table)
        if fitted.dropped:
            console.print(
                f"[dim]  hidden at this width: {', '.join(fitted.dropped)}; --output json has all[/]"
            )
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
