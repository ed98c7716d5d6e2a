"""Closed periods: a tenant's invoice for a month, kept exactly as it was when the month closed.

``parkbrake ledger close`` (or the reconciler, once ``guardrails.close_grace`` has passed) snapshots the
invoice lines of a month in the tenant's budget time zone into ``period_closes`` and
``closed_invoice_lines`` (append-only: migration 0022), and logs a ``period-close`` decision with
its actor. From then on the month's report is the snapshot, whatever arrives later.

Usage of a closed month that arrives after the close (a backfill, a late event, a reconciler's
repair) is billed in the first open month after it, as lines marked late with their own service
period: what the month would bill now minus everything already billed for it (its own snapshot and
late lines of later closed months). So the sum of every month's invoice is the live total, always.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from guardrails.decisions import Decision
from guardrails.durations import format_duration
from guardrails.errors import InputError
from guardrails.invoice import Invoice, InvoiceLine
from guardrails.runway import DEFAULT_TIMEZONE, period_bounds
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore, invoice_line

CLOSE_KIND = "period-close"
PERIOD = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])")

CLOSES = """
SELECT tenant, period, zone, since, until, closed_at, actor FROM period_closes
WHERE (%(tenants)s::text[] IS NULL OR tenant = ANY(%(tenants)s::text[]))
ORDER BY tenant, period
"""
LINE_COLUMNS = (
    "pool, instance_type, region, account, pricing_model, usd_per_hour, price_source, price_valid_from, price_basis, "
    "billed_ms, accelerator_ms, usd_hour_ms, late, service_period"
)
SNAPSHOT = (
    f"SELECT {LINE_COLUMNS} FROM closed_invoice_lines WHERE tenant = %s AND period = %s ORDER BY line_no"
)
# Everything already billed for a service period: its own close's lines and later closes' late lines.
BILLED_FOR = f"SELECT {LINE_COLUMNS} FROM closed_invoice_lines WHERE tenant = %s AND service_period = %s"
RECORD_CLOSE = """
INSERT INTO period_closes (tenant, period, zone, since, until, closed_at, actor)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (tenant, period) DO NOTHING
RETURNING 1
"""
RECORD_LINE = f"""
INSERT INTO closed_invoice_lines (tenant, period, line_no, {LINE_COLUMNS})
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""


def parse_period(text: str, option: str = "--period") -> str:
    if PERIOD.fullmatch(text.strip()) is None:
        raise InputError(f"{option}: {text!r} is not a month; give YYYY-MM, e.g. {option} 2026-11")
    return text.strip()


def period_window(period: str, zone: str) -> tuple[datetime, datetime]:
    """``[start, end)`` of the month ``period`` in ``zone`` (the budgets' own months), in UTC."""
    year, month = (int(part) for part in period.split("-"))
    return period_bounds("month", datetime(year, month, 15, 12, tzinfo=ZoneInfo(zone)), zone)


def open_bounds(
    tenant: str, period: str, zone: str, closes: dict[tuple[str, str], PeriodClose]
) -> tuple[datetime, datetime]:
    """``[since, until)`` of ``tenant``'s month ``period`` that is not closed: the month in ``zone``,
    except that it starts where a closed month before it ended and ends where a closed month after it
    began, whatever zone each was closed in. So a budget zone changed after a close neither bills an
    instant twice (a zone east of the close's) nor loses one (west of it): the periods tile time."""
    return between_closes(tenant, period, period_window(period, zone), closes)


def between_closes(
    tenant: str,
    period: str,
    window: tuple[datetime, datetime],
    closes: dict[tuple[str, str], PeriodClose],
) -> tuple[datetime, datetime]:
    """``window`` (``period``'s own bounds in some zone) moved to start where ``tenant``'s closed month
    before it ended and end where its closed month after it began (see :func:`open_bounds`)."""
    before, after = closes.get((tenant, previous_period(period))), closes.get((tenant, next_period(period)))
    return (window[0] if before is None else before.until), (window[1] if after is None else after.since)


def period_of(moment: datetime, zone: str) -> str:
    return moment.astimezone(ZoneInfo(zone)).strftime("%Y-%m")


def next_period(period: str) -> str:
    year, month = (int(part) for part in period.split("-"))
    return f"{year + month // 12:04d}-{month % 12 + 1:02d}"


def previous_period(period: str) -> str:
    year, month = (int(part) for part in period.split("-"))
    return f"{year - (month == 1):04d}-{(month - 2) % 12 + 1:02d}"


@dataclass(frozen=True)
class PeriodClose:
    tenant: str
    period: str
    zone: str
    since: datetime
    until: datetime
    closed_at: datetime
    actor: str


@dataclass(frozen=True)
class CloseOutcome:
    close: PeriodClose
    invoice: Invoice
    outcome: str  # closed, already-closed, or would-close (a dry run)

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.close.tenant,
            "period": self.close.period,
            "timezone": self.close.zone,
            "outcome": self.outcome,
            "closed_at": self.close.closed_at.isoformat(),
            "actor": self.close.actor,
            "lines": len(self.invoice.lines),
            "late_lines": sum(line.late for line in self.invoice.lines),
            "total_usd": str(self.invoice.total_usd),
        }


