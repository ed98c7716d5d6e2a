"""``parkbrake ledger``: migrate the ledger database, backfill events, report usage, set budgets.

The database is ``PARKBRAKE_DATABASE_URL`` (or ``PARKBRAKE_DATABASE_SECRET_ARN``), as for the Lambdas.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import IO, TYPE_CHECKING, Any, cast

import click

from cli.options import output_option
from guardrails.errors import InputError, ParkbrakeError

if TYPE_CHECKING:
    from guardrails.invoice import Invoice
    from guardrails.ledger import StateChange, Usage
    from guardrails.runway import Budget, Period, TenantRunway
    from guardrails.settings import Settings
    from lambdas.aws.environment import ClientFactory
    from lambdas.ledger.store import LedgerStore, UsageRow
    from lambdas.meter import MeterResult

MAX_PROBLEMS_SHOWN = 20


def parse_instant(text: str, option: str) -> datetime:
    """ISO-8601; a date means its UTC midnight and a time without an offset is UTC."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(
            f"{option}: {text!r} is not an ISO-8601 date or time (2025-05-01, 2025-05-01T12:00Z)"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def metering_settings(environ: Mapping[str, str]) -> Settings:
    """The caps the meter resolves (``PARKBRAKE_DEFAULT_MAX_RUNTIME``, ``PARKBRAKE_POOL_MAX_RUNTIMES``).

    The events name their own regions, so the guarded-region list is not needed here.
    """
    from guardrails.settings import REGIONS, settings_from_environment

    return settings_from_environment({REGIONS: "any", **environ})


@click.group()
def ledger() -> None:
    """The usage ledger: exact accelerator-seconds and cost per tenant, budgets and runway."""


@ledger.command()
@output_option
def migrate(output: str) -> None:
    """Create or upgrade the ledger's tables and record new prices (run as the ledger's owner; safe to
    run again, and from two places at once).

    \b
    Example:
      parkbrake ledger migrate
    """
    from guardrails.pricing import PRICES_FILE, load_price_table
    from lambdas.ledger.store import store_from_environment

    table = load_price_table()
    store = store_from_environment()
    try:
        applied = store.migrate()
        priced = store.sync_prices(table, source=f"{PRICES_FILE.name}, taken {table.taken}")
    finally:
        store.close()
    if output == "json":
        click.echo(json.dumps({"applied": applied, "prices_recorded": priced}))
    else:
        click.echo(f"applied {', '.join(applied)}" if applied else "the ledger is up to date")
        if priced:
            click.echo(f"recorded prices of {len(priced)} instance types: {', '.join(priced)}")


@ledger.command()
@click.argument("events_file", type=click.File("r"))
@click.option(
    "--batch-size",
    default=500,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Events written per transaction.",
)
@output_option
def ingest(events_file: IO[str], batch_size: int, output: str) -> None:
    """Append EC2 state-change events from EVENTS_FILE (JSON Lines of native EventBridge events; - for stdin).

    Each host is looked up in EC2 for its tags and type, as the meter does; events already in the
    ledger are ignored, so a file can be ingested again safely.

    \b
    Example:
      parkbrake ledger ingest events.jsonl
    """
    from lambdas.aws.environment import default_clients
    from lambdas.ledger.store import store_from_environment

    numbered = read_events(events_file)
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
        )
    finally:
        store.close()
    lines = line_report(numbered, result)
    if output == "json":
        click.echo(json.dumps({"read": len(changes)} | result.as_dict() | {"lines": lines}, indent=2))
    else:
        for line in lines:
            if line["outcome"] != "appended":
                click.echo(f"line {line['line']}: {line['event_id']} {line['outcome']}: {line['reason']}")
        click.echo(
            f"read {len(changes)} events: {result.inserted} appended, {result.duplicates} not appended "
            f"(already in the ledger, or inside a host's closed history), {len(result.skipped)} skipped, "
            f"{len(result.unattributed)} unknown hosts"
        )
    if result.unattributed:
        listed = ", ".join(sorted({note["instance_id"] for note in result.unattributed})[:MAX_PROBLEMS_SHOWN])
        raise ParkbrakeError(
            f"{len(result.unattributed)} events are about hosts neither EC2 nor the ledger knows ({listed}); "
            "they were not appended"
        )


