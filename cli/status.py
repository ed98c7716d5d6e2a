"""``parkbrake status``: what is running right now, and what it is costing."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from cli.options import organisation_options, output_option, wide_option
from guardrails import settings_table
from guardrails.errors import ParkbrakeError

if TYPE_CHECKING:
    from cli.oncall.organisation import OrganisationScope
    from guardrails.runway import TenantRunway


@click.command()
@click.option(
    "--stack", "-s", envvar=settings_table.STACK, help="Only this Pulumi stack [default: every stack found]."
)
@click.option(
    "--regions",
    help="Comma-separated regions to read at once [default: PARKBRAKE_REGIONS, else the stack file's "
    "aws:region, else AWS_REGION].",
)
@click.option(
    "--filter",
    "filters",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only hosts with this tenant, pool, state (overdue, unmanaged, bad-tags, running, exempt), stack, "
    "region or type; repeat it (one key's values are alternatives, different keys must all hold).",
)
@click.option(
    "--sort",
    type=click.Choice(["action", "cost", "age", "deadline", "tenant", "pool", "id"]),
    default="action",
    show_default=True,
    help="Order of the hosts: action puts overdue and unmanaged first, then the nearest deadline.",
)
@output_option
@wide_option
@organisation_options
def status(
    stack: str | None,
    regions: str | None,
    filters: tuple[str, ...],
    sort: str,
    output: str,
    *,
    scope: OrganisationScope,
) -> None:
    """Every running GPU host and what it costs; services, park state, next nightly start.

    First a summary: hosts, accelerators, burn per hour, spend today, overdue, unmanaged, exempt,
    parked stacks. Then the hosts, overdue and unmanaged first (deadline, time left, tenant, pool,
    cost), the GPU pools' Auto Scaling capacities and park records (who parked, when), the
    services (what the PRIMARY deployment runs, where the load balancer sends traffic), the
    stacks (SSM park state, next nightly start) and the tenants; with the ledger configured
    (PARKBRAKE_DATABASE_URL), spend and runway per tenant. Ids, names, timestamps and amounts are
    never cut or folded: at a narrow width less important columns are left out (and named) and a
    park record moves under its row; --wide shows every column. The summary is repeated last, for
    the last screen. --filter narrows every table; when no host matches, one line says so. Exit 1
    when a region could not be read.

    With --accounts FILE (c7n-org's account list) or --org, every account in each of its regions
    (else --regions'), through its role: one answer, the account beside every host, an account
    whose role is denied or missing one error line last (exit 1).

    \b
    Example:
      parkbrake status --stack dev --filter state=overdue --filter tenant=research
    """
    from cli.oncall.collector import collector_paused

    with collector_paused():  # from the imports to the last line printed
        show_status(stack, regions, filters, sort, output, scope=scope)


def show_status(
    stack: str | None,
    regions: str | None,
    filters: tuple[str, ...],
    sort: str,
    output: str,
    *,
    scope: OrganisationScope | None = None,
) -> None:
    """Read the fleet (every client from one session) and print it as text or JSON."""
    from cli.oncall.fleet.status import fleet_status
    from cli.oncall.fleet.status_view import parse_filters, select
    from cli.oncall.regions import choose_regions
    from guardrails.settings import REGIONS, ledger_configured, settings_from_environment
    from lambdas.clients import one_session_clients

    wanted = parse_filters(filters)
    chosen = choose_regions(regions, "--regions", stack=stack)
    settings = settings_from_environment({**os.environ, REGIONS: ",".join(chosen)})
    ledger = _ledger_runways if ledger_configured(os.environ) else None
    if scope is not None and scope.spans_accounts:
        from cli.oncall.fleet.across import organisation_status
        from cli.oncall.organisation import organisation_run

        run = organisation_run(scope, chosen, one_session_clients())
        report = organisation_status(
            run, stack=stack, settings=settings, now=datetime.now(UTC), ledger=ledger
        )
    else:
        report = fleet_status(
            stack=stack,
            regions=chosen,
            clients=one_session_clients(),
            settings=settings,
            now=datetime.now(UTC),
            ledger=ledger,
        )
    if report.accounts is None and sorted(report.unlisted_regions) == sorted(
        chosen
    ):  # nothing listed: never an empty fleet
        raise ParkbrakeError("; ".join(error for error in report.errors if "cannot list instances" in error))
    # JSON keeps its order (region, stack, instance id); only people get the hosts by --sort.
    shown = select(report, wanted, sort if output == "text" else None)
    if output == "json":
        click.echo(json.dumps(shown.as_dict(), indent=2))
    else:
        from cli.console import console as make_console
        from cli.oncall.fleet.status_view import print_status

        print_status(make_console(), shown, filters=filters, running=len(report.hosts))
    if report.errors:
        sys.exit(1)


def _ledger_runways(tenants: Sequence[str]) -> list[TenantRunway]:
    from cli.usage.budgets import tenant_runways

    return tenant_runways(now=datetime.now(UTC), tenants=list(tenants) or None)
