"""The price table, read from ``prices.json`` beside this module: one table for ``plan``, the ledger and
``status``.

It holds, each section dated and sourced:
- ``accelerators``: how many accelerators each accelerated instance type carries (EC2
  ``DescribeInstanceTypes``: GPU, Neuron, inference and media accelerator, FPGA info);
- ``regions``: per region, on-demand hourly prices of instance types and the prices of the other
  services a stack declares (load balancers, NAT, public IPv4, Aurora, ElastiCache, Fargate, EBS);
- ``spot``: a snapshot of spot prices per region, instance type and availability zone
  (``DescribeSpotPriceHistory``).

Money is ``Decimal`` from end to end: the file stores prices as strings so that no float ever rounds a
cent. Two ways to ask:
- :meth:`PriceTable.lookup` answers a :class:`Price` or an :class:`Unpriced` saying why — for callers
  that must go on without a price (the ledger meters an unpriced host in seconds and reprices later);
- :meth:`PriceTable.on_demand` and :meth:`PriceTable.service` raise :class:`PriceNotFound` naming the
  region and the refresh command — for ``plan``, where a missing price is a config error, never $0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any, Literal

from guardrails.errors import InputError
from guardrails.settings import aws_region

PRICES_FILE = Path(__file__).with_name("prices.json")
HOURS_PER_MONTH = Decimal(730)  # AWS's own convention for monthly estimates
# Where a caller that names no region is priced (the ledger's and the CLI's default until they pass one).
HOME_REGION = "us-east-1"
REFRESH_COMMAND = "parkbrake pricing refresh"

PricingModel = Literal["on-demand", "spot"]
ON_DEMAND: PricingModel = "on-demand"
SPOT: PricingModel = "spot"
MINIMUM_BILLED = timedelta(seconds=60)  # AWS bills per second, with a minute's minimum per start
SECONDS_PER_HOUR = Decimal(3600)


def priced_region(environ: Mapping[str, str], region: str | None = None) -> str:
    """The region hosts are priced in: ``region`` if given, else the process's own, else home."""
    return region or aws_region(environ) or HOME_REGION


class PriceNotFound(InputError):
    """An instance type, region or service item the price table does not hold (exit 2 in the CLI)."""


@dataclass(frozen=True)
class Price:
    """An hourly price and where it came from."""

    instance_type: str
    region: str
    pricing_model: PricingModel
    usd_per_hour: Decimal
    taken: str  # the date the figure was taken, ISO 8601
    source: str
    zone: str | None = None  # spot prices are per availability zone


@dataclass(frozen=True)
class Unpriced:
    """No price for this type, region and pricing model; ``reason`` says what is missing and what to run."""

    instance_type: str
    region: str
    pricing_model: PricingModel
    reason: str


@dataclass(frozen=True)
class InstancePrice:
    instance_type: str
    usd_per_hour: Decimal
    accelerators: int


@dataclass(frozen=True)
class RegionPrices:
    region: str
    taken: str
    source: str
    on_demand: dict[str, Decimal]
    services: dict[str, Any]


@dataclass(frozen=True)
class SpotSnapshot:
    taken: str
    source: str
    # region → instance type → availability zone → USD per hour
    prices: dict[str, dict[str, dict[str, Decimal]]]


