"""``parkbrake pricing``: rebuild guardrails/prices.json from EC2 and the AWS Price List API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.options import dry_run_option, output_option
from guardrails.plurals import counted

if TYPE_CHECKING:
    from guardrails.price_list import PriceListQuery

# The Price List API is served from a few regions only; us-east-1 answers for every region's prices.
PRICE_LIST_ENDPOINT_REGION = "us-east-1"


@click.group()
def pricing() -> None:
    """On-demand and spot prices used by plan, status and the ledger."""


@pricing.command()
@click.option(
    "--region",
    "regions",
    multiple=True,
    help="Region to refresh (repeatable); default: every commercial region the Price List prices.",
)
@click.option(
    "--file",
    "price_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Price file to rewrite; default: the packaged guardrails/prices.json.",
)
@dry_run_option
@output_option
def refresh(regions: tuple[str, ...], price_file: Path | None, dry_run: bool, output: str) -> None:
    """Rebuild accelerator counts, on-demand and service prices and the spot snapshot from AWS.

    Needs ec2:DescribeInstanceTypes, ec2:DescribeSpotPriceHistory and pricing:GetProducts. Every
    service price of each region refreshed (ALB, NAT, IPv4, Aurora, ElastiCache, Fargate, EBS, WAF,
    secrets, alarms) comes from the Price List too; one it does not answer is an error, naming the
    service, region and item, and the file is left as it was.

    \b
    Example:
      parkbrake pricing refresh
    """
    from guardrails.pricing import PRICES_FILE

    path = price_file or PRICES_FILE
    document = refresh_prices(path, regions=regions or None, write=not dry_run)
    if output == "json":
        click.echo(json.dumps(document, indent=2))
        return
    verb = "would write" if dry_run else "wrote"
    refreshed = sorted(regions) if regions else sorted(document["regions"])
    priced = sum(len(document["regions"][region]["on_demand"]) for region in refreshed)
    services = sum(len(document["regions"][region].get("service_sources", {})) for region in refreshed)
    click.echo(
        f"{verb} {counted(priced, 'on-demand price')} and {counted(services, 'service price')} in "
        f"{counted(len(refreshed), 'region')}, the accelerator counts of "
        f"{counted(len(document['accelerators']['types']), 'instance type')} and the spot snapshot to {path}"
    )


def price_list_products(regions: tuple[str, ...] | None) -> Iterator[str]:
    """Every accelerated-instance product document (of ``regions``, or of all), paginated server-side."""
    from guardrails.price_list import ACCELERATED_INSTANCE_FAMILIES, SHARED_LINUX_FILTERS
    from lambdas.clients import client

    paginator = client("pricing", PRICE_LIST_ENDPOINT_REGION).get_paginator("get_products")
    common = [
        {"Type": "TERM_MATCH", "Field": field, "Value": value}
        for field, value in SHARED_LINUX_FILTERS.items()
    ]
    scopes: list[list[dict[str, str]]] = (
        [[{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}] for region in regions]
        if regions
        else [[]]
    )
    for scope in scopes:
        for family in ACCELERATED_INSTANCE_FAMILIES:
            filters = [*common, *scope, {"Type": "TERM_MATCH", "Field": "instanceFamily", "Value": family}]
            for page in paginator.paginate(ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1"):
                yield from page["PriceList"]


def service_answers(region: str) -> dict[PriceListQuery, list[str]]:
    """The Price List's answer to each of the service queries (``SERVICE_QUERIES``) in ``region``."""
    from guardrails.price_list import SERVICE_QUERIES
    from lambdas.clients import client

    paginator = client("pricing", PRICE_LIST_ENDPOINT_REGION).get_paginator("get_products")
    answers: dict[PriceListQuery, list[str]] = {}
    for query in SERVICE_QUERIES:
        filters = [
            {"Type": "TERM_MATCH", "Field": field, "Value": value}
            for field, value in (("regionCode", region), *query.filters)
        ]
        answers[query] = [
            document
            for page in paginator.paginate(
                ServiceCode=query.service_code, Filters=filters, FormatVersion="aws_v1"
            )
            for document in page["PriceList"]
        ]
    return answers


def accelerated_instance_types(regions: list[str]) -> dict[str, dict[str, Any]]:
    """Accelerator info of every accelerated instance type offered in ``regions`` (filtered server-side)."""
    from guardrails.instance_types import accelerator_filter_values
    from guardrails.price_list import accelerator_counts
    from lambdas.clients import client

    descriptions: dict[str, dict[str, Any]] = {}
    for region in regions:
        paginator = client("ec2", region).get_paginator("describe_instance_types")
        filters = [{"Name": "instance-type", "Values": accelerator_filter_values()}]
        for page in paginator.paginate(Filters=filters):
            descriptions.update({entry["InstanceType"]: entry for entry in page["InstanceTypes"]})
    return accelerator_counts(descriptions.values())


def spot_price_history(region: str, instance_types: list[str], now: datetime) -> Iterator[dict[str, Any]]:
    """The spot price in effect at ``now`` for each type and zone of ``region``."""
    from guardrails.price_list import SPOT_LINUX_PRODUCTS
    from lambdas.clients import client

    paginator = client("ec2", region).get_paginator("describe_spot_price_history")
    for page in paginator.paginate(
        InstanceTypes=instance_types,
        ProductDescriptions=list(SPOT_LINUX_PRODUCTS),
        StartTime=now,
        EndTime=now,
    ):
        yield from page["SpotPriceHistory"]


def refresh_prices(path: Path, *, regions: tuple[str, ...] | None, write: bool) -> dict[str, Any]:
    from guardrails.price_list import on_demand_prices, refreshed_price_document

    now = datetime.now(UTC)
    current = json.loads(path.read_text())
    products = list(price_list_products(regions))
    answered = on_demand_prices(products)
    refreshed = sorted(region for region in answered if regions is None or region in regions)
    counts = accelerated_instance_types(refreshed)
    spot = {
        region: list(spot_price_history(region, sorted(set(answered[region]) & set(counts)), now))
        for region in refreshed
    }
    document = refreshed_price_document(
        current,
        accelerators=counts,
        products=products,
        service_answers={region: service_answers(region) for region in refreshed},
        spot_history=spot,
        regions=regions,
        taken=now.date(),
    )
    if write:
        path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    return document
