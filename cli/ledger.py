"""``parkbrake ledger``: migrate the ledger database, backfill events, report usage, close months,
set budgets.

The database is ``PARKBRAKE_DATABASE_URL`` (or ``PARKBRAKE_DATABASE_SECRET_ARN``), as for the Lambdas.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from decimal import Decimal
from typing import IO, Any

import click

from cli.options import (
    ACCOUNT_ID,
    DURATION,
    TENANT,
    WHEN,
    output_option,
    project_dir_option,
    wide_option,
    yes_option,
)
from cli.usage.attributions import attribute
from cli.usage.budgets import metering_settings
from guardrails import settings_table
from guardrails.errors import InputError, ParkbrakeError
from guardrails.plurals import counted

MAX_PROBLEMS_SHOWN = 20


# Where a change re-arms the tenant's budget crossing check (lambdas.engines.budgeting.rearm_crossing).
crossing_options = (
    click.option(
        "--stack", envvar=settings_table.STACK,
        help="The stack whose budget Lambda checks the tenant when its spend reaches the limit (re-armed "
        "after the change; also $PARKBRAKE_STACK), e.g. --stack prod.",
    ),
    click.option("--region", help="The stack's region (default: the AWS configuration's), e.g. --region us-east-1."),
)  # fmt: skip


def with_crossing_options(command: Any) -> Any:
    for option in reversed(crossing_options):
        command = option(command)
    return command


@click.group()
def ledger() -> None:
    """The usage ledger: exact accelerator-seconds and cost per tenant, budgets and runway."""


ledger.add_command(attribute)  # cli/usage/attributions.py


@ledger.command()
@output_option
def migrate(output: str) -> None:
    """Create or upgrade the ledger's tables and record new prices (run as the ledger's owner; safe to
    run again, and from two places at once).

    \b
    Example:
      parkbrake ledger migrate
    """
    from lambdas.ledger.store import migrate_and_price, store_from_environment

    store = store_from_environment()
    try:
        applied, priced = migrate_and_price(store)
    finally:
        store.close()
    if output == "json":
        click.echo(json.dumps({"applied": applied, "prices_recorded": priced}))
    else:
        click.echo(f"applied {', '.join(applied)}" if applied else "the ledger is up to date")
        if priced:
            from cli.usage.ingest_summary import prices_summary

            click.echo(prices_summary(priced))


@ledger.command()
@click.argument("events_file", type=click.File("rb"))  # bytes: a line that is not UTF-8 is reported by number
@click.option(
    "--batch-size",
    default=500,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Events written per transaction.",
)
@click.option(
    "--verbose", "-v", is_flag=True, help="List every line that was not appended (default: the first 20)."
)
@output_option
def ingest(events_file: IO[bytes], batch_size: int, verbose: bool, output: str) -> None:
    """Append EC2 state-change events from EVENTS_FILE (JSON Lines of native EventBridge events; - for stdin).

    Each host is looked up in EC2 for its tags and type, as the meter does; events already in the
    ledger are ignored, so a file can be ingested again safely.

    \b
    Example:
      parkbrake ledger ingest events.jsonl
    """
    from cli.usage.ingest import ingest_changes, line_report, read_events, received_now
    from lambdas.aws.environment import default_clients
    from lambdas.ledger.store import store_from_environment

    received_at = received_now()
    numbered = read_events(events_file, received_at=received_at)
    changes = [change for _, change in numbered]
    store = store_from_environment()
    try:
        result = ingest_changes(
            changes,
            store=store,
            clients=default_clients,
            settings=metering_settings(os.environ),
            batch_size=batch_size,
            progress=output == "text",
            received_at=received_at,
        )
    finally:
        store.close()
    lines = line_report(numbered, result)
    if output == "json":
        click.echo(json.dumps({"read": len(changes)} | result.as_dict() | {"lines": lines}, indent=2))
    else:
        from cli.usage.ingest_summary import ingest_summary

        click.echo("\n".join(ingest_summary(lines, verbose=verbose)))
    if result.unattributed:
        listed = ", ".join(sorted({note["instance_id"] for note in result.unattributed})[:MAX_PROBLEMS_SHOWN])
        raise ParkbrakeError(
            f"{counted(len(result.unattributed), 'event')} not appended: about hosts neither EC2 nor the "
            f"ledger knows ({listed})"
        )


@ledger.command()
@click.option(
    "--tenant", "tenants", type=TENANT, multiple=True, help="Tenant to report (repeatable); default: all."
)
@click.option(
    "--since",
    type=WHEN,
    help="Start: 7d, 12h (ago), a date or an ISO-8601 instant; default: this month's start.",
)
@click.option("--until", type=WHEN, help="End, exclusive (as --since); default: now.")
@click.option(
    "--month", "--period", "month",
    help="A calendar month, YYYY-MM, in --timezone (instead of --since/--until); a closed month prints as "
    "it was closed.",
)  # fmt: skip
@click.option(
    "--timezone",
    "zone",
    help="Where the month starts (IANA name); default: the tenants' budgets' zone, else UTC.",
)
@click.option(
    "--output", "--format", "-o", "output", type=click.Choice(["text", "csv", "json", "markdown", "focus"]),
    default="text", show_default=True,
    help="text for people; csv, json or markdown: the invoice; focus: the invoice as a FOCUS CSV dataset.",
)  # fmt: skip
@click.option(
    "--focus-version", type=click.Choice(["1.3", "1.2"]), default="1.3", show_default=True,
    help="The FOCUS version --format focus writes, e.g. --focus-version 1.2.",
)  # fmt: skip
@click.option(
    "--with-savings", is_flag=True,
    help="markdown: add what the guardrails saved in the month as a section (ledger savings).",
)  # fmt: skip
@click.option(
    "--account", "accounts", type=ACCOUNT_ID, multiple=True,
    help="Only the usage of hosts in this AWS account (repeatable), e.g. --account 123456789012; "
    "default: every account of the ledger.",
)  # fmt: skip
@click.option(
    "--accounts", "accounts_file", type=click.Path(exists=True, dir_okay=False),
    help="c7n-org's account list (accounts.yml): names each account in --format focus's SubAccountName "
    "(default: the account id), e.g. --accounts accounts.yml.",
)  # fmt: skip
@wide_option
def report(
    tenants: tuple[str, ...],
    output: str,
    focus_version: str,
    with_savings: bool,
    *,
    accounts: tuple[str, ...],
    accounts_file: str | None,
    **window: Any,
) -> None:
    """GPU usage and cost per tenant for a period; csv, json and markdown are invoices: per pool,
    instance type, region and price, with instance-hours, accelerator-seconds, unit price, pricing
    model, price source and date, currency, subtotal, total and a month-end forecast. A month that
    is not closed yet is a draft in every format.

    \b
    Example:
      parkbrake ledger report --tenant research --month 2026-11 \\
          --timezone Europe/Berlin --format markdown
      parkbrake ledger report --month 2026-11 --format focus \\
          > parkbrake-focus-2026-11.csv
    """
    from cli.usage.invoices import account_invoices, report_invoices, report_window
    from cli.usage.savings import month_savings
    from lambdas.ledger.attributions import (
        attribute_hint,
        unattributed_hosts,
        waiting_stops,
        waiting_stops_line,
    )
    from lambdas.ledger.store import store_from_environment

    now = datetime.now(UTC)
    report_window(now, **window)  # bad flags fail before the database is asked
    account_names = _account_names(accounts_file)
    if with_savings and (output != "markdown" or window["since"] or window["until"]):
        raise InputError("--with-savings: a month's markdown invoice only; add --format markdown and --month")
    store = store_from_environment()
    try:
        invoices, (start, end, zone) = report_invoices(store, tenants, window=window, now=now)
        invoices = account_invoices(invoices, accounts, named=bool(tenants))
        saved = (
            month_savings(store, window["month"] or f"{start:%Y-%m}", tenants, now) if with_savings else None
        )
        listed = output == "text" and (not tenants or "unattributed" in tenants)
        unattributed = unattributed_hosts(store, now=now, since=start, until=end) if listed else []
        waiting = waiting_stops(store, now=now) if listed else []
    finally:
        store.close()
    _print_report(invoices, output, focus_version, (start, end, zone), account_names)
    if saved is not None:
        from guardrails.savings import savings_markdown

        click.echo("\n" + savings_markdown(saved[0], saved[1]))
    if unattributed:  # usage metered for no tenant, with the command that attributes it
        click.echo(attribute_hint(unattributed))
    if waiting:  # stops that close nothing yet: their starts are missing
        click.echo(waiting_stops_line(waiting))


def _account_names(path: str | None) -> dict[str, str]:
    """Account id → name from c7n-org's account list (guardrails.accounts); none without one."""
    if path is None:
        return {}
    from pathlib import Path

    from guardrails.accounts import load_accounts

    return {account.account_id: account.name for account in load_accounts(Path(path).read_text(), path)}


