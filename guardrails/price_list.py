"""Rebuilding ``prices.json`` from AWS Price List product documents (pure: the API call is the CLI's).

The Price List API answers ``GetProducts`` with one JSON document per SKU: the product's attributes
and its terms. We keep Linux, shared-tenancy, no-pre-installed-software, on-demand hourly prices of
the accelerated instance types, for the families parkbrake plans with.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import date
from decimal import Decimal
from typing import Any

from guardrails.errors import ParkbrakeError
from guardrails.instance_types import is_accelerator

# The families the issue of record names; `pricing refresh --family` may ask for others.
DEFAULT_FAMILIES = ("p3", "p4d", "p4de", "p5", "p5e", "g4dn", "g5", "g6", "g6e", "gr6", "trn1", "inf2")
# Price List instanceFamily values that hold accelerated instance types.
ACCELERATED_INSTANCE_FAMILIES = ("GPU instance", "Machine Learning ASIC Instances")
SHARED_LINUX_FILTERS = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
}


def family_of(instance_type: str) -> str:
    """``g6e.xlarge`` → ``g6e``; ``trn1n.32xlarge`` → ``trn1n``."""
    return instance_type.split(".", 1)[0]


def on_demand_hourly_usd(product: dict[str, Any]) -> Decimal | None:
    for term in (product.get("terms", {}).get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            if dimension.get("unit") == "Hrs" and "USD" in dimension.get("pricePerUnit", {}):
                price = Decimal(dimension["pricePerUnit"]["USD"])
                if price > 0:
                    return price.normalize()
    return None


def accelerators_of(attributes: dict[str, Any]) -> int | None:
    for key in ("gpu", "neuronDevice", "fpga"):
        value = str(attributes.get(key, "")).strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def refreshed_price_document(
    current: dict[str, Any],
    products: Iterable[str | dict[str, Any]],
    *,
    region: str,
    taken: date,
    families: Iterable[str] = DEFAULT_FAMILIES,
) -> dict[str, Any]:
    """A new ``prices.json`` document: instance prices from ``products``, service prices kept from ``current``."""
    wanted = set(families)
    instances: dict[str, dict[str, Any]] = {}
    for raw in products:
        product = json.loads(raw) if isinstance(raw, str) else raw
        attributes = product.get("product", {}).get("attributes", {})
        instance_type = attributes.get("instanceType", "")
        if not is_accelerator(instance_type) or family_of(instance_type) not in wanted:
            continue
        if any(attributes.get(key) != value for key, value in SHARED_LINUX_FILTERS.items()):
            continue
        price = on_demand_hourly_usd(product)
        known = current.get("instances", {}).get(instance_type, {})
        accelerators = accelerators_of(attributes) or known.get("accelerators")
        if price is None or accelerators is None:
            continue
        instances[instance_type] = {"usd_per_hour": str(price), "accelerators": int(accelerators)}
    missing = sorted(wanted - {family_of(name) for name in instances})
    if missing:
        raise ParkbrakeError(
            f"the Price List answered no on-demand Linux price for the families {', '.join(missing)} in {region}; "
            "prices.json was left unchanged"
        )
    return {
        **current,
        "region": region,
        "taken": taken.isoformat(),
        "instances": dict(sorted(instances.items())),
    }
