"""Rebuilding ``prices.json`` from what AWS answers (pure: the API calls are the CLI's).

Three sources, each dated in the document:
- EC2 ``DescribeInstanceTypes``: the accelerator count of every accelerated instance type;
- the Price List API's ``GetProducts`` (service ``AmazonEC2``): one JSON document per SKU, its attributes
  and terms. We keep Linux, shared-tenancy, no-pre-installed-software, on-demand hourly prices of the
  accelerated instance types, in every commercial AWS Region;
- EC2 ``DescribeSpotPriceHistory``: the latest Linux/UNIX spot price per type and availability zone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import date
from decimal import Decimal
from typing import Any

from guardrails.errors import ParkbrakeError
from guardrails.instance_types import is_accelerator

# Price List instanceFamily values that hold accelerated instance types.
ACCELERATED_INSTANCE_FAMILIES = ("GPU instance", "Machine Learning ASIC Instances", "FPGA Instances")
SHARED_LINUX_FILTERS = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
    "locationType": "AWS Region",  # not Local Zones or Wavelength
}
SPOT_PRODUCT = "Linux/UNIX"
# The names EC2 gives Linux spot prices (the second from the EC2-Classic days, still answered).
SPOT_LINUX_PRODUCTS = (SPOT_PRODUCT, "Linux/UNIX (Amazon VPC)")
# Partitions other than the commercial one: GovCloud, China, the isolated regions.
NON_COMMERCIAL_PREFIXES = ("us-gov-", "cn-", "us-iso", "eu-iso")

# DescribeInstanceTypes' accelerator sections, in the order a count is taken from: a Trainium or
# Inferentia2 host reports both Neuron and inference-accelerator info for the same devices.
_ACCELERATOR_SECTIONS = (
    ("gpu", "GpuInfo", "Gpus"),
    ("neuron", "NeuronInfo", "NeuronDevices"),
    ("inference", "InferenceAcceleratorInfo", "Accelerators"),
    ("fpga", "FpgaInfo", "Fpgas"),
    ("media", "MediaAcceleratorInfo", "Accelerators"),
)


def is_commercial_region(region: str) -> bool:
    return bool(region) and not region.startswith(NON_COMMERCIAL_PREFIXES)


def accelerator_info(description: Mapping[str, Any]) -> dict[str, Any] | None:
    """``{"count", "kind", "name"}`` from one DescribeInstanceTypes entry; None without accelerators.

    A fractional GPU (g6f: an eighth of an L4) counts as one logical accelerator, with its fraction kept.
    """
    for kind, section, devices_key in _ACCELERATOR_SECTIONS:
        devices = (description.get(section) or {}).get(devices_key) or []
        count = sum(int(device.get("Count") or 0) for device in devices)
        logical = sum(int(device.get("LogicalGpuCount") or 0) for device in devices)
        if count or logical:
            info: dict[str, Any] = {
                "count": count or logical,
                "kind": kind,
                "name": "+".join(sorted({str(device.get("Name")) for device in devices})),
            }
            fraction = devices[0].get("GpuPartitionSize")
            if not count and fraction is not None:
                info["fraction"] = str(Decimal(str(fraction)).normalize())
            return info
    return None


def accelerator_counts(descriptions: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every accelerated instance type among ``descriptions`` with its accelerator info, sorted."""
    found = {}
    for description in descriptions:
        name = str(description.get("InstanceType", ""))
        info = accelerator_info(description)
        if is_accelerator(name) and info is not None:
            found[name] = info
    return dict(sorted(found.items()))