def line_report(numbered: Sequence[tuple[int, StateChange]], result: MeterResult) -> list[dict[str, Any]]:
    """Per line of the file: what happened to its event (appended, duplicate, skipped, unattributed) and why."""
    notes = {note["event_id"]: ("skipped", note["reason"]) for note in result.skipped}
    notes |= {note["event_id"]: ("unattributed", note["reason"]) for note in result.unattributed}
    first_line: dict[str, int] = {}
    lines = []
    for number, change in numbered:
        outcome, reason = notes.get(change.event_id, ("duplicate", "already in the ledger"))
        if change.event_id in first_line:
            outcome, reason = "duplicate", f"repeats line {first_line[change.event_id]}"
        elif result.outcomes.get(change.event_id) == "appended":
            outcome, reason = "appended", ""
        first_line.setdefault(change.event_id, number)
        lines.append(
            {"line": number, "event_id": change.event_id, "instance_id": change.instance_id, "outcome": outcome,
             "reason": reason}
        )  # fmt: skip
    return lines


def read_events(lines: Iterable[str]) -> list[tuple[int, StateChange]]:
    """Parse JSON Lines of events (with their line numbers); every malformed line is reported, by
    number, before anything is written."""
    from guardrails.ledger import MalformedEvent, state_change_from_event

    changes, problems = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            document = json.loads(line)
            if not isinstance(document, dict):
                raise MalformedEvent("not a JSON object")
            changes.append((number, state_change_from_event(document)))
        except (json.JSONDecodeError, MalformedEvent) as error:
            problems.append(f"line {number}: {error}")
    if problems:
        shown = problems[:MAX_PROBLEMS_SHOWN]
        more = len(problems) - len(shown)
        raise InputError(
            "malformed events, nothing was appended:\n  "
            + "\n  ".join(shown)
            + (f"\n  ... and {more} more" if more else "")
        )
    return changes


def ingest_changes(
    changes: Sequence[StateChange],
    *,
    store: LedgerStore,
    clients: ClientFactory,
    settings: Settings,
    batch_size: int,
    progress: bool = False,
) -> MeterResult:
    """Meter ``changes`` in batches: one EC2 lookup and one database transaction per batch."""
    from rich.progress import track

    from cli.console import console
    from lambdas.meter import MeterResult, meter

    total = MeterResult()
    batches = [changes[start : start + batch_size] for start in range(0, len(changes), batch_size)]
    for batch in track(batches, description="ingesting", console=console(stderr=True), disable=not progress):
        now = datetime.now(UTC)
        total.add(
            meter(batch, store=store, clients=clients, settings=settings, received_at=now, source="ingest")
        )
    return total


@dataclass(frozen=True)
class TenantReport:
    tenant: str
    rows: list[UsageRow]

    def total(self, key: str | None = None) -> dict[str | None, Usage]:
        """Usage summed exactly by pool, by instance type (``key``) or in all (None)."""
        from guardrails.ledger import Usage

        sums: dict[str | None, Usage] = defaultdict(Usage)
        for row in self.rows:
            sums[getattr(row, key) if key else None] += row.usage
        return dict(sums)

    def as_dict(self) -> dict[str, Any]:
        from guardrails.ledger import Usage

        total = self.total().get(None, Usage())
        return {
            "tenant": self.tenant,
            **_amounts(total),
            "by_pool": [
                {"pool": pool, **_amounts(usage)} for pool, usage in sorted(self.total("pool").items())
            ],
            "by_instance_type": [
                {"instance_type": name, **_amounts(usage)}
                for name, usage in sorted(self.total("instance_type").items())
            ],
            "breakdown": [
                {"pool": row.pool, "instance_type": row.instance_type, **_amounts(row.usage)}
                for row in self.rows
            ],
        }


def _amounts(usage: Usage) -> dict[str, Any]:
    # JSON numbers: three decimals of seconds and six of dollars print back exactly as floats.
    return {
        "accelerator_seconds": float(usage.accelerator_seconds),
        "cost_usd": float(usage.cost_usd),
    }


