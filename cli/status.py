"""``parkbrake status``: what is running right now, and what it is costing."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.options import output_option
from guardrails.errors import InputError

if TYPE_CHECKING:
    from cli.oncall.fleet import FleetStatus, HostStatus
    from guardrails.runway import TenantRunway


@click.command()
@click.option(
    "--stack", "-s", envvar="PARKBRAKE_STACK", help="Only this Pulumi stack [default: every stack found]."
)
@click.option(
    "--regions",
    help="Comma-separated regions to read at once [default: PARKBRAKE_REGIONS, else the stack file's "
    "aws:region, else AWS_REGION].",
)
@output_option
def status(stack: str | None, regions: str | None, output: str) -> None:
    """Every running GPU host and what it costs; services, park state, next nightly start.

    \b
    Hosts: pool, tenant, type, age, deadline and time left, exemption, cost so far at the
    on-demand price. Services: desired/running counts and revisions. Stacks: the SSM park
    state and the next nightly start. Totals and burn rate per hour; with the ledger configured
    (PARKBRAKE_DATABASE_URL), spend and runway per tenant. Exit 1 when a region could not be read.
    """
    from cli.oncall.fleet import fleet_status
    from cli.oncall.park_switch import config_region
    from guardrails.settings import REGIONS, aws_region, ledger_configured, settings_from_environment
    from lambdas.aws.clients import client

    chosen = _regions(regions) or _regions(os.environ.get(REGIONS))
    if not chosen and stack:
        chosen = [region] if (region := config_region(stack, Path("."))) else []
    if not chosen:
        chosen = _regions(aws_region(os.environ))
    if not chosen:
        raise InputError("no region to read: pass --regions, or set PARKBRAKE_REGIONS or AWS_REGION")
    settings = settings_from_environment({**os.environ, REGIONS: ",".join(chosen)})
    report = fleet_status(
        stack=stack,
        regions=chosen,
        clients=client,
        settings=settings,
        now=datetime.now(UTC),
        ledger=_ledger_runways if ledger_configured(os.environ) else None,
    )
    if output == "json":
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        print_status(report)
    if report.errors:
        sys.exit(1)


def _regions(text: str | None) -> list[str]:
    return list(dict.fromkeys(part.strip() for part in (text or "").split(",") if part.strip()))


def _ledger_runways(tenants: Sequence[str]) -> list[TenantRunway]:
    from cli.ledger import tenant_runways

    return tenant_runways(now=datetime.now(UTC), tenants=list(tenants) or None)


def _span(duration: timedelta) -> str:
    from guardrails.durations import format_duration

    seconds = int(duration.total_seconds())
    return format_duration(timedelta(seconds=seconds)) if seconds > 0 else "0s"


def _deadline_cell(host: HostStatus) -> str:
    left = host.time_left
    if host.deadline is None or left is None:
        return "[yellow]not managed[/]"
    when = host.deadline.enforce_at.strftime("%d %b %H:%M UTC")
    return (
        f"{when} ({_span(left)} left)"
        if left.total_seconds() > 0
        else f"[red]{when} (overdue {_span(-left)})[/]"
    )


def _exempt_cell(host: HostStatus) -> str:
    exempt_until = host.deadline.exempt_until if host.deadline else None
    return f"until {exempt_until:%H:%M} UTC" if host.exempt and exempt_until else "no"


def _ledger_cells(ledger: dict[str, Any] | None) -> tuple[str, ...]:
    """Spent, remaining and runway from the ledger's row for a tenant (``TenantRunway.as_dict``)."""
    if ledger is None:
        return ("-", "-", "-")
    remaining, runway = ledger["remaining_usd"], ledger["runway_seconds"]
    return (
        f"{ledger['spent_usd']:,.2f}",
        "no budget" if remaining is None else f"{remaining:,.2f}",
        "unbounded" if runway is None else _span(timedelta(seconds=runway)),
    )


def print_status(report: FleetStatus) -> None:
    from rich.table import Table

    from cli.console import console as make_console

    console = make_console()
    hosts = Table(title=f"GPU hosts running ({', '.join(report.regions)})", title_justify="left")
    for column in (
        "instance",
        "stack/pool",
        "tenant",
        "type",
        "GPUs",
        "age",
        "deadline",
        "exempt",
        "$/h",
        "so far",
    ):
        hosts.add_column(column, justify="right" if column in ("GPUs", "$/h", "so far") else "left")
    for host in report.hosts:
        facts = host.host
        hosts.add_row(
            f"{facts.instance_id} [dim]{facts.region}[/]",
            f"{facts.tags.get('parkbrake:stack', '-')}/{facts.pool or '-'}",
            facts.tenant or "[yellow]untagged[/]",
            facts.instance_type,
            str(host.accelerators or "?"),
            _span(host.age),
            _deadline_cell(host),
            _exempt_cell(host),
            f"{host.usd_per_hour:.2f}" if host.usd_per_hour is not None else "?",
            f"{host.cost_so_far:.2f}" if host.cost_so_far is not None else "?",
        )
    console.print(hosts)
    if report.services:
        services = Table(title="Services", title_justify="left")
        for column in (
            "stack",
            "service",
            "desired",
            "running",
            "pending",
            "task definition",
            "revision",
            "rollout",
        ):
            services.add_column(column)
        for service in report.services:
            services.add_row(
                service.stack,
                service.name,
                str(service.desired),
                str(service.running),
                str(service.pending),
                service.task_definition or "-",
                service.revision or "-",
                service.rollout or "-",
            )
        console.print(services)
    stacks = Table(title="Stacks", title_justify="left")
    for column in ("stack", "region", "parked", "next nightly start"):
        stacks.add_column(column)
    for stack in report.stacks:
        start = stack.next_start(report.now)
        parked = {True: "[bold]yes[/]", False: "no", None: f"[yellow]unknown ({stack.park_value})[/]"}[
            stack.parked
        ]
        next_start = (
            f"{start[0].pool} at {start[1]:%Y-%m-%d %H:%M} UTC (in {_span(start[1] - report.now)})"
            if start
            else "none"
        )
        stacks.add_row(stack.stack, stack.region, parked, next_start)
    console.print(stacks)
    console.print(
        f"[bold]Totals:[/] {len(report.hosts)} GPU hosts, {report.accelerators} accelerators, "
        f"burning ${report.burn_usd_per_hour:,.2f}/hour, ${report.cost_so_far:,.2f} since their last start"
    )
    tenants = Table(title="By tenant", title_justify="left")
    ledger_columns = ("spent", "remaining", "runway") if report.ledger is not None else ()
    for column in ("tenant", "hosts", "GPUs", "$/h", "so far", *ledger_columns):
        tenants.add_column(column, justify="left" if column == "tenant" else "right")
    for row in report.tenant_rows():
        extra = _ledger_cells(row["ledger"]) if report.ledger is not None else ()
        tenants.add_row(
            row["tenant"],
            str(row["hosts"]),
            str(row["accelerators"]),
            f"{row['usd_per_hour']:,.2f}",
            f"{row['cost_so_far_usd']:,.2f}",
            *extra,
        )
    console.print(tenants)
    if report.ledger is None:
        console.print("[dim]ledger not configured (PARKBRAKE_DATABASE_URL): no spend or runway per tenant[/]")
    for error in report.errors:
        console.print(f"[bold red]error:[/] {error}")
