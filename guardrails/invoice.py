"""An invoice a finance team accepts: per tenant and period, one line per pool, instance type,
region and price, each with the instance-hours billed, the accelerator-seconds used, the unit price
with its pricing model, source and date, and the subtotal; the total, and a month-end forecast at
the current burn. Amounts are exact (the ledger's Σ price × milliseconds) and rounded once per
figure, to the micro-dollar; every rendering (text, csv, json, markdown, FOCUS) prints those same
figures, late lines included, so each tells one total.

An invoice of a month that is not closed yet is a draft (``status`` ``draft``) and may still change;
a closed month's is ``final`` (lambdas.ledger.closes). Either way its id is the tenant and the
month (``research-2026-11``), and every line names the month its usage belongs to."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from guardrails.csv_cells import text_cell
from guardrails.ledger import MS_PER_HOUR, seconds, usd

CURRENCY = "USD"
FALLBACK = "on-demand fallback"  # the price basis of spot time priced on demand
DRAFT, FINAL = "draft", "final"
CSV_COLUMNS = (
    "invoice_id", "status", "tenant", "period_start", "period_end", "timezone", "pool", "instance_type",
    "account", "region", "pricing_model", "instance_hours", "accelerator_seconds", "unit_price_usd_per_hour",
    "price_source", "price_valid_from", "price_basis", "currency", "subtotal_usd", "late", "service_period",
)  # fmt: skip
# Written as numbers (exact decimal digits); every other cell is text (guardrails.csv_cells).
AMOUNT_COLUMNS = frozenset(
    {"instance_hours", "accelerator_seconds", "unit_price_usd_per_hour", "subtotal_usd"}
)
# RFC 4180's line end: Python's csv writer then quotes a cell holding a carriage return too (with
# "\n" alone it writes one bare, and the row splits where a reader meets it).
CSV_LINE_END = "\r\n"
FORECAST_BASIS = (
    "what is billed in the period so far, late lines included, plus the current burn to the period's end"
)


@dataclass(frozen=True)
class InvoiceLine:
    tenant: str
    pool: str
    instance_type: str
    region: str
    pricing_model: str  # on-demand or spot (guardrails.ledger.ON_DEMAND, SPOT)
    usd_per_hour: Decimal | None  # None: unpriced (metered, not yet billable)
    price_source: str | None
    price_valid_from: datetime | None  # None: the key's first price, in effect since always
    billed_ms: int  # instance time billed: per second, 60 s minimum per start
    accelerator_ms: int
    usd_hour_ms: Decimal
    # Which price: on-demand, spot (the zone's), or "on-demand fallback" (spot time the zone had no
    # spot price for, priced on demand); None: unpriced.
    price_basis: str | None = None
    # A late line bills usage of an earlier, closed month (its service period, YYYY-MM) that arrived
    # after the close: the difference between what that month billed and what it bills now
    # (lambdas.ledger.closes). A regular line's service period is its invoice's month (None: a window
    # that is not a month).
    late: bool = False
    service_period: str | None = None
    # The AWS account its hosts ran in (the events' account: docs/ledger.md, *Accounts*); '' the
    # ledger's own. A tenant that spans accounts has a line per account.
    account: str = ""

    @property
    def instance_hours(self) -> Decimal:
        return Decimal(self.billed_ms) / MS_PER_HOUR

    @property
    def subtotal_usd(self) -> Decimal:
        return usd(self.usd_hour_ms)

    def as_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "instance_type": self.instance_type,
            "account": self.account,
            "region": self.region,
            "pricing_model": self.pricing_model,
            "instance_hours": str(self.instance_hours.quantize(Decimal("0.000001"))),
            "accelerator_seconds": str(seconds(self.accelerator_ms)),
            "unit_price_usd_per_hour": None if self.usd_per_hour is None else str(self.usd_per_hour),
            "price_source": self.price_source,
            "price_valid_from": self.price_valid_from.isoformat() if self.price_valid_from else None,
            "price_basis": self.price_basis,
            "currency": CURRENCY,
            "subtotal_usd": str(self.subtotal_usd),
            "late": self.late,
            "service_period": self.service_period,
        }


@dataclass(frozen=True)
class Invoice:
    tenant: str
    since: datetime  # what the report covers: [since, until)
    until: datetime
    lines: tuple[InvoiceLine, ...]
    # The period's total at the current burn (FORECAST_BASIS); None: the period has ended.
    forecast_usd: Decimal | None = None
    zone: str = "UTC"  # the IANA zone the period's bounds are in (the tenant's budget's)
    draft: bool = False  # its month is not closed: the invoice may still change
    # The billing period (the month) the report falls in; None: [since, until) itself.
    billing_period: tuple[datetime, datetime] | None = None
    # The bounds each closed month had when it closed (its own zone's), by YYYY-MM: where a late
    # line's usage was charged.
    closed_periods: tuple[tuple[str, datetime, datetime], ...] = ()

    def service_bounds(self, period: str) -> tuple[datetime, datetime] | None:
        """The bounds ``period`` closed with, if it is one of ``closed_periods``."""
        return next(((since, until) for name, since, until in self.closed_periods if name == period), None)

    @property
    def period_start(self) -> datetime:
        return (self.billing_period or (self.since, self.until))[0]

    @property
    def period_end(self) -> datetime:
        return (self.billing_period or (self.since, self.until))[1]

    @property
    def status(self) -> str:
        return DRAFT if self.draft else FINAL

    @property
    def invoice_id(self) -> str:
        """The tenant and the billing period's month: the same id for the draft and the closed invoice."""
        return f"{self.tenant}-{self.period_start.astimezone(ZoneInfo(self.zone)):%Y-%m}"

    @property
    def total_usd(self) -> Decimal:
        return usd(sum((line.usd_hour_ms for line in self.lines), Decimal(0)))

    @property
    def unpriced_hours(self) -> Decimal:
        return sum((line.instance_hours for line in self.lines if line.usd_per_hour is None), Decimal(0))

    def as_dict(self) -> dict[str, Any]:
        return {
            "invoice_id": self.invoice_id,
            "status": self.status,
            "tenant": self.tenant,
            "period_start": self.since.isoformat(),
            "period_end": self.until.isoformat(),
            "timezone": self.zone,
            "billing_period_start": self.period_start.isoformat(),
            "billing_period_end": self.period_end.isoformat(),
            "currency": CURRENCY,
            "lines": [line.as_dict() for line in self.lines],
            "total_usd": str(self.total_usd),
            "unpriced_instance_hours": str(self.unpriced_hours.quantize(Decimal("0.000001"))),
            "forecast_month_end_usd": None if self.forecast_usd is None else str(self.forecast_usd),
            "forecast_basis": None if self.forecast_usd is None else FORECAST_BASIS,
        }