@dataclass(frozen=True)
class PriceTable:
    source: str
    accelerators_taken: str
    accelerator_counts: dict[str, int]
    regions: dict[str, RegionPrices]
    spot: SpotSnapshot

    # --- lookups that never raise -----------------------------------------------------------------

    def accelerators(self, instance_type: str) -> int | None:
        return self.accelerator_counts.get(instance_type)

    def lookup(
        self,
        instance_type: str,
        region: str,
        pricing_model: PricingModel = ON_DEMAND,
        zone: str | None = None,
    ) -> Price | Unpriced:
        """The hourly price of ``instance_type`` in ``region``; spot needs the zone the host runs in."""
        if pricing_model == SPOT:
            return self._spot(instance_type, region, zone)
        prices = self.regions.get(region)
        if prices is None:
            return Unpriced(instance_type, region, ON_DEMAND, self._region_missing(region))
        if instance_type not in prices.on_demand:
            return Unpriced(
                instance_type,
                region,
                ON_DEMAND,
                f"no on-demand price for {instance_type} in {region} in {PRICES_FILE.name} "
                f"(taken {prices.taken}); run `{REFRESH_COMMAND}`",
            )
        return Price(
            instance_type, region, ON_DEMAND, prices.on_demand[instance_type], prices.taken, prices.source
        )

    def spot_zones(self, instance_type: str, region: str) -> dict[str, Decimal]:
        """The snapshot's spot price per availability zone (empty when it holds none)."""
        return dict(self.spot.prices.get(region, {}).get(instance_type, {}))

    # --- lookups for plan: a missing price is an error naming the fix ------------------------------

    def on_demand(self, instance_type: str, region: str) -> Price:
        found = self.lookup(instance_type, region)
        if isinstance(found, Unpriced):
            raise PriceNotFound(found.reason)
        return found

    def service(self, item: str, region: str, variant: str | None = None) -> Decimal:
        prices = self.regions.get(region)
        if prices is None:
            raise PriceNotFound(self._region_missing(region))
        try:
            value = prices.services[item]
            return Decimal(value[variant] if variant is not None else value)
        except (KeyError, TypeError):
            name = f"{item}[{variant}]" if variant is not None else item
            raise PriceNotFound(
                f"no price for {name} in {region} in {PRICES_FILE.name} (taken {prices.taken})"
            ) from None

    def known_service_variants(self, item: str, region: str = HOME_REGION) -> list[str]:
        prices = self.regions.get(region)
        value = prices.services.get(item) if prices else None
        return sorted(value) if isinstance(value, dict) else []

    # --- the home region, for callers that do not yet say where a host runs -------------------------

    @property
    def region(self) -> str:
        return HOME_REGION

    @property
    def taken(self) -> str:
        return self.regions[HOME_REGION].taken

    @property
    def instances(self) -> dict[str, InstancePrice]:
        """Every on-demand price of the home region with its accelerator count."""
        prices = self.regions[HOME_REGION].on_demand
        return {
            name: InstancePrice(name, usd, self.accelerator_counts.get(name, 0))
            for name, usd in prices.items()
        }

    def on_demand_in(self, instance_type: str, region: str) -> InstancePrice | None:
        """A running host's on-demand price where it runs, with its accelerator count; None where the
        table has no price of the type in that region (shown as unpriced, never another region's)."""
        found = self.lookup(instance_type, region)
        if isinstance(found, Unpriced):
            return None
        return InstancePrice(instance_type, found.usd_per_hour, self.accelerator_counts.get(instance_type, 0))

    def instance(self, instance_type: str, region: str = HOME_REGION) -> InstancePrice:
        price = self.on_demand(instance_type, region)
        accelerators = self.accelerators(instance_type)
        if accelerators is None:
            raise PriceNotFound(
                f"no accelerator count for {instance_type} in {PRICES_FILE.name} "
                f"(taken {self.accelerators_taken}); run `{REFRESH_COMMAND}`"
            )
        return InstancePrice(instance_type, price.usd_per_hour, accelerators)

    # --- helpers ------------------------------------------------------------------------------------

    def _region_missing(self, region: str) -> str:
        return (
            f"no prices for region {region} in {PRICES_FILE.name} (it holds {', '.join(sorted(self.regions))}); "
            f"run `{REFRESH_COMMAND} --region {region}`"
        )

    def _spot(self, instance_type: str, region: str, zone: str | None) -> Price | Unpriced:
        zones = self.spot_zones(instance_type, region)
        if zone is None or zone not in zones:
            where = f"{region} zone {zone}" if zone else region
            return Unpriced(
                instance_type,
                region,
                SPOT,
                f"no spot price for {instance_type} in {where} in the snapshot of {self.spot.taken or 'never'}; "
                f"run `{REFRESH_COMMAND}`",
            )
        return Price(instance_type, region, SPOT, zones[zone], self.spot.taken, self.spot.source, zone)


def _decimals(values: dict[str, str]) -> dict[str, Decimal]:
    return {name: Decimal(value) for name, value in values.items()}


def price_table_from_document(document: dict[str, Any]) -> PriceTable:
    accelerators = document["accelerators"]
    spot = document.get("spot") or {"taken": "", "source": "", "regions": {}}
    return PriceTable(
        source=document["source"],
        accelerators_taken=accelerators["taken"],
        accelerator_counts={name: int(entry["count"]) for name, entry in accelerators["types"].items()},
        regions={
            region: RegionPrices(
                region=region,
                taken=entry["taken"],
                source=entry["source"],
                on_demand=_decimals(entry["on_demand"]),
                services=entry["services"],
            )
            for region, entry in document["regions"].items()
        },
        spot=SpotSnapshot(
            taken=spot["taken"],
            source=spot["source"],
            prices={
                region: {name: _decimals(zones) for name, zones in types.items()}
                for region, types in spot["regions"].items()
            },
        ),
    )


@cache
def load_price_table(path: Path = PRICES_FILE) -> PriceTable:
    return price_table_from_document(json.loads(path.read_text()))


def cost_since_start(usd_per_hour: Decimal, ran: timedelta) -> Decimal:
    """On-demand cost of a host that has run ``ran`` since it started: per second, 60 seconds at least."""
    billed = max(ran, MINIMUM_BILLED)
    return usd_per_hour * Decimal(int(billed.total_seconds())) / SECONDS_PER_HOUR
