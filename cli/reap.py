"""``parkbrake reap``: run the sweep now, with the Lambda's settings and rules."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import click

from cli.oncall.sweep_errors import describe_plan_error
from cli.options import (
    confirm_or_abort,
    dry_run_option,
    organisation_options,
    output_option,
    stack_option,
    wide_option,
    yes_option,
)
from guardrails.errors import InputError, ParkbrakeError
from guardrails.plurals import counted
from guardrails.settings import REGIONS, STACK, settings_from_environment

if TYPE_CHECKING:
    from cli.oncall.organisation import OrganisationScope
    from cli.table import Column
    from guardrails.pricing import InstancePrice
    from guardrails.sweep import Verdict
    from lambdas.aws.environment import ClientFactory
    from lambdas.engines.sweeping import SweepPlan, SweepReport


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
@wide_option
@organisation_options
def reap(
    stack: str, regions: str | None, dry_run: bool, yes: bool, output: str, *, scope: OrganisationScope
) -> None:
    """Run the sweep now: stop every running managed GPU host past its deadline.

    Reads the same PARKBRAKE_* variables as the reaper Lambda (default cap, exemption limit,
    whether untagged GPU hosts are stopped), so it decides exactly as the Lambda would.
    Hosts in an Auto Scaling group are removed with the group's desired capacity decremented.
    A stack with no park parameter (/parkbrake/<stack>/parked) in any region swept is an error.

    \b
    With --accounts FILE or --org (only with --dry-run): judged in every
    account and region through its role, one table with the account beside
    every host, a denied role one line last (exit 1); nothing is stopped.

    \b
    Example:
      parkbrake reap --stack dev --region us-east-1 --dry-run
    """
    from cli.oncall.regions import choose_regions
    from lambdas.aws.environment import default_clients

    if scope.spans_accounts and not dry_run:
        raise InputError(
            "reap across accounts only judges: add --dry-run (each account's own sweep, or the hub's, stops hosts)"
        )
    chosen = choose_regions(regions, "--region", stack=stack)
    if scope.spans_accounts:
        _reap_across(scope, stack, chosen, output)
        return
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
        raise ParkbrakeError(f"the sweep finished with {counted(len(report.errors), 'error')}; see above")


def _reap_across(scope: OrganisationScope, stack: str, regions: list[str], output: str) -> None:
    """The dry-run sweep in every account and region: one answer, exit 1 when any could not be judged."""
    import sys

    from cli.oncall.organisation import echo_failures, organisation_run
    from cli.oncall.sweep_across import organisation_sweep_plan
    from lambdas.clients import one_session_clients
    from lambdas.engines.sweeping import SweepPlan

    run = organisation_run(scope, regions, one_session_clients())
    now = datetime.now(UTC)
    judged = organisation_sweep_plan(run, environ={**os.environ, STACK: stack}, now=now)
    if output == "json":
        click.echo(json.dumps(judged.as_dict(), indent=2))
    else:
        print_plan(SweepPlan(judged.verdicts, []), dry_run=True, now=now, accounts=judged.account_of)
        import textwrap

        from cli.console import console

        result = judged.as_dict()
        answer = (
            f"Dry run: would stop {len(result['would_stop'])} and retire {len(result['would_retire'])} of "
            f"{counted(result['checked'], 'host')} in {counted(judged.accounts, 'account')}; nothing changed."
        )  # three-digit counts make it wider than 80 columns: wrapped at spaces, never cut by the terminal
        click.echo("\n".join(textwrap.wrap(answer, console().width, break_long_words=False)))
        echo_failures(judged.errors)
    if judged.errors:
        sys.exit(1)


def _require_stack(stack: str, regions: list[str], clients: ClientFactory) -> None:
    """A mistyped --stack would sweep nothing and say all is well; refuse it instead."""
    from cli.oncall.stack_inventory import park_parameter_value, unknown_stack
    from guardrails import names

    if not any(park_parameter_value(clients("ssm", region), stack) is not None for region in regions):
        problem = f"stack {stack!r} is not deployed in {', '.join(regions)}: no {names.park_parameter(stack)}"
        raise unknown_stack(problem, stack, regions, lambda region: clients("ssm", region))


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
    from cli.oncall.in_process import lambda_quiet
    from lambdas.engines import sweeping

    settings = settings_from_environment(environ)
    with lambda_quiet():  # every failure is in the plan or the report, and printed once from there
        plan = sweeping.plan_sweep(settings, now=now, clients=clients)
    if plan.errors and not plan.verdicts:  # nothing was judged: never say "no GPU hosts"
        raise ParkbrakeError("; ".join(describe_plan_error(error) for error in plan.errors))
    if output == "text":
        print_plan(plan, dry_run=dry_run, now=now)
    if (plan.to_stop or plan.to_rotate or plan.to_retire) and not dry_run:
        rotating = f" and rotate {counted(len(plan.to_rotate), 'serving host')}" if plan.to_rotate else ""
        retiring = (
            f" and snapshot, then terminate {counted(len(plan.to_retire), 'host')} stopped too long"
            if plan.to_retire
            else ""
        )
        confirm_or_abort(
            f"Stop {counted(len(plan.to_stop), 'GPU host')}{rotating}{retiring}?", assume_yes=assume_yes
        )
    with lambda_quiet():
        report = sweeping.execute_sweep(plan, settings, now=now, clients=clients, dry_run=dry_run)
        if not dry_run:
            report.errors += record_decisions(report, environ=environ, clients=clients, now=now)
    if output == "json":
        result = report.as_dict()
        click.echo(json.dumps(result, indent=2))
    else:
        print_outcome(report)
    return report


def record_decisions(
    report: SweepReport, *, environ: Mapping[str, str], clients: ClientFactory, now: datetime
) -> list[dict[str, str]]:
    """A sweep run by a person is their decision: logged with their ARN as its actor, and appended to
    the decision log when a ledger database is configured. Returns the errors (the hosts are stopped)."""
    from guardrails.settings import ledger_configured
    from lambdas.aws.decision_log import DecisionLog
    from lambdas.aws.errors import AWS_ERRORS, describe_error
    from lambdas.ledger.decisions import EnvironmentLedger

    errors = []
    try:
        actor = str(clients("sts", None).get_caller_identity()["Arn"])
    except AWS_ERRORS as error:
        actor = "an unknown caller of parkbrake reap"
        errors.append({"action": "record-decisions", "error": f"who ran the sweep: {describe_error(error)}"})
    decisions = DecisionLog(
        guardrail="reap",
        origin=f"reap-{uuid.uuid4()}",
        ledger=(lambda: EnvironmentLedger(environ)) if ledger_configured(environ) else None,
    )
    return errors + decisions.record(report.decisions(actor=actor, now=now))


def print_plan(
    plan: SweepPlan, *, dry_run: bool, now: datetime, accounts: Mapping[str, str] | None = None
) -> None:
    """The verdicts as a table; ``accounts`` (instance id → account) adds the account beside each."""
    from cli.console import console as make_console
    from cli.table import Table, print_table
    from guardrails.pricing import load_price_table
    from guardrails.rules.base import instant

    prices = load_price_table()
    unmanaged = [v.host for v in plan.verdicts if not v.host.managed and v.action != "stop"]
    unmanaged_burn = sum(
        (
            price.usd_per_hour
            for host in unmanaged
            if (price := prices.on_demand_in(host.instance_type, host.region))
        ),
        Decimal(0),
    )
    console = make_console()
    if not plan.verdicts:
        console.print("No running GPU hosts.")
    else:
        table = Table(
            "GPU hosts" + (" (dry run: nothing will change)" if dry_run else ""), _plan_columns(accounts)
        )
        verdicts = sorted(plan.verdicts, key=lambda v: (v.action == "skip", v.host.instance_id))
        for verdict in verdicts:
            table.add_row(
                verdict.host.instance_id,
                *([accounts.get(verdict.host.instance_id, "-")] if accounts is not None else []),
                _label(verdict, dry_run=dry_run),
                instant(verdict.deadline.enforce_at) if verdict.deadline else "-",
                verdict.reason,
                _running(verdict, now),
                _hourly(prices.on_demand_in(verdict.host.instance_type, verdict.host.region)),
                verdict.host.tenant or "-",
                verdict.host.pool or "-",
                verdict.host.instance_type,
                verdict.host.region,
                style="bold red" if verdict.action != "skip" else None,
            )
        print_table(console, table)
    if unmanaged:
        console.print(
            f"[yellow]{counted(len(unmanaged), 'GPU host')} without parkbrake:managed=true, burning "
            f"${unmanaged_burn:,.2f}/hour: the guardrails cannot stop them.[/]"
        )
    for error in plan.errors:
        console.print(f"[red]{describe_plan_error(error)}[/]")


def _plan_columns(accounts: Mapping[str, str] | None) -> list[Column]:
    from cli.table import Column

    return [
        Column("instance", 0),
        *([Column("account", 0)] if accounts is not None else []),
        Column("verdict", 0),
        Column("deadline", 1),
        Column("why", 2, detail=True),
        Column("running", 3),
        Column("$/h", 3, justify="right"),
        Column("tenant", 4),
        Column("pool", 5),
        Column("type", 6),
        Column("region", 7),
    ]


def _label(verdict: Verdict, *, dry_run: bool) -> str:
    if verdict.action == "stop":
        return "would stop" if dry_run else "stop"
    if verdict.action == "terminate":  # snapshots first, then termination
        return "would retire" if dry_run else "retire"
    return "report" if verdict.reports else "skip"


def _running(verdict: Verdict, now: datetime) -> str:
    """How long it has run since its last start; for a stopped host, how long it has been stopped."""
    from guardrails.durations import format_duration

    host = verdict.host
    if host.state == "stopped":
        return f"stopped {format_duration(now - host.stopped_at)}" if host.stopped_at else "stopped"
    return format_duration(now - host.launch_time)


def _hourly(price: InstancePrice | None) -> str:
    return f"{price.usd_per_hour:.2f}" if price else "?"


def print_outcome(report: SweepReport) -> None:
    result: dict[str, Any] = report.as_dict()
    if report.dry_run:
        retire = f" and retire {len(result['would_retire'])}" if result["would_retire"] else ""
        click.echo(
            f"Dry run: would stop {len(result['would_stop'])}{retire} of {counted(result['checked'], 'host')}; "
            "nothing changed."
        )
        return
    outcome = report.outcome
    click.echo(f"Checked {counted(result['checked'], 'host')}.")
    for label, ids in (
        ("Stopped", outcome.stopped),
        ("Terminated (spot)", outcome.terminated),
        ("Removed from their Auto Scaling group (desired capacity decremented)", outcome.removed_from_group),
        (
            "Retired (stopped too long: each volume snapshotted, then terminated)",
            report.retirement.terminated,
        ),
    ):
        if ids:
            click.echo(f"{label}: {', '.join(ids)}")
    if not outcome.acted and not report.retirement.terminated:
        click.echo("Nothing to stop.")
    for error in report.errors:
        click.echo(f"Error: {error.get('instance_id') or error.get('region')}: {error['error']}", err=True)