def usage_report(
    store: LedgerStore,
    *,
    now: datetime,
    since: datetime | None,
    until: datetime | None,
    tenants: Sequence[str],
) -> list[TenantReport]:
    """Per tenant (every tenant with usage, or exactly ``tenants``), usage by pool and instance type."""
    rows = store.usage_rows(now=now, since=since, until=until, tenants=list(tenants) or None)
    by_tenant: dict[str, list[UsageRow]] = {tenant: [] for tenant in tenants}
    for row in rows:
        by_tenant.setdefault(row.tenant, []).append(row)
    return [TenantReport(tenant, by_tenant[tenant]) for tenant in sorted(by_tenant)]


@ledger.command()
@click.option("--tenant", "tenants", multiple=True, help="Tenant to report (repeatable); default: all.")
@click.option(
    "--since", help="Start (ISO-8601; UTC unless it has an offset); default: the start of this month."
)
@click.option("--until", help="End, exclusive (ISO-8601); default: now.")
@click.option("--month", help="A calendar month, YYYY-MM, in --timezone (instead of --since/--until).")
@click.option(
    "--timezone", "zone", default="UTC", show_default=True, help="Where the month starts (IANA name)."
)
@click.option(
    "--output", "--format", "-o", "output", type=click.Choice(["text", "csv", "json", "markdown"]), default="text",
    show_default=True, help="text for people; csv, json or markdown: the invoice.",
)  # fmt: skip
def report(tenants: tuple[str, ...], output: str, **window: str | None) -> None:
    """GPU usage and cost per tenant for a period; csv, json and markdown are invoices: per pool,
    instance type, region and price, with instance-hours, accelerator-seconds, unit price, pricing
    model, price source and date, currency, subtotal, total and a month-end forecast.

    \b
    Example:
      parkbrake ledger report --tenant research --month 2026-11 --timezone Europe/Berlin --format markdown
    """
    from guardrails.invoice import invoices_csv, invoices_markdown
    from lambdas.ledger.store import store_from_environment

    now = datetime.now(UTC)
    start, end, month_end = report_window(now, **window)
    store = store_from_environment()
    try:
        reports = usage_report(store, now=now, since=start, until=end, tenants=tenants)
        invoices = tenant_invoices(
            store, now=now, since=start, until=end, month_end=month_end, tenants=tenants
        )
    finally:
        store.close()
    if output == "csv":
        click.echo(invoices_csv(invoices), nl=False)
    elif output == "markdown":
        click.echo(invoices_markdown(invoices))
    elif output == "json":
        billed = {invoice.tenant: invoice.as_dict() for invoice in invoices}
        document = [r.as_dict() | {"invoice": billed.get(r.tenant)} for r in reports]
        click.echo(
            json.dumps({"since": start.isoformat(), "until": end.isoformat(), "tenants": document}, indent=2)
        )
    else:
        print_report(reports, start, end)