def _line_key(line: InvoiceLine) -> tuple[Any, ...]:
    return (
        line.pool,
        line.instance_type,
        line.region,
        line.account,
        line.pricing_model,
        line.usd_per_hour,
        line.price_source,
        line.price_valid_from,
        line.price_basis,
    )


def late_lines(
    live: Iterable[InvoiceLine], billed: Iterable[InvoiceLine], service_period: str
) -> list[InvoiceLine]:
    """What a closed month bills now (``live``) minus what was billed for it (``billed``), per pool,
    type, region and price: the late lines, marked with their service period. Negative where a late
    event shortened what was billed (a stop that arrived after the close): a credit."""
    difference: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0, 0, Decimal(0)])
    templates: dict[tuple[Any, ...], InvoiceLine] = {}
    for sign, lines in ((1, live), (-1, billed)):
        for line in lines:
            key = _line_key(line)
            templates.setdefault(key, line)
            amounts = difference[key]
            amounts[0] += sign * line.billed_ms
            amounts[1] += sign * line.accelerator_ms
            amounts[2] += sign * line.usd_hour_ms
    return [
        replace(
            templates[key],
            billed_ms=billed_ms,
            accelerator_ms=accelerator_ms,
            usd_hour_ms=usd_hour_ms,
            late=True,
            service_period=service_period,
        )
        for key, (billed_ms, accelerator_ms, usd_hour_ms) in sorted(difference.items(), key=_sort_key)
        if billed_ms or accelerator_ms or usd_hour_ms
    ]


def _sort_key(item: tuple[tuple[Any, ...], Any]) -> tuple[str, ...]:
    return tuple("" if part is None else str(part) for part in item[0])


class PeriodCloses:
    """The closes of ``store``'s database, on its connections."""

    def __init__(self, store: LedgerStore) -> None:
        self._store = store

    def closes(self, tenants: Sequence[str] | None = None) -> dict[tuple[str, str], PeriodClose]:
        """Every close (of ``tenants``), by tenant and period."""
        with self._store.connections.connection() as connection:
            rows = connection.execute(CLOSES, {"tenants": list(tenants) if tenants else None}).fetchall()
        return {(row[0], row[1]): PeriodClose(*row) for row in rows}

    def _lines(self, query: str, tenant: str, period: str) -> list[InvoiceLine]:
        with self._store.connections.connection() as connection:
            rows = connection.execute(query, (tenant, period)).fetchall()
        return [invoice_line(tenant, row) for row in rows]

    def snapshot(self, close: PeriodClose) -> Invoice:
        """The invoice exactly as it was closed."""
        lines = self._lines(SNAPSHOT, close.tenant, close.period)
        return Invoice(close.tenant, close.since, close.until, tuple(lines))

    def invoice(
        self,
        *,
        tenant: str,
        period: str,
        zone: str,
        now: datetime,
        closes: dict[tuple[str, str], PeriodClose],
    ) -> tuple[Invoice, PeriodClose | None]:
        """``tenant``'s invoice for ``period``: its snapshot when closed; else computed live in
        ``zone``, with the late lines of every closed month whose first open month it is."""
        if (tenant, period) in closes:
            close = closes[tenant, period]
            return self.snapshot(close), close
        since, until = open_bounds(tenant, period, zone, closes)
        own = self._store.invoice_lines(now=now, since=since, until=until, tenants=[tenant])
        lines = [replace(line, service_period=period) for line in own]
        lines += self.late_lines_for(tenant=tenant, period=period, now=now, closes=closes)
        return Invoice(tenant, since, until, tuple(lines)), None

    def late_lines_for(
        self, *, tenant: str, period: str, now: datetime, closes: dict[tuple[str, str], PeriodClose]
    ) -> list[InvoiceLine]:
        """The late lines the open ``period`` bills: for each closed month whose first open month it
        is, that month live (in its close's own bounds) minus everything billed for it."""
        lines = []
        for (owner, service), close in sorted(closes.items()):
            if owner != tenant or service >= period or _first_open_after(tenant, service, closes) != period:
                continue
            live = self._store.invoice_lines(now=now, since=close.since, until=close.until, tenants=[tenant])
            lines += late_lines(live, self._lines(BILLED_FOR, tenant, service), service)
        return lines

    def close_empty_with(
        self, tenant: str, close: PeriodClose, *, now: datetime, actor: str, reason: str
    ) -> bool:
        """Close ``close``'s month for ``tenant`` too, as that close billed it: nothing (the tenant had
        no usage of it then). For usage moved to ``tenant`` after the month closed for the tenant it
        was billed to: the month stays as it was billed, and ``tenant``'s first open month bills the
        usage late. False: closed already."""
        latecomer = replace(close, tenant=tenant, closed_at=now, actor=actor)
        empty = Invoice(tenant, close.since, close.until, ())
        if not self._record(latecomer, empty):
            return False
        self._log([CloseOutcome(latecomer, empty, "closed")], reason=reason)
        return True

    def close(
        self,
        *,
        period: str,
        zones: dict[str, str],
        now: datetime,
        actor: str,
        dry_run: bool = False,
        reason: str = "closed by a person",
    ) -> list[CloseOutcome]:
        """Close ``period`` for each tenant of ``zones`` (tenant → budget time zone): snapshot its
        invoice and log the decision. A tenant whose period is closed already is answered as such,
        unchanged; a period that has not ended in the tenant's zone is refused."""
        closes = self.closes(list(zones))
        outcomes = []
        for tenant, zone in sorted(zones.items()):
            since, until = open_bounds(tenant, period, zone, closes)
            if (tenant, period) in closes:
                existing = closes[tenant, period]
                outcomes.append(CloseOutcome(existing, self.snapshot(existing), "already-closed"))
                continue
            if until > now:
                raise InputError(
                    f"--period: {period} has not ended for {tenant} ({zone}: it ends {until.isoformat()}); "
                    "close a month once it is over"
                )
            invoice, _ = self.invoice(tenant=tenant, period=period, zone=zone, now=now, closes=closes)
            close = PeriodClose(tenant, period, zone, since, until, now, actor)
            if dry_run:
                outcomes.append(CloseOutcome(close, invoice, "would-close"))
                continue
            recorded = self._record(close, invoice)
            if not recorded:  # closed meanwhile by someone else: theirs stands
                existing = self.closes([tenant])[tenant, period]
                outcomes.append(CloseOutcome(existing, self.snapshot(existing), "already-closed"))
                continue
            outcomes.append(CloseOutcome(close, invoice, "closed"))
        self._log([outcome for outcome in outcomes if outcome.outcome == "closed"], reason=reason)
        return outcomes

    def _record(self, close: PeriodClose, invoice: Invoice) -> bool:
        with self._store.connections.connection() as connection, connection.transaction():
            row = connection.execute(
                RECORD_CLOSE,
                (
                    close.tenant,
                    close.period,
                    close.zone,
                    close.since,
                    close.until,
                    close.closed_at,
                    close.actor,
                ),
            ).fetchone()
            if row is None:
                return False
            for number, line in enumerate(invoice.lines):
                connection.execute(
                    RECORD_LINE,
                    (
                        close.tenant,
                        close.period,
                        number,
                        line.pool,
                        line.instance_type,
                        line.region,
                        line.account,
                        line.pricing_model,
                        line.usd_per_hour,
                        line.price_source,
                        line.price_valid_from,
                        line.price_basis,
                        line.billed_ms,
                        line.accelerator_ms,
                        line.usd_hour_ms,
                        line.late,
                        line.service_period or close.period,
                    ),
                )
        return True

    def _log(self, outcomes: Sequence[CloseOutcome], *, reason: str) -> None:
        decisions = [
            Decision(
                CLOSE_KIND,
                outcome.close.actor,
                reason,
                outcome.close.closed_at,
                tenant=outcome.close.tenant,
                details=outcome.as_dict(),
            )
            for outcome in outcomes
        ]
        for decision in decisions:  # one origin per period: a tenant's closes of two months are two decisions
            DecisionLedger.of(self._store).append([decision], origin=f"close-{decision.details['period']}")