def _print_report(
    invoices: Any,
    output: str,
    focus_version: str,
    where: tuple[datetime, datetime, str],
    account_names: dict[str, str] | None = None,
) -> None:
    """One rendering of the invoices (guardrails.invoice, guardrails.focus, cli.usage.invoices)."""
    from cli.usage.invoices import print_invoices, report_json
    from guardrails.invoice import invoices_csv, invoices_markdown

    if output == "csv":
        click.echo(invoices_csv(invoices), nl=False)
    elif output == "focus":
        from guardrails.focus import invoices_focus, unpriced_lines

        click.echo(invoices_focus(invoices, focus_version, account_names), nl=False)
        if unpriced := unpriced_lines(invoices):
            hours = sum((line.instance_hours for line in unpriced), Decimal(0)).quantize(Decimal("0.000001"))
            click.echo(
                f"{counted(len(unpriced), 'unpriced line')}, {hours} instance-hours, left out until priced",
                err=True,
            )
    elif output == "markdown":
        click.echo(invoices_markdown(invoices))
    elif output == "json":
        click.echo(report_json(invoices, where[0], where[1]))
    else:
        print_invoices(invoices, *where)


@ledger.command()
@click.option("--period", required=True, help="The month to close, YYYY-MM, in each tenant's budget zone.")
@click.option(
    "--tenant", "tenants", type=TENANT, multiple=True, help="Tenant to close (repeatable); default: all."
)
@click.option("--dry-run", is_flag=True, help="Show what would be closed; record nothing.")
@yes_option
@output_option
def close(period: str, tenants: tuple[str, ...], dry_run: bool, yes: bool, output: str) -> None:
    """Close a month: keep each tenant's invoice exactly as it is now; usage that arrives for it later
    is billed in the next open month, marked late. Closing again changes nothing.

    \b
    Example:
      parkbrake ledger close --period 2026-11 --dry-run
      parkbrake ledger close --period 2026-11 --yes
    """
    from cli.options import confirm_or_abort
    from cli.usage.closes import caller_actor, close_periods, close_summary, closing_now
    from cli.usage.tenants import check_known_tenants
    from lambdas.aws.environment import default_clients
    from lambdas.ledger.closes import parse_period
    from lambdas.ledger.store import store_from_environment

    period = parse_period(period)
    if not dry_run:
        whom = ", ".join(tenants) if tenants else "every tenant"
        confirm_or_abort(f"Close {period} for {whom}? A closed month never changes.", assume_yes=yes)
    store = store_from_environment()
    try:
        check_known_tenants(store, tenants, now=datetime.now(UTC))
        actor = "dry run" if dry_run else caller_actor(default_clients)
        outcomes = close_periods(
            store, period=period, tenants=tenants, actor=actor, dry_run=dry_run, now=closing_now()
        )
    finally:
        store.close()
    if output == "json":
        click.echo(json.dumps([outcome.as_dict() for outcome in outcomes], indent=2))
    else:
        click.echo("\n".join(close_summary(outcomes)))


