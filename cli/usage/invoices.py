"""``parkbrake ledger report``'s engine: the invoices (guardrails.invoice) of a window or month with
their month-end forecast, and the text and JSON renderings of them (csv, markdown and FOCUS are
guardrails.invoice's and guardrails.focus's). Every rendering prints the invoices' own figures, late
lines included, so all five tell the same totals."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from guardrails.errors import InputError

if TYPE_CHECKING:
    from cli.table import Table
    from guardrails.invoice import Invoice
    from guardrails.ledger import Usage
    from lambdas.ledger.store import LedgerStore, UsageRow


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
    # Exact decimal strings, as every amount in parkbrake's JSON (docs/ledger.md, "Amounts in JSON").
    return {
        "accelerator_seconds": str(usage.accelerator_seconds),
        "cost_usd": str(usage.cost_usd),
    }


def report_window(
    now: datetime,
    *,
    since: datetime | None,
    until: datetime | None,
    month: str | None,
    zone: str | None,
) -> tuple[datetime, datetime, datetime]:
    """``[start, end)`` of the report and the end of the month it starts in (for the forecast); months
    are the budgets' own (guardrails.runway.period_bounds) in ``zone``."""
    from guardrails.runway import period_bounds
    from guardrails.time_zones import time_zone

    zone = zone or "UTC"
    where = time_zone(zone, "--timezone")
    if month is not None:
        if since or until:
            raise InputError("--month: give either --month or --since/--until, not both")
        try:
            first = datetime.strptime(month, "%Y-%m").replace(tzinfo=where)
        except ValueError:
            raise InputError(f"--month: {month!r} is not a month (YYYY-MM)") from None
        start, end = (moment.astimezone(where) for moment in period_bounds("month", first, zone))
    else:
        start = since or period_bounds("month", now, zone)[0].astimezone(where)
        end = until or now
    if end <= start:
        raise InputError(f"--until ({end.isoformat()}) must be after --since ({start.isoformat()})")
    return start, end, period_bounds("month", start, zone)[1].astimezone(where)


def zone_groups(zones: dict[str, str], tenants: Sequence[str], *, zone: str | None) -> dict[str, list[str]]:
    """Which tenants' months are in which zone: ``zone`` for all of them when given (an empty list:
    every tenant); else each tenant's own, its budget's (``zones``, as closes use), so no report
    bills a tenant's hours in a month its close already counted in another zone."""
    if zone is not None:
        return {zone: list(tenants)}
    groups: dict[str, list[str]] = defaultdict(list)
    for tenant in sorted(tenants or zones):
        groups[zones.get(tenant, "UTC")].append(tenant)
    return dict(groups) or {"UTC": list(tenants)}


def report_invoices(
    store: LedgerStore, tenants: Sequence[str], *, window: dict[str, Any], now: datetime
) -> tuple[list[Invoice], tuple[datetime, datetime, str]]:
    """The report's invoices, each tenant's month in its zone (``zone_groups``), by tenant; and the
    window and zone the report's title names (the flags' own when the tenants' zones differ). An
    unknown ``tenants`` name is an InputError (cli.usage.tenants)."""
    from cli.usage.tenants import check_known_tenants, tenant_zones

    zones = tenant_zones(store, tenants, now=now) if tenants or window["zone"] is None else {}
    check_known_tenants(store, tenants, now=now, found=set(zones))
    groups = zone_groups(zones, tenants, zone=window["zone"])
    invoices: list[Invoice] = []
    for where, members in sorted(groups.items()):
        shown, start, end = zone_invoices(store, members, window=window, zone=where, now=now)
        invoices += [invoice for invoice in shown if invoice.lines or tenants]  # named: shown even idle
    if len(groups) > 1:
        start, end, _ = report_window(now, **window)
    zone = next(iter(groups)) if len(groups) == 1 else window["zone"] or "UTC"
    return sorted(invoices, key=lambda invoice: invoice.tenant), (start, end, zone)