def _first_open_after(tenant: str, period: str, closes: dict[tuple[str, str], PeriodClose]) -> str:
    following = next_period(period)
    while (tenant, following) in closes:
        following = next_period(following)
    return following


def tenant_zones(store: LedgerStore, tenants: Sequence[str] | None, *, now: datetime) -> dict[str, str]:
    """Each tenant's budget time zone (UTC without a budget): every tenant the ledger knows, or ``tenants``."""
    runways = store.runways(now=now, default_cap=timedelta(0), tenants=list(tenants) if tenants else None)
    zones = {
        status.tenant: status.budget.timezone if status.budget.limit_usd is not None else DEFAULT_TIMEZONE
        for status in runways
    }
    return {tenant: zones.get(tenant, DEFAULT_TIMEZONE) for tenant in tenants} if tenants else zones


def close_after_grace(
    store: LedgerStore, *, now: datetime, grace: timedelta | None, actor: str = "reconciler"
) -> list[CloseOutcome]:
    """The reconciler's step: close, for every tenant, the month before the current one in its zone
    once ``grace`` has passed since it ended (nothing without a grace). Those closed already are
    left alone and not answered for: every run after the grace would find them again."""
    if grace is None:
        return []
    outcomes = []
    closes = PeriodCloses(store)
    known = closes.closes()
    by_period: dict[str, dict[str, str]] = defaultdict(dict)
    for tenant, zone in tenant_zones(store, None, now=now).items():
        previous = previous_period(period_of(now, zone))
        if (tenant, previous) not in known and open_bounds(tenant, previous, zone, known)[1] + grace <= now:
            by_period[previous][tenant] = zone
    for period, zones in sorted(by_period.items()):
        reason = f"closed after the grace of {format_duration(grace)} (guardrails.close_grace)"
        outcomes += closes.close(period=period, zones=zones, now=now, actor=actor, reason=reason)
    return outcomes
