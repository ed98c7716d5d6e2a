"""``parkbrake ledger savings``' engine: each tenant's month in its own bounds (a closed month's as
closed, an open one's in its budget zone between its closes), the stops of it and what they avoided
(lambdas.ledger.savings), and the renderings."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guardrails.savings import Saving
    from lambdas.ledger.store import LedgerStore


def month_savings(
    store: LedgerStore, month: str, tenants: Sequence[str], now: datetime
) -> tuple[str, list[Saving]]:
    """``--month`` checked, and its savings at the stack's default cap (the meter's setting): what
    ``ledger savings`` and ``ledger report --with-savings`` show."""
    import os

    from cli.usage.budgets import metering_settings
    from lambdas.ledger.closes import parse_period

    month = parse_period(month, "--month")
    default_cap = metering_settings(os.environ).default_max_runtime
    return month, tenant_month_savings(store, month=month, tenants=tenants, default_cap=default_cap, now=now)


def tenant_month_savings(
    store: LedgerStore, *, month: str, tenants: Sequence[str], default_cap: timedelta, now: datetime
) -> list[Saving]:
    """The month's savings of ``tenants`` (default: every tenant the ledger knows), each in its bounds."""
    from lambdas.ledger.closes import PeriodCloses, open_bounds, tenant_zones
    from lambdas.ledger.savings import month_savings

    zones = tenant_zones(store, list(tenants) or None, now=now)
    closes = PeriodCloses(store).closes(list(zones) or None)
    windows: dict[tuple[datetime, datetime], list[str]] = defaultdict(list)
    for tenant, zone in sorted(zones.items()):
        close = closes.get((tenant, month))
        bounds = (close.since, close.until) if close else open_bounds(tenant, month, zone, closes)
        windows[bounds].append(tenant)
    savings: list[Saving] = []
    for (since, until), members in sorted(windows.items()):
        savings += month_savings(store, since=since, until=until, tenants=members, default_cap=default_cap)
    return sorted(
        savings, key=lambda saving: (saving.host.decided_at, saving.host.decision_id, saving.host.instance_id)
    )


def savings_document(month: str, savings: Sequence[Saving]) -> dict[str, Any]:
    from guardrails.savings import UNLOGGED, totals

    return {
        "month": month,
        "counterfactual": "until the host's next start, the period's end or one more cap, whichever is first",
        "not_counted": list(UNLOGGED),
        "totals": [row.as_dict() for row in totals(savings)],
        "stops": [saving.as_dict() for saving in savings],
        "usd": str(sum((saving.usd for saving in savings), Decimal(0))),
        "gpu_hours": str(sum((saving.gpu_hours for saving in savings), Decimal(0))),
    }


def print_savings(month: str, savings: Sequence[Saving], *, wide: bool = False) -> None:
    """The totals per tenant, pool and guardrail, then each stop with its decision id."""
    import click

    from cli.console import console
    from cli.table import Column, Table, print_table
    from guardrails.savings import UNLOGGED, totals

    table = Table(
        f"What the guardrails saved, {month}",
        [
            Column("tenant", 0),
            Column("pool", 1),
            Column("guardrail", 0),
            Column("stops", 2, justify="right"),
            Column("GPU-hours", 0, justify="right"),
            Column("USD", 0, justify="right"),
            Column("decisions", 3),
        ],
    )
    for row in totals(savings):
        ids = ", ".join(f"#{number}" for number in row.decision_ids)
        table.add_row(
            row.tenant,
            row.pool,
            row.guardrail,
            str(row.stops),
            f"{row.gpu_hours:,.2f}",
            f"{row.usd:,.2f}",
            ids,
        )
    print_table(console(), table)
    for saving in savings:
        host = saving.host
        click.echo(
            f"#{host.decision_id} {host.kind} by {host.actor} at {host.decided_at:%Y-%m-%d %H:%M} UTC: {host.instance_id} "
            f"({host.tenant}/{host.pool}, {host.instance_type}) stopped {_at(host.stopped_ms)}, would have run until "
            f"{_at(saving.avoided_until_ms)} ({saving.bound}): {saving.gpu_hours} GPU-hours, {saving.usd} USD"
        )
    click.echo(
        "Counterfactual: a stopped host would have run on until its next start, the period's end or one more cap, "
        f"whichever is first (a floor). Not counted (no per-host decision is logged): {', '.join(UNLOGGED)}."
    )


def _at(ms: int) -> str:
    from guardrails.ledger import from_ms

    return f"{from_ms(ms).astimezone(UTC):%Y-%m-%d %H:%M}"