def account_invoices(invoices: Sequence[Invoice], accounts: Sequence[str], *, named: bool) -> list[Invoice]:
    """The invoices with only the lines of hosts in ``accounts`` (none: every line). The tenant's
    month-end forecast is left out then: it is the tenant's burn across all its accounts. An invoice
    left with no line is dropped unless its tenant was named (``named``)."""
    if not accounts:
        return list(invoices)
    kept = []
    for invoice in invoices:
        lines = tuple(line for line in invoice.lines if line.account in accounts)
        if lines or named:
            kept.append(replace(invoice, lines=lines, forecast_usd=None))
    return kept


def zone_invoices(
    store: LedgerStore, tenants: Sequence[str], *, window: dict[str, Any], zone: str, now: datetime
) -> tuple[list[Invoice], datetime, datetime]:
    """The invoices of ``tenants`` whose months are in ``zone``, as the report shows them, and the
    report's window there."""
    start, end, month_end = report_window(now, **(window | {"zone": zone}))
    if tenants and (window["month"] or not (window["since"] or window["until"])):  # a month's own bounds
        from cli.usage.closes import month_bounds

        start, end = month_bounds(store, tenants, window["month"] or f"{start:%Y-%m}", (start, end))
    invoices = tenant_invoices(store, now=now, since=start, until=end, month_end=month_end, tenants=tenants)
    period = None
    if window["month"] or not (window["since"] or window["until"]):  # a month: closes count
        from cli.usage.closes import with_closes

        period = window["month"] or f"{start:%Y-%m}"
        invoices = with_closes(store, invoices, tenants=tenants, period=period, window=(start, end), now=now)
    finished = finished_invoices(
        store, invoices, period=period, zone=zone, billing=billing_period(start, zone), now=now
    )
    return finished, start, end


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
        runways = store.runways(
            now=now, default_cap=timedelta(0), tenants=list(tenants) or None
        )  # only theirs
        burns = {status.tenant: status.totals.burn_usd_per_hour for status in runways}
    invoices = []
    for tenant in sorted(by_tenant):
        invoice = Invoice(tenant, since, until, tuple(by_tenant[tenant]))
        if tenant in burns:
            forecast = month_end_forecast(invoice.total_usd, burns[tenant], now, month_end)
            invoice = replace(invoice, forecast_usd=forecast)
        invoices.append(invoice)
    return invoices


def billing_period(start: datetime, zone: str) -> tuple[datetime, datetime]:
    """The month ``start`` falls in, in ``zone``: the billing period of a report that starts there."""
    from guardrails.runway import period_bounds
    from guardrails.time_zones import time_zone

    where = time_zone(zone, "--timezone")
    first, end = period_bounds("month", start, zone)
    return first.astimezone(where), end.astimezone(where)


def finished_invoices(
    store: LedgerStore,
    invoices: Sequence[Invoice],
    *,
    period: str | None,
    zone: str,
    billing: tuple[datetime, datetime],
    now: datetime,
) -> list[Invoice]:
    """The invoices as the report shows them. A closed month's is ``final``, in its close's zone; any
    other is a ``draft`` of ``billing`` in ``zone`` whose own lines belong to ``period`` (a line means
    the same before and after its month closes), and, while the month runs, forecasts what is billed
    in it so far, late lines included, plus the current burn (guardrails.invoice.FORECAST_BASIS)."""
    from guardrails.ledger import usd
    from lambdas.ledger.closes import PeriodCloses

    closes = PeriodCloses(store).closes([invoice.tenant for invoice in invoices] or None) if period else {}
    running = billing[0] <= now < billing[1]
    finished = []
    for invoice in invoices:
        close = closes.get((invoice.tenant, period)) if period else None
        if close is not None:
            closed = (close.since, close.until)
            finished.append(
                replace(invoice, zone=close.zone, draft=False, billing_period=closed, forecast_usd=None)
            )
            continue
        lines = tuple(
            line if line.late or period is None else replace(line, service_period=period)
            for line in invoice.lines
        )
        closed_months = tuple(
            (name, close.since, close.until)
            for (owner, name), close in sorted(closes.items())
            if owner == invoice.tenant
        )
        draft = replace(
            invoice, lines=lines, zone=zone, draft=True, billing_period=billing, closed_periods=closed_months
        )
        if running:  # tenant_invoices forecast the own lines: the late ones are billed in the period too
            own = usd(sum((line.usd_hour_ms for line in lines if not line.late), Decimal(0)))
            draft = replace(draft, forecast_usd=(invoice.forecast_usd or own) - own + draft.total_usd)
        finished.append(draft)
    return finished


