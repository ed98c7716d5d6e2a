"""FOCUS 1.2's and 1.3's column rules as data, and a check of one dataset row against them.

Checked against the FinOps Foundation's FOCUS specification, release v1.2 (git tag ``v1.2``,
commit 7296e3146fb931ee32b6496fa6e4200e7f4384f7 of FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec),
its specification/columns/*.md and specification/attributes/*.md: each column's feature level, data
type, whether it allows nulls, its allowed values, and the rules that make a column null or not null
under a condition. Only the columns parkbrake can fill, and the rules that bear on them, are here.

1.3's two new columns (ServiceProviderName replacing ProviderName, which stays as deprecated, and
HostProviderName) follow the 1.3 column files specification/datasets/cost_and_usage/columns/
serviceprovidername.md (commit 085459e3bc9c6ea0d4607b6bd423a98604802219) and hostprovidername.md
(commit 03c652c35e241d7b546b77c7b07982a29376a7ea): Mandatory, String, not null (hostprovidername.md's
constraint table says "Allows nulls: True" while its requirements say "MUST NOT be null"; the
requirement is kept). The FinOps Foundation's own validator runs on real exports in CI
(scripts/focus_validate.sh); this module is the project's quick check of every row in its tests.

In CSV a null is an empty field (CSV has no other null); FOCUS forbids empty strings and placeholders
for a value, so an empty field here always means null.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Literal

MANDATORY, CONDITIONAL, RECOMMENDED = "Mandatory", "Conditional", "Recommended"
FOCUS_1_2, FOCUS_1_3 = "1.2", "1.3"
FOCUS_VERSIONS = (FOCUS_1_2, FOCUS_1_3)
CUSTOM_PREFIX = "x_"  # FOCUS's prefix for a provider's own columns
DataType = Literal["String", "Decimal", "DateTime", "JSON"]


@dataclass(frozen=True)
class FocusColumn:
    name: str
    level: str  # MANDATORY, CONDITIONAL or RECOMMENDED
    data_type: DataType
    nullable: bool  # the spec's "Allows nulls"; a conditional rule below may forbid the null
    allowed: tuple[str, ...] = ()  # non-empty: the value must be one of these
    non_negative: bool = False


CHARGE_CATEGORIES = ("Usage", "Purchase", "Tax", "Credit", "Adjustment")
CHARGE_CLASSES = ("Correction",)
CHARGE_FREQUENCIES = ("One-Time", "Recurring", "Usage-Based")
PRICING_CATEGORIES = ("Standard", "Dynamic", "Committed", "Other")
SERVICE_SUBCATEGORIES: dict[str, tuple[str, ...]] = {
    "AI and Machine Learning": ("AI Platforms", "Bots", "Generative AI", "Machine Learning", "Natural Language Processing", "Other (AI and Machine Learning)"),
    "Analytics": ("Analytics Platforms", "Business Intelligence", "Data Processing", "Search", "Streaming Analytics", "Other (Analytics)"),
    "Business Applications": ("Productivity and Collaboration", "Other (Business Applications)"),
    "Compute": ("Containers", "End User Computing", "Quantum Compute", "Serverless Compute", "Virtual Machines", "Other (Compute)"),
    "Databases": ("Caching", "Data Warehouses", "Ledger Databases", "NoSQL Databases", "Relational Databases", "Time Series Databases", "Other (Databases)"),
    "Developer Tools": ("Developer Platforms", "Continuous Integration and Deployment", "Development Environments", "Source Code Management", "Quality Assurance", "Other (Developer Tools)"),
    "Identity": ("Identity and Access Management", "Other (Identity)"),
    "Integration": ("API Management", "Messaging", "Workflow Orchestration", "Other (Integration)"),
    "Internet of Things": ("IoT Analytics", "IoT Platforms", "Other (Internet of Things)"),
    "Management and Governance": ("Architecture", "Compliance", "Cost Management", "Data Governance", "Disaster Recovery", "Endpoint Management", "Observability", "Support", "Other (Management and Governance)"),
    "Media": ("Content Creation", "Gaming", "Media Streaming", "Mixed Reality", "Other (Media)"),
    "Migration": ("Data Migration", "Resource Migration", "Other (Migration)"),
    "Mobile": ("Other (Mobile)",),
    "Multicloud": ("Multicloud Integration", "Other (Multicloud)"),
    "Networking": ("Application Networking", "Content Delivery", "Network Connectivity", "Network Infrastructure", "Network Routing", "Network Security", "Other (Networking)"),
    "Security": ("Secret Management", "Security Posture Management", "Threat Detection and Response", "Other (Security)"),
    "Storage": ("Backup Storage", "Block Storage", "File Storage", "Object Storage", "Storage Platforms", "Other (Storage)"),
    "Web": ("Application Platforms", "Other (Web)"),
    "Other": ("Other (Other)",),
}  # fmt: skip
SERVICE_CATEGORIES = tuple(SERVICE_SUBCATEGORIES)

SPEC_COLUMNS = {
    column.name: column
    for column in (
        FocusColumn("BilledCost", MANDATORY, "Decimal", nullable=False),
        FocusColumn("BillingAccountId", MANDATORY, "String", nullable=False),
        FocusColumn("BillingAccountName", MANDATORY, "String", nullable=True),
        FocusColumn("BillingAccountType", CONDITIONAL, "String", nullable=False),
        FocusColumn("BillingCurrency", MANDATORY, "String", nullable=False),
        FocusColumn("BillingPeriodEnd", MANDATORY, "DateTime", nullable=False),
        FocusColumn("BillingPeriodStart", MANDATORY, "DateTime", nullable=False),
        FocusColumn("ChargeCategory", MANDATORY, "String", nullable=False, allowed=CHARGE_CATEGORIES),
        FocusColumn("ChargeClass", MANDATORY, "String", nullable=True, allowed=CHARGE_CLASSES),
        FocusColumn("ChargeDescription", MANDATORY, "String", nullable=True),
        FocusColumn("ChargeFrequency", RECOMMENDED, "String", nullable=False, allowed=CHARGE_FREQUENCIES),
        FocusColumn("ChargePeriodEnd", MANDATORY, "DateTime", nullable=False),
        FocusColumn("ChargePeriodStart", MANDATORY, "DateTime", nullable=False),
        FocusColumn("ConsumedQuantity", CONDITIONAL, "Decimal", nullable=True),
        FocusColumn("ConsumedUnit", CONDITIONAL, "String", nullable=True),
        FocusColumn("ContractedCost", MANDATORY, "Decimal", nullable=False),
        FocusColumn("ContractedUnitPrice", CONDITIONAL, "Decimal", nullable=True, non_negative=True),
        FocusColumn("EffectiveCost", MANDATORY, "Decimal", nullable=False),
        FocusColumn("InvoiceId", RECOMMENDED, "String", nullable=True),
        FocusColumn("InvoiceIssuerName", MANDATORY, "String", nullable=False),
        FocusColumn("ListCost", MANDATORY, "Decimal", nullable=False),
        FocusColumn("ListUnitPrice", CONDITIONAL, "Decimal", nullable=True, non_negative=True),
        FocusColumn("PricingCategory", CONDITIONAL, "String", nullable=True, allowed=PRICING_CATEGORIES),
        FocusColumn("PricingQuantity", MANDATORY, "Decimal", nullable=True),
        FocusColumn("PricingUnit", MANDATORY, "String", nullable=True),
        FocusColumn("ProviderName", MANDATORY, "String", nullable=False),
        FocusColumn("PublisherName", MANDATORY, "String", nullable=False),
        FocusColumn("RegionId", CONDITIONAL, "String", nullable=True),
        FocusColumn("RegionName", CONDITIONAL, "String", nullable=True),
        FocusColumn("ResourceId", CONDITIONAL, "String", nullable=True),
        FocusColumn("ResourceName", CONDITIONAL, "String", nullable=True),
        FocusColumn("ResourceType", CONDITIONAL, "String", nullable=True),
        FocusColumn("ServiceCategory", MANDATORY, "String", nullable=False, allowed=SERVICE_CATEGORIES),
        FocusColumn("ServiceName", MANDATORY, "String", nullable=False),
        FocusColumn(
            "ServiceSubcategory",
            RECOMMENDED,
            "String",
            nullable=False,
            allowed=tuple(sub for subs in SERVICE_SUBCATEGORIES.values() for sub in subs),
        ),
        FocusColumn("SkuId", CONDITIONAL, "String", nullable=True),
        FocusColumn("SkuMeter", CONDITIONAL, "String", nullable=True),
        FocusColumn("SkuPriceDetails", CONDITIONAL, "JSON", nullable=True),
        FocusColumn("SkuPriceId", CONDITIONAL, "String", nullable=True),
        FocusColumn("SubAccountId", CONDITIONAL, "String", nullable=True),
        FocusColumn("SubAccountName", CONDITIONAL, "String", nullable=True),
        FocusColumn("SubAccountType", CONDITIONAL, "String", nullable=True),
        FocusColumn("Tags", CONDITIONAL, "JSON", nullable=True),
    )
}
MANDATORY_COLUMNS = tuple(name for name, column in SPEC_COLUMNS.items() if column.level == MANDATORY)
COLUMNS_1_3 = {
    column.name: column
    for column in (
        FocusColumn("HostProviderName", MANDATORY, "String", nullable=False),
        FocusColumn("ServiceProviderName", MANDATORY, "String", nullable=False),
    )
}


def spec_columns(version: str) -> dict[str, FocusColumn]:
    """The columns of FOCUS ``version`` that parkbrake fills, by name."""
    return SPEC_COLUMNS | COLUMNS_1_3 if version == FOCUS_1_3 else SPEC_COLUMNS


# Not null for a Usage or Purchase charge that is not a Correction; null for Tax.
PRICED_CHARGE_COLUMNS = (
    "ContractedUnitPrice", "ListUnitPrice", "PricingCategory", "PricingQuantity", "SkuId", "SkuPriceId",
)  # fmt: skip
# (column, the column it follows): null exactly when that one is null.
NULL_TOGETHER = (
    ("BillingAccountType", "BillingAccountId"), ("ConsumedUnit", "ConsumedQuantity"),
    ("PricingUnit", "PricingQuantity"), ("RegionName", "RegionId"), ("ResourceType", "ResourceId"),
    ("SubAccountName", "SubAccountId"), ("SubAccountType", "SubAccountId"),
)  # fmt: skip
# (column, the column it depends on): null when that one is null.
NULL_WITH = (("ResourceName", "ResourceId"), ("SkuMeter", "SkuId"), ("SkuPriceDetails", "SkuPriceId"))
# (cost, unit price): cost = unit price x PricingQuantity unless the row is a Correction.
PRICE_TIMES_QUANTITY = (("ListCost", "ListUnitPrice"), ("ContractedCost", "ContractedUnitPrice"))

# Numeric format: an integer, a decimal, or E notation with no "+" on the exponent; no sign on a
# positive value. Date/time: extended ISO 8601 in UTC, seconds, "Z". Currency: ISO 4217 code.
NUMERIC = re.compile(r"-?\d+(\.\d+)?(E-?\d+)?")
DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
CURRENCY_CODE = re.compile(r"[A-Z]{3}")


def _type_problem(column: FocusColumn, value: str) -> str | None:
    if column.data_type == "Decimal":
        if not NUMERIC.fullmatch(value) or (value.startswith("-") and Decimal(value) == 0):
            return f"{column.name}: {value!r} is not in FOCUS's numeric format"
        if column.non_negative and Decimal(value) < 0:
            return f"{column.name}: {value} must not be negative"
    elif column.data_type == "DateTime":
        if not DATE_TIME.fullmatch(value):
            return f"{column.name}: {value!r} is not YYYY-MM-DDTHH:mm:ssZ"
        datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
    elif column.data_type == "JSON":
        try:
            parsed = json.loads(value)
        except ValueError:
            return f"{column.name}: {value!r} is not JSON"
        if not isinstance(parsed, dict) or any(isinstance(v, dict | list) for v in parsed.values()):
            return f"{column.name}: {value!r} is not a JSON object of scalar values"
    elif value.strip() == "":
        return f"{column.name}: a string of spaces stands for no value"
    if column.allowed and value not in column.allowed:
        return f"{column.name}: {value!r} is not one of FOCUS's allowed values"
    return None


def row_problems(row: Mapping[str, str], version: str = FOCUS_1_2) -> list[str]:
    """Every way one CSV row of a FOCUS dataset breaks FOCUS ``version``'s column rules (empty: none)."""
    columns = spec_columns(version)
    mandatory = [name for name, column in columns.items() if column.level == MANDATORY]
    problems = [f"{name}: mandatory column missing" for name in mandatory if name not in row]
    problems += [
        f"{name}: not a FOCUS {version} column"
        for name in row
        if name not in columns and not name.startswith(CUSTOM_PREFIX)
    ]
    present = {name: value for name, value in row.items() if name in columns}
    for name, value in present.items():
        column = columns[name]
        if value == "":
            if not column.nullable:
                problems.append(f"{name}: must not be null")
        elif problem := _type_problem(column, value):
            problems.append(problem)
    if problems:
        return problems

    def null(name: str) -> bool:
        return present.get(name, "") == ""

    category, correction = present["ChargeCategory"], present["ChargeClass"] == "Correction"
    for name in PRICED_CHARGE_COLUMNS:
        if name in present and category in ("Usage", "Purchase") and not correction and null(name):
            problems.append(f"{name}: must not be null for a {category} charge that is not a Correction")
        if category == "Tax" and not null(name):
            problems.append(f"{name}: must be null for a Tax charge")
    if "ConsumedQuantity" in present:
        if category != "Usage" and not null("ConsumedQuantity"):
            problems.append("ConsumedQuantity: must be null unless ChargeCategory is Usage")
        if category == "Usage" and not correction and null("ConsumedQuantity"):
            problems.append("ConsumedQuantity: must not be null for Usage that is not a Correction")
    for name, leader in NULL_TOGETHER:
        if name in present and null(name) != null(leader):
            problems.append(f"{name}: must be null exactly when {leader} is null")
    for name, leader in NULL_WITH:
        if name in present and null(leader) and not null(name):
            problems.append(f"{name}: must be null when {leader} is null")
    if category == "Purchase" and present.get("ChargeFrequency") == "Usage-Based":
        problems.append("ChargeFrequency: a Purchase is not Usage-Based")
    subcategory = present.get("ServiceSubcategory", "")
    if subcategory and subcategory not in SERVICE_SUBCATEGORIES[present["ServiceCategory"]]:
        problems.append(f"ServiceSubcategory: {subcategory!r} is not under {present['ServiceCategory']!r}")
    if not correction and not null("PricingQuantity"):
        quantity = Decimal(present["PricingQuantity"])
        for cost, price in PRICE_TIMES_QUANTITY:
            if not null(price) and not _matches(
                Decimal(present[cost]), Decimal(present[price]) * quantity, present
            ):
                problems.append(f"{cost}: {present[cost]} is not {price} x PricingQuantity")
    return problems


def _matches(cost: Decimal, product: Decimal, row: Mapping[str, str]) -> bool:
    """Equal to the precision the row's own figures are written in: the cost's last digit, and
    PricingQuantity rounded to its last digit times the unit price."""
    cost_step = Decimal(1).scaleb(min(cost.as_tuple().exponent, 0))  # type: ignore[arg-type]
    quantity = Decimal(row["PricingQuantity"])
    quantity_step = Decimal(1).scaleb(min(quantity.as_tuple().exponent, 0))  # type: ignore[arg-type]
    unit = abs(product / quantity) if quantity else Decimal(0)
    return abs(cost - product) <= (cost_step + unit * quantity_step) / 2
