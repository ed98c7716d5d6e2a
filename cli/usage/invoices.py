"""``parkbrake ledger report``'s engine: usage per tenant, pool and instance type in a window, and
the invoices (guardrails.invoice) with their month-end forecast."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from guardrails.errors import InputError

if TYPE_CHECKING:
    from guardrails.invoice import Invoice, InvoiceLine
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


def report_zone(store: LedgerStore, tenants: Sequence[str]) -> str:
    """The time zone the tenants' budgets share (UTC when none of them has a budget)."""
    if not tenants:
        return "UTC"
    runways = store.runways(now=datetime.now(UTC), default_cap=timedelta(0), tenants=list(tenants))
    zones = {
        status.tenant: status.budget.timezone for status in runways if status.budget.limit_usd is not None
    }
    if len(set(zones.values())) > 1:
        listed = ", ".join(f"{tenant} ({zone})" for tenant, zone in sorted(zones.items()))
        raise InputError(f"--timezone: the tenants' budgets are in different time zones: {listed}; give one")
    return next(iter(zones.values()), "UTC")


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


def print_report(
    reports: Sequence[TenantReport], start: datetime, end: datetime, *, late: Sequence[InvoiceLine] = ()
) -> None:
    """The usage table; ``late``: late lines of closed months (lambdas.ledger.closes), after the rest."""
    from rich.text import Text

    from cli.console import console
    from cli.table import Column, Table, print_table
    from guardrails.ledger import Usage

    table = Table(
        f"GPU usage {start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} UTC",
        [
            Column("tenant", 0),
            Column("pool", 0),
            Column("instance type", 2),
            Column("accelerator-hours", 1, justify="right"),
            Column("cost (USD)", 0, justify="right"),
        ],
    )
    for tenant_report in reports:
        for row in tenant_report.rows:
            table.add_row(row.tenant, row.pool, row.instance_type, *_cells(row.usage))
        total = tenant_report.total().get(None)
        if total is not None:
            table.add_row(tenant_report.tenant, Text("total", style="bold"), "", *_cells(total))
    for line in late:
        usage = Usage(line.accelerator_ms, line.usd_hour_ms)
        table.add_row(
            line.tenant, f"{line.pool} (late, {line.service_period})", line.instance_type, *_cells(usage)
        )
    print_table(console(), table)


def _cells(usage: Usage) -> tuple[str, str]:
    hours = usage.accelerator_seconds / 3600
    return f"{hours:,.3f}", f"{usage.cost_usd:,.2f}"