def month_end_forecast(
    spent_usd: Decimal, burn_usd_per_hour: Decimal, now: datetime, month_end: datetime
) -> Decimal:
    """What the month comes to if the hosts running now keep running to its end: ``spent_usd`` is
    what the period has billed so far, late lines included (FORECAST_BASIS)."""
    hours_left = max(Decimal(0), Decimal((month_end - now).total_seconds()) / 3600)
    return (spent_usd + burn_usd_per_hour * hours_left).quantize(Decimal("0.000001"))


def invoices_csv(invoices: Sequence[Invoice]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=CSV_LINE_END)
    writer.writerow(CSV_COLUMNS)
    for invoice in invoices:
        for line in invoice.lines:
            fields = line.as_dict() | {
                "invoice_id": invoice.invoice_id,
                "status": invoice.status,
                "tenant": invoice.tenant,
                "period_start": invoice.since.isoformat(),
                "period_end": invoice.until.isoformat(),
                "timezone": invoice.zone,
            }
            writer.writerow([_csv_cell(column, fields[column]) for column in CSV_COLUMNS])
    return buffer.getvalue()


def _csv_cell(column: str, value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return value if column in AMOUNT_COLUMNS else text_cell(str(value))


def invoices_json(invoices: Sequence[Invoice]) -> str:
    return json.dumps([invoice.as_dict() for invoice in invoices], indent=2)


def invoices_markdown(invoices: Sequence[Invoice]) -> str:
    parts = []
    for invoice in invoices:
        where = ZoneInfo(invoice.zone)
        since, until = invoice.since.astimezone(where), invoice.until.astimezone(where)
        parts.append(
            f"## {invoice.tenant}: {since:%Y-%m-%d %H:%M %Z} to {until:%Y-%m-%d %H:%M %Z} ({invoice.zone})\n\n"
            f"Invoice {invoice.invoice_id}, {_status_words(invoice)}\n\n"
            "| pool | instance type | region | pricing | instance-hours | accelerator-seconds | unit price (USD/h) "
            "| price source (from) | subtotal (USD) | late (service period) |\n|---|---|---|---|--:|--:|--:|---|--:|---|"
        )
        for line in invoice.lines:
            fields = line.as_dict()
            price = fields["unit_price_usd_per_hour"] or "unpriced"
            source = f"{fields['price_source'] or '-'} ({fields['price_valid_from'] or 'first price'})"
            if line.price_basis == FALLBACK:
                source += f", {FALLBACK}"
            parts.append(
                f"| {_md(line.pool)} | {_md(line.instance_type)} | {_md(line.region)} | {line.pricing_model} "
                f"| {fields['instance_hours']} | {fields['accelerator_seconds']} | {price} | {_md(source)} "
                f"| {fields['subtotal_usd']} "
                f"| {f'late ({line.service_period})' if line.late else ''} |"
            )
        parts.append(f"\n**Total: {invoice.total_usd} {CURRENCY}**")
        if invoice.unpriced_hours:
            parts.append(
                f"\n{invoice.unpriced_hours:.6f} instance-hours are unpriced (no price recorded yet)."
            )
        if invoice.forecast_usd is not None:
            parts.append(f"\nMonth-end forecast: {invoice.forecast_usd} {CURRENCY} ({FORECAST_BASIS}).")
        parts.append("")
    return "\n".join(parts)


def _md(text: str) -> str:
    """A table cell's text: a ``|`` in a pool or price source must not start a new cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _status_words(invoice: Invoice) -> str:
    return (
        "**draft**: the month is not closed and may still change"
        if invoice.draft
        else "final: the month is closed"
    )
