"""The invoices as a FOCUS cost and usage dataset (the FinOps Foundation's FinOps Open Cost and
Usage Specification), 1.3 by default and 1.2 on request: one row per invoice line, with FOCUS's
column names, so finance tools that read the clouds' FOCUS exports read parkbrake's chargeback too.

Who is who in an internal chargeback (docs/ledger.md, "FOCUS: who is who"): the platform team
running parkbrake makes AWS GPU capacity available to its tenants and bills them for it, so
parkbrake is the provider (``ProviderName``; 1.3's ``ServiceProviderName``) and the invoice issuer
(``InvoiceIssuerName``); the tenants pay parkbrake, not a third party, so ``BilledCost`` is what the
tenant is charged (FOCUS's BilledCost-C-005-C sets it to 0 only where the provider and the issuer
differ). AWS produced the instances (``PublisherName``) and hosts them (1.3's ``HostProviderName``).
The billing account is the tenant; the sub account is the AWS account the hosts ran in
(``SubAccountId`` its 12-digit id, ``SubAccountName`` its name in the organisation's account list
when one is given, else the id, ``SubAccountType`` :data:`SUB_ACCOUNT_TYPE`), so a tenant that spans
accounts has a row per account. FOCUS's subaccounttype.md (FOCUS_Spec, specification/columns, 1.2):
"a service provider-assigned name to identify the type of sub account [...] a readable display name
and not a code", null exactly when ``SubAccountId`` is: a line of the ledger's own account recorded
before accounts were (account '') has all three null. Tenant and pool travel in ``Tags`` as the
hosts' own ``parkbrake:`` tags name them (tags.md: a provider "MUST NOT alter" user-defined tag keys
or values; FOCUS's ``x_`` prefix is for custom columns, not tag keys). ``RegionId``/``RegionName``
are the region the events carry.

A line is billed at the ledger's price, the AWS price in effect (public on-demand or the zone's
spot price), with no markup or discount: list, contracted, effective and billed cost are one
figure. A late line (usage of a closed month that arrived after it closed) is a ``ChargeClass``
``Correction``, charged in its closed month and billed in the invoice's. ``BillingPeriodStart`` and
``BillingPeriodEnd`` are the billing period's bounds (the month in the tenant's zone, whether or not
it has ended), ``InvoiceId`` the tenant and month (guardrails.invoice.Invoice.invoice_id), and
``x_InvoiceStatus`` says whether the invoice is a ``draft`` (its month is open) or ``final``. An
unpriced line is left out until priced (FOCUS requires a usage charge's unit price). Times are UTC,
ISO 8601 with ``Z``; money and quantities exact decimals in plain digits; every text cell is
neutralised against spreadsheet formulas (guardrails.csv_cells). The column rules checked are
guardrails.focus_spec's; CI runs the FinOps Foundation's validator on exports (scripts/focus_validate.sh).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

from guardrails import tags
from guardrails.csv_cells import text_cell
from guardrails.focus_spec import FOCUS_1_2, FOCUS_1_3, FOCUS_VERSIONS, MANDATORY_COLUMNS, spec_columns
from guardrails.invoice import CSV_LINE_END, CURRENCY, Invoice, InvoiceLine
from guardrails.ledger import MS_PER_HOUR, SPOT

# FOCUS 1.2's mandatory columns (guardrails.focus_spec), then the conditional and recommended ones
# that apply to parkbrake's charges, then parkbrake's own (FOCUS's x_ prefix for custom columns).
OTHER_COLUMNS = (
    "BillingAccountType", "ChargeFrequency", "ConsumedQuantity", "ConsumedUnit", "ContractedUnitPrice",
    "InvoiceId", "ListUnitPrice", "PricingCategory", "RegionId", "RegionName", "ResourceId", "ResourceName",
    "ResourceType", "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceDetails", "SkuPriceId", "SubAccountId",
    "SubAccountName", "SubAccountType", "Tags",
)  # fmt: skip
CUSTOM_COLUMNS = ("x_InvoiceStatus",)
# 1.3's columns that 1.2 has not: the provider split in two (ProviderName stays, deprecated).
COLUMNS_1_3_ONLY = ("HostProviderName", "ServiceProviderName")
COLUMNS = {
    FOCUS_1_2: MANDATORY_COLUMNS + OTHER_COLUMNS + CUSTOM_COLUMNS,
    FOCUS_1_3: MANDATORY_COLUMNS + COLUMNS_1_3_ONLY + OTHER_COLUMNS + CUSTOM_COLUMNS,
}
DEFAULT_VERSION = FOCUS_1_3
PROVIDER = INVOICE_ISSUER = "parkbrake"  # the platform team that re-bills the capacity
HOST_PROVIDER = PUBLISHER = "AWS"  # who produced and hosts the instances
SERVICE = "Amazon Elastic Compute Cloud"
SUB_ACCOUNT_TYPE = "AWS Account"  # one readable display value for every sub account (subaccounttype.md)


def focus_time(moment: datetime) -> str:
    """FOCUS's date-time format: UTC, ISO 8601, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def focus_decimal(value: Decimal) -> str:
    """FOCUS's numeric format: plain digits (no positive exponent, which str() can write), and no
    sign on zero."""
    return format(value if value else abs(value), "f")