def on_demand_hourly_usd(product: Mapping[str, Any]) -> Decimal | None:
    for term in (product.get("terms", {}).get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            if dimension.get("unit") == "Hrs" and "USD" in dimension.get("pricePerUnit", {}):
                price = Decimal(dimension["pricePerUnit"]["USD"])
                if price > 0:
                    return price.normalize()
    return None


def on_demand_prices(products: Iterable[str | Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Region → instance type → USD per hour, from Price List product documents (others skipped)."""
    prices: dict[str, dict[str, str]] = {}
    for raw in products:
        product = json.loads(raw) if isinstance(raw, str) else raw
        attributes = product.get("product", {}).get("attributes", {})
        instance_type = attributes.get("instanceType", "")
        region = attributes.get("regionCode", "")
        if not is_accelerator(instance_type) or not is_commercial_region(region):
            continue
        if any(attributes.get(key, value) != value for key, value in SHARED_LINUX_FILTERS.items()):
            continue
        price = on_demand_hourly_usd(product)
        if price is not None:
            prices.setdefault(region, {})[instance_type] = str(price)
    return {region: dict(sorted(types.items())) for region, types in sorted(prices.items())}


def spot_prices(history: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Instance type → availability zone → the latest USD per hour in ``history`` (one region's)."""
    latest: dict[tuple[str, str], tuple[Any, str]] = {}
    for entry in history:
        if entry.get("ProductDescription", SPOT_PRODUCT) not in SPOT_LINUX_PRODUCTS:
            continue
        key = (str(entry["InstanceType"]), str(entry["AvailabilityZone"]))
        stamp = entry.get("Timestamp")
        if key not in latest or (stamp is not None and stamp > latest[key][0]):
            latest[key] = (stamp, str(Decimal(str(entry["SpotPrice"])).normalize()))
    prices: dict[str, dict[str, str]] = {}
    for (instance_type, zone), (_, price) in sorted(latest.items()):
        prices.setdefault(instance_type, {})[zone] = price
    return prices


def refreshed_price_document(
    current: Mapping[str, Any],
    *,
    accelerators: Mapping[str, dict[str, Any]],
    products: Iterable[str | Mapping[str, Any]],
    spot_history: Mapping[str, Iterable[Mapping[str, Any]]],
    regions: Iterable[str] | None,
    taken: date,
) -> dict[str, Any]:
    """A new ``prices.json`` document from :func:`accelerator_counts`, Price List products and spot history.

    ``regions`` None means every commercial region the Price List answered for. A region's service
    prices are kept from ``current`` (the Price List refresh covers instance prices only). Raises when
    a requested region got no price at all, leaving the file as it was.
    """
    counts = dict(sorted(accelerators.items()))
    if not counts:
        raise ParkbrakeError(
            "DescribeInstanceTypes answered no accelerated instance type; prices.json was left unchanged"
        )
    answered = on_demand_prices(products)
    wanted = sorted(answered) if regions is None else sorted(set(regions))
    missing = [region for region in wanted if not answered.get(region)]
    if missing or not wanted:
        raise ParkbrakeError(
            f"the Price List answered no on-demand Linux price of an accelerated instance type for "
            f"{', '.join(missing) or 'any region'}; prices.json was left unchanged"
        )
    day = taken.isoformat()
    regions_now = dict(current.get("regions", {}))
    for region in wanted:
        previous = regions_now.get(region, {})
        regions_now[region] = {
            "taken": day,
            "source": "AWS Price List API (AmazonEC2), on-demand, Linux, shared tenancy",
            "on_demand": answered[region],
            "services": previous.get("services", {}),
            **({"services_source": previous["services_source"]} if "services_source" in previous else {}),
        }
    spot_regions = dict((current.get("spot") or {}).get("regions", {}))
    for region, history in spot_history.items():
        spot_regions[region] = {name: zones for name, zones in spot_prices(history).items() if name in counts}
    return {
        **current,
        "accelerators": {
            "taken": day,
            "source": "EC2 DescribeInstanceTypes (GpuInfo, NeuronInfo, InferenceAcceleratorInfo, FpgaInfo, MediaAcceleratorInfo)",
            "types": counts,
        },
        "regions": dict(sorted(regions_now.items())),
        "spot": {
            "taken": day if spot_history else (current.get("spot") or {}).get("taken", ""),
            "source": "EC2 DescribeSpotPriceHistory, Linux/UNIX, latest price per availability zone",
            "regions": dict(sorted(spot_regions.items())),
        },
    }
