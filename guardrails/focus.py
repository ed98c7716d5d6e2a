"""The invoices as a FOCUS 1.2 cost and usage dataset (the FinOps Foundation's FinOps Open Cost and
Usage Specification): one row per invoice line, with FOCUS's column names, so finance tools that
read the clouds' FOCUS exports read parkbrake's chargeback too.

parkbrake is the invoice issuer (it bills tenants for AWS GPU time); AWS is the provider and
publisher. The billing account is the tenant; tenant and pool travel in ``Tags`` as the hosts'
own tags name them. A late line (usage of a closed month that arrived after it closed) is a
``ChargeClass`` ``Correction``, charged in its closed month and billed in the invoice's. An
unpriced line is left out until priced (FOCUS requires a usage charge's unit price). Every line is
usage (``ChargeCategory`` ``Usage``), billed at the ledger's price with no discount, so list,
contracted, effective and billed cost are one figure. Times are
UTC, ISO 8601 with ``Z``; money and quantities exact decimals in plain digits. The column
rules checked are guardrails.focus_spec's.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal

from guardrails import tags
from guardrails.focus_spec import MANDATORY_COLUMNS
from guardrails.invoice import CURRENCY, Invoice, InvoiceLine
from guardrails.ledger import MS_PER_HOUR, SPOT

# FOCUS 1.2's mandatory columns (guardrails.focus_spec), then the conditional and recommended ones
# that apply to parkbrake's charges.
OTHER_COLUMNS = (
    "BillingAccountType", "ChargeFrequency", "ConsumedQuantity", "ConsumedUnit", "ContractedUnitPrice",
    "ListUnitPrice", "PricingCategory", "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType",
    "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceDetails", "SkuPriceId", "SubAccountId", "SubAccountName",
    "SubAccountType", "Tags",
)  # fmt: skip
COLUMNS = MANDATORY_COLUMNS + OTHER_COLUMNS
INVOICE_ISSUER = "parkbrake"
PROVIDER = "AWS"
SERVICE = "Amazon Elastic Compute Cloud"


def focus_time(moment: datetime) -> str:
    """FOCUS's date-time format: UTC, ISO 8601, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def focus_decimal(value: Decimal) -> str:
    """FOCUS's numeric format: plain digits (no positive exponent, which str() can write), and no
    sign on zero."""
    return format(value if value else abs(value), "f")


def month_bounds(period: str) -> tuple[datetime, datetime]:
    """A YYYY-MM month's inclusive start and exclusive end, UTC."""
    year, month = (int(part) for part in period.split("-"))
    start = datetime(year, month, 1, tzinfo=UTC)
    return start, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)


def sku_price_id(line: InvoiceLine) -> str:
    """Which price a line is billed at: its key and the instant that price took effect."""
    since = focus_time(line.price_valid_from) if line.price_valid_from else "first"
    return f"{line.instance_type}/{line.region}/{line.pricing_model}/{line.price_basis or 'unpriced'}@{since}"


def focus_row(invoice: Invoice, line: InvoiceLine) -> dict[str, str]:
    billed = focus_decimal(line.subtotal_usd)
    unit_price = "" if line.usd_per_hour is None else focus_decimal(line.usd_per_hour)
    hours = focus_decimal(line.instance_hours.quantize(Decimal("0.000001")))
    # A late line's charge is usage of its closed month, billed in this invoice's period.
    charged = (
        month_bounds(line.service_period)
        if line.late and line.service_period
        else (invoice.since, invoice.until)
    )
    priced = f"at {unit_price} {CURRENCY}/h" if unit_price else "unpriced (no price recorded yet)"
    return {
        "BilledCost": billed,
        "BillingAccountId": invoice.tenant,
        "BillingAccountName": invoice.tenant,
        "BillingCurrency": CURRENCY,
        "BillingPeriodEnd": focus_time(invoice.until),
        "BillingPeriodStart": focus_time(invoice.since),
        "ChargeCategory": "Usage",
        # null: a regular charge; a late line corrects an earlier, closed month (FOCUS's Correction)
        "ChargeClass": "Correction" if line.late else "",
        "ChargeDescription": f"{line.instance_type} in {line.region}, {line.pricing_model}, pool {line.pool}, {priced}"
        + (f", late usage of {line.service_period}" if line.late else ""),
        "ChargePeriodEnd": focus_time(charged[1]),
        "ChargePeriodStart": focus_time(charged[0]),
        "ContractedCost": billed,
        "EffectiveCost": billed,
        "InvoiceIssuerName": INVOICE_ISSUER,
        "ListCost": billed,
        "PricingQuantity": hours,
        "PricingUnit": "Hours",
        "ProviderName": PROVIDER,
        "PublisherName": PROVIDER,
        "ServiceCategory": "Compute",
        "ServiceName": SERVICE,
        "BillingAccountType": "Tenant",
        "ChargeFrequency": "Usage-Based",
        "ConsumedQuantity": focus_decimal(
            (Decimal(line.accelerator_ms) / MS_PER_HOUR).quantize(Decimal("0.000001"))
        ),
        "ConsumedUnit": "Accelerator-Hours",
        "ContractedUnitPrice": unit_price,
        "ListUnitPrice": unit_price,
        "PricingCategory": "Dynamic" if line.pricing_model == SPOT else "Standard",
        "RegionId": line.region,
        "RegionName": line.region,
        "ResourceId": "",  # null: a line sums every host of its pool, type, region and price
        "ResourceName": "",
        "ResourceType": "",
        "ServiceSubcategory": "Virtual Machines",
        "SkuId": line.instance_type,
        "SkuMeter": "GPU Instance Usage",
        # FOCUS-defined InstanceType; parkbrake's own properties carry FOCUS's x_ prefix
        "SkuPriceDetails": json.dumps(
            {
                "InstanceType": line.instance_type,
                "x_PricingModel": line.pricing_model,
                "x_PriceBasis": line.price_basis,
            },
            sort_keys=True,
        ),
        "SkuPriceId": sku_price_id(line),
        "SubAccountId": line.pool,
        "SubAccountName": line.pool,
        "SubAccountType": "Pool",
        "Tags": json.dumps({tags.TENANT: invoice.tenant, tags.POOL: line.pool}, sort_keys=True),
    }


def unpriced_lines(invoices: Sequence[Invoice]) -> list[InvoiceLine]:
    return [line for invoice in invoices for line in invoice.lines if line.usd_per_hour is None]


def invoices_focus(invoices: Sequence[Invoice]) -> str:
    """The invoices' priced lines as FOCUS 1.2 CSV rows, header first. An unpriced line is not a
    charge yet: FOCUS requires a usage charge's unit prices, so it joins the dataset once priced."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for invoice in invoices:
        for line in invoice.lines:
            if line.usd_per_hour is None:
                continue
            writer.writerow(focus_row(invoice, line))
    return buffer.getvalue()
