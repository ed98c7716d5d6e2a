"""On-demand prices, read from ``prices.json`` beside this module.

Money is ``Decimal`` from end to end: the file stores prices as strings so that no
float ever rounds a cent. An instance type without a price is an error, never $0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

PRICES_FILE = Path(__file__).with_name("prices.json")
HOURS_PER_MONTH = Decimal(730)  # AWS's own convention for monthly estimates


class PriceNotFound(LookupError):
    """Raised for an instance type or service item the price table does not hold."""


@dataclass(frozen=True)
class InstancePrice:
    instance_type: str
    usd_per_hour: Decimal
    accelerators: int


@dataclass(frozen=True)
class PriceTable:
    region: str
    taken: str
    source: str
    instances: dict[str, InstancePrice]
    services: dict[str, Any]

    def instance(self, instance_type: str) -> InstancePrice:
        try:
            return self.instances[instance_type]
        except KeyError:
            raise PriceNotFound(
                f"no on-demand price for instance type {instance_type!r} in {PRICES_FILE.name} "
                f"(prices for {self.region}, taken {self.taken}); add it or run `parkbrake pricing refresh`"
            ) from None

    def service(self, item: str, variant: str | None = None) -> Decimal:
        try:
            value = self.services[item]
            return Decimal(value[variant] if variant is not None else value)
        except (KeyError, TypeError):
            name = f"{item}[{variant}]" if variant is not None else item
            raise PriceNotFound(f"no price for {name} in {PRICES_FILE.name}") from None

    def known_service_variants(self, item: str) -> list[str]:
        value = self.services.get(item)
        return sorted(value) if isinstance(value, dict) else []


def price_table_from_document(document: dict[str, Any]) -> PriceTable:
    return PriceTable(
        region=document["region"],
        taken=document["taken"],
        source=document["source"],
        instances={
            name: InstancePrice(name, Decimal(entry["usd_per_hour"]), int(entry["accelerators"]))
            for name, entry in document["instances"].items()
        },
        services=document["services"],
    )


@cache
def load_price_table(path: Path = PRICES_FILE) -> PriceTable:
    return price_table_from_document(json.loads(path.read_text()))