@ledger.command()
@click.option(
    "--tenant", "tenants", type=TENANT, multiple=True, help="Tenant to show (repeatable); default: all."
)
@output_option
@wide_option
def runway(tenants: tuple[str, ...], output: str) -> None:
    """Each tenant's budget: spent, committed to running hosts' caps, remaining, burn rate, runway.

    \b
    Example:
      parkbrake ledger runway --tenant research
    """
    from cli.usage.budgets import print_runways, tenant_runways
    from cli.usage.tenants import check_known_tenants
    from lambdas.ledger.store import store_from_environment

    if tenants:
        store = store_from_environment()
        try:
            check_known_tenants(store, tenants, now=datetime.now(UTC))
        finally:
            store.close()
    statuses = tenant_runways(now=datetime.now(UTC), tenants=list(tenants) or None)
    if output == "json":
        click.echo(json.dumps([status.as_dict() for status in statuses], indent=2))
        return
    print_runways(statuses)


@ledger.command()
@click.option(
    "--month", required=True, help="The month, YYYY-MM, in each tenant's budget zone (e.g. --month 2026-11)."
)
@click.option(
    "--tenant", "tenants", type=TENANT, multiple=True, help="Tenant to report (repeatable); default: all."
)
@click.option(
    "--output", "--format", "-o", "output", type=click.Choice(["text", "json", "markdown"]),
    default="text", show_default=True, help="text for people; json; markdown (the invoice's section).",
)  # fmt: skip
@wide_option
def savings(month: str, tenants: tuple[str, ...], output: str) -> None:
    """What the guardrails saved in a month: per tenant, pool and guardrail, the GPU-hours and dollars
    each stop avoided (a stopped host would have run until its next start, the month's end or one more
    cap, whichever is first), each stop with its decision id in `parkbrake log`.

    \b
    Example:
      parkbrake ledger savings --month 2026-11 --tenant research
    """
    from cli.usage.savings import month_savings, print_savings, savings_document
    from guardrails.savings import savings_markdown
    from lambdas.ledger.store import store_from_environment

    store = store_from_environment()
    try:
        month, found = month_savings(store, month, tenants, datetime.now(UTC))
    finally:
        store.close()
    if output == "json":
        click.echo(json.dumps(savings_document(month, found), indent=2))
    elif output == "markdown":
        click.echo(savings_markdown(month, found))
    else:
        print_savings(month, found)