def month_bounds(period: str, zone: str = "UTC") -> tuple[datetime, datetime]:
    """A YYYY-MM month's inclusive start and exclusive end in ``zone``."""
    where = ZoneInfo(zone)
    year, month = (int(part) for part in period.split("-"))
    start = datetime(year, month, 1, tzinfo=where)
    return start, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=where)


def sku_price_id(line: InvoiceLine) -> str:
    """Which price a line is billed at: its key and the instant that price took effect."""
    since = focus_time(line.price_valid_from) if line.price_valid_from else "first"
    return f"{line.instance_type}/{line.region}/{line.pricing_model}/{line.price_basis or 'unpriced'}@{since}"


def focus_row(
    invoice: Invoice,
    line: InvoiceLine,
    version: str = DEFAULT_VERSION,
    account_names: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """One line as a FOCUS row of ``version``, every text cell neutralised (guardrails.csv_cells);
    ``account_names`` names the accounts (account id → name: the organisation's account list)."""
    row = _focus_values(invoice, line) | _sub_account_columns(line, account_names or {})
    if version == FOCUS_1_3:
        row |= {"HostProviderName": HOST_PROVIDER, "ServiceProviderName": PROVIDER}
    types = spec_columns(version)
    return {
        name: text_cell(value) if name not in types or types[name].data_type in ("String", "JSON") else value
        for name, value in row.items()
    }


def _focus_values(invoice: Invoice, line: InvoiceLine) -> dict[str, str]:
    unit_price = "" if line.usd_per_hour is None else focus_decimal(line.usd_per_hour)
    return {**_charge_columns(invoice, line, unit_price), **_sku_columns(invoice, line, unit_price)}


def _charge_columns(invoice: Invoice, line: InvoiceLine, unit_price: str) -> dict[str, str]:
    """FOCUS's mandatory columns: the charge, its period, its cost and quantity, who bills it."""
    billed = focus_decimal(line.subtotal_usd)
    hours = focus_decimal(line.instance_hours.quantize(Decimal("0.000001")))
    # A late line's charge is usage of its closed month, billed in this invoice's period.
    charged = (
        invoice.service_bounds(line.service_period) or month_bounds(line.service_period, invoice.zone)
        if line.late and line.service_period
        else (invoice.since, invoice.until)
    )
    priced = f"at {unit_price} {CURRENCY}/h" if unit_price else "unpriced (no price recorded yet)"
    return {
        "BilledCost": billed,
        "BillingAccountId": invoice.tenant,
        "BillingAccountName": invoice.tenant,
        "BillingCurrency": CURRENCY,
        "BillingPeriodEnd": focus_time(invoice.period_end),
        "BillingPeriodStart": focus_time(invoice.period_start),
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
        "PublisherName": PUBLISHER,
        "ServiceCategory": "Compute",
        "ServiceName": SERVICE,
    }


def _sku_columns(invoice: Invoice, line: InvoiceLine, unit_price: str) -> dict[str, str]:
    """FOCUS's conditional and recommended columns (the SKU and its price, the region, the pool, the tags),
    and parkbrake's own x_ column."""
    return {
        "BillingAccountType": "Tenant",
        "ChargeFrequency": "Usage-Based",
        "ConsumedQuantity": focus_decimal(
            (Decimal(line.accelerator_ms) / MS_PER_HOUR).quantize(Decimal("0.000001"))
        ),
        "ConsumedUnit": "Accelerator-Hours",
        "ContractedUnitPrice": unit_price,
        "InvoiceId": invoice.invoice_id,
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
        "Tags": json.dumps({tags.TENANT: invoice.tenant, tags.POOL: line.pool}, sort_keys=True),
        "x_InvoiceStatus": invoice.status,
    }


def _sub_account_columns(line: InvoiceLine, account_names: Mapping[str, str]) -> dict[str, str]:
    """The sub account: the AWS account the line's hosts ran in; all null for the ledger's own
    account before accounts were recorded (account '')."""
    if not line.account:
        return {"SubAccountId": "", "SubAccountName": "", "SubAccountType": ""}
    return {
        "SubAccountId": line.account,
        "SubAccountName": account_names.get(line.account) or line.account,
        "SubAccountType": SUB_ACCOUNT_TYPE,
    }


def unpriced_lines(invoices: Sequence[Invoice]) -> list[InvoiceLine]:
    return [line for invoice in invoices for line in invoice.lines if line.usd_per_hour is None]


def invoices_focus(
    invoices: Sequence[Invoice],
    version: str = DEFAULT_VERSION,
    account_names: Mapping[str, str] | None = None,
) -> str:
    """The invoices' priced lines as FOCUS CSV rows of ``version``, header first. An unpriced line
    is not a charge yet: FOCUS requires a usage charge's unit prices, so it joins once priced."""
    if version not in FOCUS_VERSIONS:
        raise ValueError(f"FOCUS {version} is not one of {', '.join(FOCUS_VERSIONS)}")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS[version], lineterminator=CSV_LINE_END)
    writer.writeheader()
    for invoice in invoices:
        for line in invoice.lines:
            if line.usd_per_hour is None:
                continue
            writer.writerow(focus_row(invoice, line, version, account_names))
    return buffer.getvalue()