def invoice_usage(invoice: Invoice) -> TenantReport:
    """The invoice's lines summed by pool and instance type (late lines included)."""
    from guardrails.ledger import Usage
    from lambdas.ledger.store import UsageRow

    sums: dict[tuple[str, str], Usage] = defaultdict(Usage)
    for line in invoice.lines:
        sums[(line.pool, line.instance_type)] += Usage(line.accelerator_ms, line.usd_hour_ms)
    rows = [UsageRow(invoice.tenant, pool, kind, usage, 0) for (pool, kind), usage in sorted(sums.items())]
    return TenantReport(invoice.tenant, rows)


def report_json(invoices: Sequence[Invoice], start: datetime, end: datetime) -> str:
    """Per tenant: its total, by pool and by instance type (all from its invoice, late lines
    included), and the invoice itself; amounts as exact decimal strings."""
    import json

    document = [
        invoice_usage(invoice).as_dict()
        | {"status": invoice.status, "timezone": invoice.zone, "invoice": invoice.as_dict()}
        for invoice in invoices
    ]
    return json.dumps({"since": start.isoformat(), "until": end.isoformat(), "tenants": document}, indent=2)


def print_invoices(invoices: Sequence[Invoice], start: datetime, end: datetime, zone: str) -> None:
    from cli.console import console
    from cli.table import print_table

    print_table(console(), invoices_table(invoices, start, end, zone))


def invoices_table(invoices: Sequence[Invoice], start: datetime, end: datetime, zone: str) -> Table:
    """The invoices as a table: a row per line (late ones marked with their month), each tenant's
    total; the period in the zone it is in, each tenant's own when their zones or periods differ."""
    from rich.text import Text

    from cli.table import Column, Table

    periods = {_period_words(invoice.since, invoice.until, invoice.zone) for invoice in invoices}
    shared = periods.pop() if len(periods) == 1 else None if periods else _period_words(start, end, zone)
    drafts = {invoice.draft for invoice in invoices}
    title = f"GPU usage {shared or 'of each tenant in its own period and zone (its total row)'}"
    if drafts == {True}:
        title += ", draft (the month is not closed)"
    # An account column once any line names one (the organisation's hub): a line per account.
    accounts = any(line.account for invoice in invoices for line in invoice.lines)
    table = Table(
        title,
        [
            Column("tenant", 0),
            Column("pool", 0),
            Column("instance type", 2),
            *([Column("account", 1)] if accounts else []),
            Column("region", 3),
            Column("pricing", 3),
            Column("accelerator-hours", 1, justify="right"),
            Column("cost (USD)", 0, justify="right"),
            Column("note", 1),
        ],
    )
    for invoice in invoices:
        for line in invoice.lines:
            hours = Decimal(line.accelerator_ms) / 3_600_000
            note = (
                f"late, {line.service_period}"
                if line.late
                else ("unpriced" if line.usd_per_hour is None else "")
            )
            table.add_row(
                invoice.tenant, line.pool, line.instance_type, *([line.account or "-"] if accounts else []),
                line.region, line.pricing_model, f"{hours:,.3f}", str(line.subtotal_usd), note,
            )  # fmt: skip
        notes = [] if shared else [_period_words(invoice.since, invoice.until, invoice.zone)]
        if invoice.draft and drafts != {True}:
            notes.append("draft")
        if invoice.forecast_usd is not None:
            notes.append(f"forecast {invoice.forecast_usd} incl. billed and late")
        blanks = [""] * (5 if accounts else 4)
        table.add_row(
            invoice.tenant, Text("total", style="bold"), *blanks, str(invoice.total_usd), "; ".join(notes)
        )
    return table


def _period_words(since: datetime, until: datetime, zone: str) -> str:
    from zoneinfo import ZoneInfo

    where = ZoneInfo(zone)
    return f"{since.astimezone(where):%Y-%m-%d %H:%M} – {until.astimezone(where):%Y-%m-%d %H:%M} {zone}"