@ledger.command("replay-dlq")
@click.option("--stack", required=True, help="The stack whose meter dead-letter queue to replay.")
@click.option("--region", default=None, help="Its region (default: the AWS configuration's).")
@click.option(
    "--max-messages", default=10_000, show_default=True, type=click.IntRange(1), help="Stop after this many."
)
@output_option
def replay_dlq(stack: str, region: str | None, max_messages: int, output: str) -> None:
    """Meter again what landed in the meter's dead-letter queue, deleting each message once recorded
    (appended, already in the ledger, or not an accelerator host); the rest stay and exit 1.

    \b
    Example:
      parkbrake ledger replay-dlq --stack prod
    """
    from cli.oncall.stack_inventory import unknown_stack
    from guardrails import names
    from lambdas.clients import client
    from lambdas.engines.metering import GUARDRAIL
    from lambdas.engines.replaying import replay_dead_letters
    from lambdas.ledger.store import store_from_environment

    sqs, queue = client("sqs", region), names.dead_letter_queue(stack, GUARDRAIL)
    try:  # before the ledger is opened: a mistyped --stack is bad input, whatever the database
        sqs.get_queue_url(QueueName=queue)
    except sqs.exceptions.QueueDoesNotExist:
        where = sqs.meta.region_name
        missing = f"stack {stack!r} has no meter dead-letter queue {queue} in {where}"
        raise unknown_stack(missing, stack, [where], lambda region: client("ssm", region)) from None
    store = store_from_environment()
    try:
        result = replay_dead_letters(
            client,
            queue_region=region,
            stack=stack,
            store=store,
            settings=metering_settings(os.environ),
            max_messages=max_messages,
        )
    finally:
        store.close()
    if output == "json":
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        click.echo(
            f"replayed {counted(result.read, 'message')}: {result.meter.inserted:,} appended, "
            f"{counted(result.decisions, 'relayed decision')} logged, {result.deleted:,} deleted"
        )
        for problem in result.kept:
            click.echo(f"kept {problem['message_id']}: {problem['reason']}", err=True)
    if result.kept:
        click.get_current_context().exit(1)