def report_window(
    now: datetime, *, since: str | None, until: str | None, month: str | None, zone: str | None
) -> tuple[datetime, datetime, datetime]:
    """``[start, end)`` of the report and the end of the month it starts in (for the forecast)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        where = ZoneInfo(zone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(f"--timezone: {zone!r} is not an IANA time zone (Europe/Berlin, UTC)") from None
    local_now = now.astimezone(where)
    if month is not None:
        if since or until:
            raise InputError("--month: give either --month or --since/--until, not both")
        try:
            first = datetime.strptime(month, "%Y-%m").replace(tzinfo=where)
        except ValueError:
            raise InputError(f"--month: {month!r} is not a month (YYYY-MM)") from None
        start, end = first, _next_month(first)
    else:
        first = local_now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        start = parse_instant(since, "--since") if since else first
        end = parse_instant(until, "--until") if until else now
    if end <= start:
        raise InputError(f"--until ({end.isoformat()}) must be after --since ({start.isoformat()})")
    local_start = start.astimezone(where)
    return start, end, _next_month(local_start.replace(day=1, hour=0, minute=0, second=0, microsecond=0))


def _next_month(first: datetime) -> datetime:
    return first.replace(year=first.year + first.month // 12, month=first.month % 12 + 1)


def tenant_invoices(
    store: LedgerStore,
    *,
    now: datetime,
    since: datetime,
    until: datetime,
    month_end: datetime,
    tenants: Sequence[str],
) -> list[Invoice]:
    """One invoice per tenant; while its month is running, with the month-end forecast at the current burn."""
    from guardrails.invoice import Invoice, month_end_forecast

    lines = store.invoice_lines(
        now=now, since=since, until=min(until, month_end), tenants=list(tenants) or None
    )
    by_tenant: dict[str, list[Any]] = {tenant: [] for tenant in tenants}
    for line in lines:
        by_tenant.setdefault(line.tenant, []).append(line)
    burns = {}
    if since <= now < month_end:
        burns = {
            s.tenant: s.totals.burn_usd_per_hour for s in store.runways(now=now, default_cap=timedelta(0))
        }
    invoices = []
    for tenant in sorted(by_tenant):
        invoice = Invoice(tenant, since, until, tuple(by_tenant[tenant]))
        if tenant in burns:
            forecast = month_end_forecast(invoice.total_usd, burns[tenant], now, month_end)
            invoice = replace(invoice, forecast_usd=forecast)
        invoices.append(invoice)
    return invoices


def print_report(reports: Sequence[TenantReport], start: datetime, end: datetime) -> None:
    from rich.table import Table

    from cli.console import console

    table = Table(title=f"GPU usage {start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} UTC")
    for column in ("tenant", "pool", "instance type", "accelerator-hours", "cost (USD)"):
        table.add_column(column, justify="right" if "(" in column or "hours" in column else "left")
    for tenant_report in reports:
        for row in tenant_report.rows:
            table.add_row(row.tenant, row.pool, row.instance_type, *_cells(row.usage))
        total = tenant_report.total().get(None)
        if total is not None:
            table.add_row(tenant_report.tenant, "[b]total[/b]", "", *_cells(total), end_section=True)
    console().print(table)


def _cells(usage: Usage) -> tuple[str, str]:
    hours = usage.accelerator_seconds / 3600
    return f"{hours:,.3f}", f"{usage.cost_usd:,.2f}"


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


@ledger.command()
@click.option("--tenant", "tenants", multiple=True, help="Tenant to show (repeatable); default: all.")
@output_option
def runway(tenants: tuple[str, ...], output: str) -> None:
    """Each tenant's budget: spent, committed to running hosts' caps, remaining, burn rate, runway.

    \b
    Example:
      parkbrake ledger runway --tenant research
    """
    statuses = tenant_runways(now=datetime.now(UTC), tenants=list(tenants) or None)
    if output == "json":
        click.echo(json.dumps([status.as_dict() for status in statuses], indent=2))
        return
    print_runways(statuses)


def print_runways(statuses: Sequence[TenantRunway]) -> None:
    from rich.table import Table

    from cli.console import console
    from guardrails.durations import format_duration

    table = Table(title="Budgets and runway")
    columns = ("tenant", "budget", "spent", "committed", "remaining", "burn /h", "runway", "GPUs")
    for column in columns:
        table.add_column(column, justify="left" if column == "tenant" else "right")
    for status in statuses:
        limit, remaining, runway_left = status.budget.limit_usd, status.remaining_usd, status.runway
        table.add_row(
            status.tenant,
            "-" if limit is None else f"{limit:,.2f} /{status.budget.period}",
            f"{status.spent_usd:,.2f}",
            f"{status.committed_usd:,.2f}",
            "-" if remaining is None else f"{remaining:,.2f}",
            f"{status.totals.burn_usd_per_hour:,.2f}",
            "∞" if runway_left is None else format_duration(runway_left),
            str(status.totals.running_accelerators),
        )
    console().print(table)


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
    from lambdas.aws.clients import client
    from lambdas.ledger.replay import replay_dead_letters
    from lambdas.ledger.store import store_from_environment

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
            f"replayed {result.read} messages: {result.meter.inserted} appended, {result.deleted} deleted"
        )
        for problem in result.kept:
            click.echo(f"kept {problem['message_id']}: {problem['reason']}", err=True)
    if result.kept:
        click.get_current_context().exit(1)


@ledger.command()
@click.option("--tenant", required=True, help="Who pays.")
@click.option("--instance-type", required=True, help="The instance type of the hosts about to start.")
@click.option("--count", default=1, show_default=True, type=click.IntRange(1, 10_000), help="How many hosts.")
@click.option("--max-runtime", required=True, help="Each host's cap (90m, 2h): what it can cost at most.")
@click.option(
    "--lease", default="30m", show_default=True, help="How long the money is held for hosts to start."
)
@output_option
def admit(tenant: str, output: str, **flags: Any) -> None:
    """Reserve what COUNT hosts can cost before starting them: exit 0 with the reservation id, or 1
    with what remains and what is needed. For any launcher (workflow engine, CI) that starts GPUs.

    \b
    Example:
      parkbrake ledger admit --tenant research --instance-type g5.xlarge --count 2 --max-runtime 2h
    """
    from guardrails.durations import DurationError, parse_duration
    from guardrails.launch import AdmissionRequest
    from lambdas.ledger.store import store_from_environment

    instance_type, count = str(flags["instance_type"]), int(flags["count"])
    problems, durations = [], {}
    for option, text in (("--max-runtime", flags["max_runtime"]), ("--lease", flags["lease"])):
        try:
            durations[option] = parse_duration(text)
        except DurationError as error:
            problems.append(f"{option}: {error}")
    if problems:
        raise InputError("invalid admission:\n  " + "\n  ".join(problems))
    store = store_from_environment()
    try:
        admission = store.admit(
            AdmissionRequest(tenant, instance_type, count, durations["--max-runtime"]),
            now=datetime.now(UTC),
            default_cap=metering_settings(os.environ).default_max_runtime,
            lease=durations["--lease"],
        )
    finally:
        store.close()
    if output == "json":
        click.echo(json.dumps({"tenant": tenant} | admission.as_dict()))
    elif admission.granted:
        held = f"reservation {admission.reservation_id}" if admission.reservation_id else "nothing to reserve"
        click.echo(f"granted: {held} (${admission.needed_usd:.2f} for {count} x {instance_type})")
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
@click.argument("tenant")
@click.option("--limit-usd", required=True, help="The hard limit for each period, in USD.")
@click.option(
    "--period",
    type=click.Choice(["day", "week", "month"]),
    default="month",
    show_default=True,
    help="The budget period the limit applies to.",
)
@click.option(
    "--soft", default="50,80,90", show_default=True, help="Percentages of the limit at which to notify."
)
@click.option(
    "--actions", default="notify,deny", show_default=True,
    help="What the budget does: notify (SNS at thresholds), deny (refuse new work), stop (stop hosts at the limit).",
)  # fmt: skip
@output_option
def set_budget(tenant: str, output: str, **flags: str) -> None:
    """Set TENANT's budget per period and the actions it takes (replacing any earlier budget).

    \b
    Example:
      parkbrake ledger budget research --limit-usd 5000 --period month
    """
    from lambdas.ledger.store import store_from_environment

    new_budget = parse_budget(tenant, **flags)
    store = store_from_environment()
    try:
        store.set_budget(new_budget)
    finally:
        store.close()
    actions = sorted(new_budget.actions)
    if output == "json":
        summary = {
            "tenant": tenant,
            "period": new_budget.period,
            "limit_usd": float(new_budget.limit_usd or 0),
            "soft_thresholds": [float(threshold) for threshold in new_budget.soft_thresholds],
            "actions": actions,
        }
        click.echo(json.dumps(summary))
    else:
        percentages = ", ".join(f"{threshold:.0%}" for threshold in new_budget.soft_thresholds)
        click.echo(
            f"{tenant}: {new_budget.limit_usd:,.2f} USD per {new_budget.period}, "
            f"notify at {percentages or 'the limit only'}, actions: {', '.join(actions) or 'none'}"
        )


def parse_budget(tenant: str, *, limit_usd: str, period: str, soft: str, actions: str) -> Budget:
    """A Budget from the flags; every problem is reported at once."""
    from guardrails.runway import ACTIONS, PERIODS, Budget

    problems = []
    limit = Decimal(0)
    try:
        limit = Decimal(limit_usd)
        if not limit.is_finite() or limit <= 0:
            problems.append(f"--limit-usd: {limit_usd!r} must be a positive amount")
    except InvalidOperation:
        problems.append(f"--limit-usd: {limit_usd!r} is not a number")
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
    )
