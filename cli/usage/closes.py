"""``parkbrake ledger close`` and the closed months in ``ledger report`` (lambdas.ledger.closes): a
closed month's report is its snapshot; an open month's invoice carries the late lines of the closed
months before it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from guardrails.plurals import counted

if TYPE_CHECKING:
    from guardrails.invoice import Invoice
    from lambdas.aws.environment import ClientFactory
    from lambdas.ledger.closes import CloseOutcome
    from lambdas.ledger.store import LedgerStore


def closing_now() -> datetime:
    """When a close happens (a function, so that tests can close months of their virtual clock)."""
    return datetime.now(UTC)


def caller_actor(clients: ClientFactory) -> str:
    """Who closes: the caller's ARN, as for every decision a person makes."""
    from lambdas.aws.errors import AWS_ERRORS

    try:
        return str(clients("sts", None).get_caller_identity()["Arn"])
    except AWS_ERRORS:
        return "an unknown caller of parkbrake ledger close"


def close_periods(
    store: LedgerStore,
    *,
    period: str,
    tenants: Sequence[str],
    actor: str,
    dry_run: bool,
    now: datetime,
) -> list[CloseOutcome]:
    """Close ``period`` for ``tenants`` (default: every tenant the ledger knows), each in its budget's zone."""
    from lambdas.ledger.closes import PeriodCloses, tenant_zones

    zones = tenant_zones(store, list(tenants), now=now)
    return PeriodCloses(store).close(period=period, zones=zones, now=now, actor=actor, dry_run=dry_run)


def close_summary(outcomes: Sequence[CloseOutcome]) -> list[str]:
    if not outcomes:
        return ["no tenant to close: the ledger knows none"]
    said = {"closed": "closed", "already-closed": "already closed", "would-close": "would close"}
    return [
        f"{o.close.tenant} {o.close.period} ({o.close.zone}): {said[o.outcome]}, "
        f"{counted(len(o.invoice.lines), 'line')} ({sum(line.late for line in o.invoice.lines)} late), "
        f"{o.invoice.total_usd} USD"
        + (
            f"; by {o.close.actor} at {o.close.closed_at.isoformat()}"
            if o.outcome == "already-closed"
            else ""
        )
        for o in outcomes
    ]


def with_closes(
    store: LedgerStore,
    invoices: Sequence[Invoice],
    *,
    tenants: Sequence[str],
    period: str,
    window: tuple[datetime, datetime],
    now: datetime,
) -> list[Invoice]:
    """A month's invoices as closing decides them: each closed tenant's is its snapshot, each open
    one's carries the late lines of closed months before it (a tenant with nothing but late lines
    this month included)."""
    from dataclasses import replace

    from guardrails.invoice import Invoice
    from lambdas.ledger.closes import PeriodCloses, between_closes

    closes = PeriodCloses(store)
    known = closes.closes(list(tenants) or None)
    if not known:
        return list(invoices)
    by_tenant = {invoice.tenant: invoice for invoice in invoices}
    result = []
    for tenant in sorted(set(by_tenant) | {owner for owner, _ in known}):
        close = known.get((tenant, period))
        if close is not None:
            invoice = closes.snapshot(close)
            if invoice.lines:  # closed with nothing billed: not shown, as an open month's idle tenant
                result.append(invoice)
            continue
        late = closes.late_lines_for(tenant=tenant, period=period, now=now, closes=known)
        live = by_tenant.get(tenant)
        bounds = between_closes(tenant, period, window, known)
        if bounds != window:  # its budget's zone changed since a close next to this month
            live = _between_closes(store, tenant, bounds, now=now, forecast=live)
            if not live.lines:
                live = None
        if live is None:  # nothing of its own this month: shown for its late lines only
            if not late:
                continue
            live = Invoice(tenant, *bounds, ())
        own = tuple(replace(line, service_period=period) for line in live.lines)
        result.append(replace(live, lines=own + tuple(late)))
    return result


def _between_closes(
    store: LedgerStore,
    tenant: str,
    bounds: tuple[datetime, datetime],
    *,
    now: datetime,
    forecast: Invoice | None,
) -> Invoice:
    """``tenant``'s own invoice in ``bounds``, its open month between its closes."""
    from guardrails.invoice import Invoice

    since, until = bounds
    lines = store.invoice_lines(now=now, since=since, until=until, tenants=[tenant])
    return Invoice(tenant, since, until, tuple(lines), None if forecast is None else forecast.forecast_usd)


def month_bounds(
    store: LedgerStore, tenants: Sequence[str], period: str, window: tuple[datetime, datetime]
) -> tuple[datetime, datetime]:
    """The report window of ``tenants``' month ``period``: a closed month's own bounds, an open one's
    between its closes (lambdas.ledger.closes.open_bounds) when the tenants share them; else
    ``window`` (each tenant's invoice still keeps its own, see :func:`with_closes`). In the window's
    zone, so a closed month's since and until read the same whatever the budget's zone is now."""
    from lambdas.ledger.closes import PeriodCloses, between_closes

    if not tenants:
        return window
    known = PeriodCloses(store).closes(list(tenants))
    bounds = {
        (known[tenant, period].since, known[tenant, period].until)
        if (tenant, period) in known
        else between_closes(tenant, period, window, known)
        for tenant in tenants
    }
    if len(bounds) != 1:
        return window
    since, until = bounds.pop()
    return since.astimezone(window[0].tzinfo), until.astimezone(window[1].tzinfo)
