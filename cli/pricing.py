"""``parkbrake pricing``: rebuild guardrails/prices.json from the AWS Price List API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from cli.options import dry_run_option, output_option

# The Price List API is served from a few regions only; us-east-1 answers for every region's prices.
PRICE_LIST_ENDPOINT_REGION = "us-east-1"


@click.group()
def pricing() -> None:
    """On-demand prices used by plan, status and the ledger."""


@pricing.command()
@click.option("--region", default="us-east-1", show_default=True, help="Region whose prices to take.")
@click.option(
    "--family",
    "families",
    multiple=True,
    help="Instance family to include (repeatable); default: the families parkbrake plans with.",
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
def refresh(
    region: str, families: tuple[str, ...], price_file: Path | None, dry_run: bool, output: str
) -> None:
    """Rebuild the instance prices from the AWS Price List API (needs pricing:GetProducts).

    Keeps the non-instance prices (Aurora, ElastiCache, Fargate, ALB, NAT) as they are.
    """
    from guardrails.price_list import DEFAULT_FAMILIES
    from guardrails.pricing import PRICES_FILE

    path = price_file or PRICES_FILE
    document = refresh_prices(path, region=region, families=families or DEFAULT_FAMILIES, write=not dry_run)
    if output == "json":
        click.echo(json.dumps(document, indent=2))
        return
    verb = "would write" if dry_run else "wrote"
    click.echo(f"{verb} {len(document['instances'])} instance prices for {region} to {path}")


def price_list_products(region: str) -> Iterator[str]:
    """Every accelerated-instance product document of ``region``, paginated server-side."""
    from guardrails.price_list import ACCELERATED_INSTANCE_FAMILIES, SHARED_LINUX_FILTERS
    from lambdas.aws.clients import client

    paginator = client("pricing", PRICE_LIST_ENDPOINT_REGION).get_paginator("get_products")
    common = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}] + [
        {"Type": "TERM_MATCH", "Field": field, "Value": value}
        for field, value in SHARED_LINUX_FILTERS.items()
    ]
    for family in ACCELERATED_INSTANCE_FAMILIES:
        filters = [*common, {"Type": "TERM_MATCH", "Field": "instanceFamily", "Value": family}]
        for page in paginator.paginate(ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1"):
            yield from page["PriceList"]


def refresh_prices(path: Path, *, region: str, families: tuple[str, ...], write: bool) -> dict[str, Any]:
    from guardrails.price_list import refreshed_price_document

    current = json.loads(path.read_text())
    document = refreshed_price_document(
        current, price_list_products(region), region=region, taken=datetime.now(UTC).date(), families=families
    )
    if write:
        path.write_text(json.dumps(document, indent=2) + "\n")
    return document
