"""Rebuilding ``prices.json`` from what AWS answers (pure: the API calls are the CLI's).

Three sources, each dated in the document:
- EC2 ``DescribeInstanceTypes``: the accelerator count of every accelerated instance type;
- the Price List API's ``GetProducts``: one JSON document per SKU, its attributes and terms. From
  ``AmazonEC2`` we keep Linux, shared-tenancy, no-pre-installed-software, on-demand hourly prices of
  the accelerated instance types, in every commercial AWS Region; from each service a stack declares,
  the one on-demand price of each item of :data:`SERVICE_ITEMS`, per region;
- EC2 ``DescribeSpotPriceHistory``: the latest Linux/UNIX spot price per type and availability zone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class PriceListQuery:
    """One ``GetProducts`` query a region's service prices come from: the service code and the
    ``TERM_MATCH`` filters besides ``regionCode`` (``productFamily`` is a product field; the rest are
    attributes)."""

    service_code: str
    filters: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        if not self.filters:
            return self.service_code
        return f"{self.service_code} ({', '.join(f'{field}={value}' for field, value in self.filters)})"


@dataclass(frozen=True)
class ServiceItem:
    """One service price of a region (``services[name]``, or ``services[name][variant]``) and the SKU
    that holds it: the query's answer narrowed to the product whose ``usagetype``, less the region's
    prefix (``USE2-``, ``EU-``; us-east-1 often has none), is ``usage_type``, and whose attributes
    include ``attributes``."""

    name: str
    query: PriceListQuery
    usage_type: str
    unit: str  # what the price is per, for the file's source line
    variant: str | None = None
    attributes: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        return f"{self.name}[{self.variant}]" if self.variant is not None else self.name


ELB = PriceListQuery("AWSELB", (("productFamily", "Load Balancer-Application"),))
NAT = PriceListQuery("AmazonEC2", (("productFamily", "NAT Gateway"),))
EBS = PriceListQuery("AmazonEC2", (("productFamily", "Storage"), ("volumeApiName", "gp3")))
VPC = PriceListQuery("AmazonVPC")
AURORA_CAPACITY = PriceListQuery(
    "AmazonRDS", (("productFamily", "ServerlessV2"), ("databaseEngine", "Aurora PostgreSQL"))
)
AURORA_STORAGE = PriceListQuery("AmazonRDS", (("productFamily", "Database Storage"),))
FARGATE = PriceListQuery("AmazonECS")
WAF = PriceListQuery("awswaf")
SECRETS = PriceListQuery("AWSSecretsManager")
ALARMS = PriceListQuery("AmazonCloudWatch", (("productFamily", "Alarm"),))
# The cache node types a stack file may name: the ones priced (stacks/config.py asks the table).
CACHE_NODE_TYPES = (
    "cache.t4g.micro",
    "cache.t4g.small",
    "cache.t4g.medium",
    "cache.r7g.large",
    "cache.r7g.xlarge",
)
CACHE_ENGINES = {"elasticache_node_hour": "Redis", "elasticache_valkey_node_hour": "Valkey"}

# Every service price a region holds, and where each comes from. Explicit, in the file's key order.
SERVICE_ITEMS: tuple[ServiceItem, ...] = (
    ServiceItem("alb_hour", ELB, "LoadBalancerUsage", "load balancer-hour"),
    ServiceItem("aurora_serverless_v2_acu_hour", AURORA_CAPACITY, "Aurora:ServerlessV2Usage", "ACU-hour"),
    ServiceItem("aurora_storage_gb_month", AURORA_STORAGE, "Aurora:StorageUsage", "GB-month"),
    ServiceItem("cloudwatch_alarm_month", ALARMS, "CW:AlarmMonitorUsage", "standard-resolution alarm-month"),
    ServiceItem("ebs_gp3_gb_month", EBS, "EBS:VolumeUsage.gp3", "GB-month"),
    *(
        ServiceItem(
            name,
            PriceListQuery(
                "AmazonElastiCache", (("productFamily", "Cache Instance"), ("cacheEngine", engine))
            ),
            f"NodeUsage:{node_type}",
            "node-hour",
            variant=node_type,
            attributes=(("instanceType", node_type),),
        )
        for name, engine in CACHE_ENGINES.items()
        for node_type in CACHE_NODE_TYPES
    ),
    ServiceItem("fargate_gb_hour", FARGATE, "Fargate-GB-Hours", "GB-hour, Linux x86"),
    ServiceItem("fargate_vcpu_hour", FARGATE, "Fargate-vCPU-Hours:perCPU", "vCPU-hour, Linux x86"),
    ServiceItem("nat_gateway_hour", NAT, "NatGateway-Hours", "NAT gateway-hour"),
    ServiceItem("public_ipv4_hour", VPC, "PublicIPv4:InUseAddress", "in-use address-hour"),
    ServiceItem("secret_month", SECRETS, "AWSSecretsManager-Secrets", "secret-month"),
    ServiceItem("waf_rule_month", WAF, "RuleV2", "rule-month"),
    ServiceItem("waf_web_acl_month", WAF, "WebACLV2", "web ACL-month"),
)
SERVICE_QUERIES: tuple[PriceListQuery, ...] = tuple(dict.fromkeys(item.query for item in SERVICE_ITEMS))


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


def _usd(value: Decimal) -> str:
    """A price as the file writes it: no trailing zeros, never an exponent (``10``, not ``1E+1``)."""
    return format(value.normalize(), "f")


def on_demand_usd(product: Mapping[str, Any], unit: str | None = None) -> set[Decimal]:
    """Every positive on-demand USD price of a product, of ``unit`` if given (a free tier's $0 is not
    a price)."""
    return {
        Decimal(dimension["pricePerUnit"]["USD"])
        for term in (product.get("terms", {}).get("OnDemand") or {}).values()
        for dimension in (term.get("priceDimensions") or {}).values()
        if "USD" in dimension.get("pricePerUnit", {})
        and Decimal(dimension["pricePerUnit"]["USD"]) > 0
        and unit in (None, dimension.get("unit"))
    }


def _is_usage_type(usage_type: str, base: str) -> bool:
    return usage_type == base or usage_type.endswith(f"-{base}")


def service_prices(
    answers: Mapping[PriceListQuery, Iterable[str | Mapping[str, Any]]], region: str, taken: date
) -> tuple[dict[str, Any], dict[str, dict[str, str]], list[str]]:
    """``(services, sources, problems)`` of ``region`` from the answers to :data:`SERVICE_QUERIES`.

    An item is priced when exactly one distinct on-demand price answers for it; none, or several, is
    a problem naming the service, the region and the item (the caller refuses the whole refresh).
    """
    documents = {
        query: [json.loads(raw) if isinstance(raw, str) else raw for raw in products]
        for query, products in answers.items()
    }
    services: dict[str, Any] = {}
    sources: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for item in SERVICE_ITEMS:
        found: set[Decimal] = set()
        for product in documents.get(item.query, []):
            attributes = product.get("product", {}).get("attributes", {})
            if (
                attributes.get("regionCode") == region
                and _is_usage_type(str(attributes.get("usagetype", "")), item.usage_type)
                and all(attributes.get(key) == value for key, value in item.attributes)
            ):
                found |= on_demand_usd(product)
        where = f"{item.query.service_code}, {region}, {item.label}"
        if len(found) != 1:
            answered = ", ".join(_usd(price) for price in sorted(found))
            problems.append(
                f"{where}: {'no on-demand price' if not found else f'{len(found)} prices ({answered})'} "
                f"for usagetype {item.usage_type} in {item.query}"
            )
            continue
        price = _usd(found.pop())
        if item.variant is None:
            services[item.name] = price
        else:
            services.setdefault(item.name, {})[item.variant] = price
        sources[item.label] = {
            "taken": taken.isoformat(),
            "source": f"AWS Price List API: {item.query}, usagetype {item.usage_type}, USD per {item.unit}",
        }
    return dict(sorted(services.items())), sources, problems


def on_demand_hourly_usd(product: Mapping[str, Any]) -> Decimal | None:
    """An instance SKU's hourly price (its one positive ``Hrs`` dimension; the lowest if several)."""
    prices = on_demand_usd(product, unit="Hrs")
    return min(prices).normalize() if prices else None


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