@ledger.command()
@click.option("--tenant", type=TENANT, required=True, help="Who pays.")
@click.option("--instance-type", required=True, help="The instance type of the hosts about to start.")
@click.option("--count", default=1, show_default=True, type=click.IntRange(1, 10_000), help="How many hosts.")
@click.option(
    "--max-runtime", type=DURATION, required=True, help="Each host's cap (90m, 2h): what it can cost at most."
)
@click.option(
    "--lease",
    type=DURATION,
    default="30m",
    show_default=True,
    help="How long the money is held for hosts to start.",
)
@click.option(
    "--pricing-model",
    type=click.Choice(["on-demand", "spot"]),
    default="on-demand",
    show_default=True,
    help="How the hosts are bought: their price is the ledger's for the type, --region and model.",
)
@click.option(
    "--zone", help="A spot request's availability zone, if known (else its region's on-demand price)."
)
@with_crossing_options
@output_option
def admit(tenant: str, output: str, **flags: Any) -> None:
    """Reserve what COUNT hosts can cost before starting them: exit 0 with the reservation id, or 1
    with what remains and what is needed. For any launcher (workflow engine, CI) that starts GPUs.

    \b
    Example:
      parkbrake ledger admit --tenant research --instance-type g5.xlarge \\
          --count 2 --max-runtime 2h
    """
    from cli.usage.budgets import crossing_line, rearm_or_report
    from cli.usage.tenants import check_known_tenants
    from guardrails.launch import AdmissionRequest
    from guardrails.pricing import priced_region
    from lambdas.ledger.store import store_from_environment

    instance_type, count = str(flags["instance_type"]), int(flags["count"])
    store = store_from_environment()
    crossing: dict[str, Any] = {}
    try:
        check_known_tenants(store, [tenant], now=datetime.now(UTC))
        admission = store.admit(
            AdmissionRequest(
                tenant,
                instance_type,
                count,
                flags["max_runtime"],
                region=priced_region(os.environ, flags["region"]),
                pricing_model=flags["pricing_model"],
                zone=flags["zone"],
            ),
            now=datetime.now(UTC),
            default_cap=metering_settings(os.environ).default_max_runtime,
            lease=flags["lease"],
        )
        if admission.granted:
            crossing = rearm_or_report(store, tenant, stack=flags["stack"], region=flags["region"])
    finally:
        store.close()
    if output == "json":
        click.echo(json.dumps({"tenant": tenant} | admission.as_dict() | {"crossing": crossing or None}))
    elif admission.granted:
        held = f"reservation {admission.reservation_id}" if admission.reservation_id else "nothing to reserve"
        click.echo(f"granted: {held} (${admission.needed_usd:.2f} for {count} x {instance_type})")
        click.echo(crossing_line(crossing))
    else:
        click.echo(f"refused: {admission.reason}", err=True)
    if not admission.granted:
        click.get_current_context().exit(1)


@ledger.command()
@click.argument("reservation_id", type=int)
@output_option
def release(reservation_id: int, output: str) -> None:
    """Give back what reservation RESERVATION_ID still holds (its started hosts stay committed).

    \b
    Example:
      parkbrake ledger release 17
    """
    from lambdas.ledger.store import store_from_environment

    store = store_from_environment()
    try:
        released = store.release(reservation_id, now=datetime.now(UTC))
    finally:
        store.close()
    if not released:
        raise InputError(f"reservation {reservation_id} does not exist or was already released")
    click.echo(json.dumps({"released": reservation_id}) if output == "json" else f"released {reservation_id}")