def _refreshed_regions(
    current: Mapping[str, Any],
    answered: Mapping[str, dict[str, str]],
    service_answers: Mapping[str, Mapping[PriceListQuery, Iterable[str | Mapping[str, Any]]]],
    *,
    wanted: Sequence[str],
    taken: date,
) -> dict[str, Any]:
    """The document's regions, ``wanted`` refreshed from ``answered`` on-demand prices and their service
    answers; raises naming every service item that got no single price."""
    regions_now = dict(current.get("regions", {}))
    problems: list[str] = []
    for region in wanted:
        services, sources, unpriced = service_prices(service_answers.get(region, {}), region, taken)
        problems += unpriced
        regions_now[region] = {
            "taken": taken.isoformat(),
            "source": "AWS Price List API (AmazonEC2), on-demand, Linux, shared tenancy",
            "on_demand": answered[region],
            "services": services,
            "service_sources": sources,
        }
    if problems:
        raise ParkbrakeError(
            "the Price List answered no single on-demand price for these service items (service, "
            "region, item):\n  - " + "\n  - ".join(problems) + "\nprices.json was left unchanged; "
            "refresh the regions that have every service with --region"
        )
    return regions_now


def refreshed_price_document(
    current: Mapping[str, Any],
    *,
    accelerators: Mapping[str, dict[str, Any]],
    products: Iterable[str | Mapping[str, Any]],
    service_answers: Mapping[str, Mapping[PriceListQuery, Iterable[str | Mapping[str, Any]]]],
    spot_history: Mapping[str, Iterable[Mapping[str, Any]]],
    regions: Iterable[str] | None,
    taken: date,
) -> dict[str, Any]:
    """A new ``prices.json`` document from :func:`accelerator_counts`, Price List products (instances,
    and per region the answers to :data:`SERVICE_QUERIES`) and spot history.

    ``regions`` None means every commercial region the Price List answered for. Raises, leaving the
    file as it was, when a requested region got no instance price at all or a service item of a
    refreshed region got no single price: every such item is named with its service and region.
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
    regions_now = _refreshed_regions(current, answered, service_answers, wanted=wanted, taken=taken)
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