@ledger.command("budget")
@click.argument("tenant", type=TENANT, required=False)
@click.option("--limit-usd", help="The hard limit for each period, in USD (required unless --remove).")
@click.option(
    "--gpu-hours",
    help="Also a limit in accelerator-hours per period, enforced at admission beside the dollars "
    "(e.g. --gpu-hours 400); default: none.",
)
@click.option(
    "--period",
    type=click.Choice(["day", "week", "month"]),
    default="month",
    show_default=True,
    help="The budget period the limit applies to.",
)
@click.option(
    "--timezone", default="UTC", show_default=True,
    help="IANA time zone where the tenant's days, weeks and months begin (Europe/Berlin).",
)  # fmt: skip
@click.option(
    "--soft", default="50,80,90", show_default=True, help="Percentages of the limit at which to notify."
)
@click.option(
    "--actions", default="notify,deny", show_default=True,
    help="What the budget does: notify (SNS at thresholds), deny (refuse new work), stop (stop hosts at the limit).",
)  # fmt: skip
@click.option(
    "--remove", is_flag=True, help="Remove TENANT's budget (usage is still metered); e.g. --remove."
)
@click.option(
    "--from-stack", "from_stack", metavar="STACK",
    help="Apply the budgets Pulumi.STACK.yaml declares (tenants' monthly_budget_usd, monthly_gpu_hours) "
    "instead of flags: every tenant's, or TENANT's. A budget set by hand since is kept, and a stack "
    "that declares something else afterwards is reported as a conflict.",
)  # fmt: skip
@click.option(
    "--replace-hand", is_flag=True, help="With --from-stack: replace budgets set by hand with the stack's."
)
@click.option("--dry-run", is_flag=True, help="With --from-stack: report what would change; change nothing.")
@project_dir_option
@with_crossing_options
@output_option
def set_budget(tenant: str | None, output: str, remove: bool, **flags: Any) -> None:
    """Set TENANT's budget per period in its time zone and the actions it takes (replacing any earlier
    budget), or remove it; or apply the budgets a stack declares (--from-stack).

    \b
    Example:
      parkbrake ledger budget research --limit-usd 5000 --period month \\
          --timezone Europe/Berlin --gpu-hours 400
      parkbrake ledger budget --from-stack dev --dry-run
    """
    stack, region, project_dir = flags.pop("stack"), flags.pop("region"), flags.pop("project_dir")
    from_stack, replace_hand, dry_run = (
        flags.pop("from_stack"),
        flags.pop("replace_hand"),
        flags.pop("dry_run"),
    )
    if from_stack is not None:
        from cli.usage.budgets import budgets_from_stack

        if remove or flags["limit_usd"] is not None or flags["gpu_hours"] is not None:
            raise InputError(
                "--from-stack: the stack file gives the limits; drop --limit-usd, --gpu-hours and --remove"
            )

        budgets_from_stack(
            from_stack,
            tenant,
            project_dir=project_dir,
            replace_hand=replace_hand,
            dry_run=dry_run,
            output=output,
        )
        return
    if tenant is None:
        raise InputError(
            "TENANT: required (or --from-stack STACK), e.g. parkbrake ledger budget research --limit-usd 5000"
        )
    if replace_hand or dry_run:
        raise InputError(
            "--replace-hand and --dry-run go with --from-stack STACK; drop them or add --from-stack"
        )
    from cli.usage.budgets import budget_summary, crossing_line, parse_budget, rearm_after_change
    from lambdas.ledger.store import store_from_environment

    new_budget = None if remove else parse_budget(tenant, **flags)
    store = store_from_environment()
    try:
        if new_budget is None:
            if not store.remove_budget(tenant):
                raise InputError(f"tenant {tenant!r} has no budget to remove")
            summary, line = {"tenant": tenant, "removed": True}, f"{tenant}: budget removed"
        else:
            store.set_budget(new_budget)
            summary, line = budget_summary(new_budget)
        try:
            crossing = rearm_after_change(store, tenant, stack=stack, region=region, environ=os.environ)
        except Exception as error:  # the budget is set; the person is told the check was not moved
            raise ParkbrakeError(
                f"{line}; but re-arming its budget crossing check failed ({error}); the budget's one-minute "
                "rule still checks it: run the command again to re-arm"
            ) from error
    finally:
        store.close()
    click.echo(
        json.dumps(summary | {"crossing": crossing})
        if output == "json"
        else f"{line}\n{crossing_line(crossing)}"
    )
