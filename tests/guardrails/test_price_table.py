"""The price table: lookups per region and pricing model, and what the shipped table holds."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from guardrails.instance_types import is_accelerator
from guardrails.pricing import (
    PRICES_FILE,
    InstancePrice,
    Price,
    PriceNotFound,
    Unpriced,
    load_price_table,
    price_table_from_document,
)

TABLE = price_table_from_document(
    {
        "currency": "USD",
        "source": "test",
        "accelerators": {
            "taken": "2026-11-30",
            "source": "test",
            "types": {
                "g5.xlarge": {"count": 1, "kind": "gpu", "name": "A10G"},
                "p6-b200.48xlarge": {"count": 8, "kind": "gpu", "name": "B200"},
            },
        },
        "regions": {
            "us-east-1": {
                "taken": "2026-11-30",
                "source": "Price List",
                "on_demand": {"g5.xlarge": "1.006"},
                "services": {"alb_hour": "0.0225"},
            },
            "eu-west-1": {
                "taken": "2026-11-28",
                "source": "Price List",
                "on_demand": {"g5.xlarge": "1.123"},
                "services": {},
            },
        },
        "spot": {
            "taken": "2026-11-29",
            "source": "spot history",
            "regions": {"us-east-1": {"g5.xlarge": {"us-east-1a": "0.41"}}},
        },
    }
)


def test_on_demand_prices_are_per_region_and_say_where_they_came_from() -> None:
    assert TABLE.lookup("g5.xlarge", "us-east-1") == Price(
        "g5.xlarge", "us-east-1", "on-demand", Decimal("1.006"), "2026-11-30", "Price List"
    )
    assert TABLE.lookup("g5.xlarge", "eu-west-1").usd_per_hour == Decimal("1.123")  # type: ignore[union-attr]


def test_spot_prices_are_per_zone_from_the_snapshot() -> None:
    price = TABLE.lookup("g5.xlarge", "us-east-1", "spot", "us-east-1a")
    assert price == Price(
        "g5.xlarge", "us-east-1", "spot", Decimal("0.41"), "2026-11-29", "spot history", "us-east-1a"
    )


@pytest.mark.parametrize(
    ("instance_type", "region", "model", "zone", "reason"),
    [
        ("g5.xlarge", "ap-south-2", "on-demand", None, "no prices for region ap-south-2"),
        (
            "p6-b200.48xlarge",
            "us-east-1",
            "on-demand",
            None,
            "no on-demand price for p6-b200.48xlarge in us-east-1",
        ),
        (
            "g5.xlarge",
            "us-east-1",
            "spot",
            "us-east-1f",
            "no spot price for g5.xlarge in us-east-1 zone us-east-1f",
        ),
        ("g5.xlarge", "eu-west-1", "spot", None, "no spot price for g5.xlarge in eu-west-1"),
    ],
)
def test_a_missing_price_is_unpriced_with_the_reason_never_an_exception(
    instance_type: str, region: str, model: str, zone: str | None, reason: str
) -> None:
    found = TABLE.lookup(instance_type, region, model, zone)  # type: ignore[arg-type]
    assert isinstance(found, Unpriced)
    assert reason in found.reason
    assert "parkbrake pricing refresh" in found.reason


def test_accelerator_counts_do_not_need_a_price() -> None:
    assert TABLE.accelerators("p6-b200.48xlarge") == 8
    assert TABLE.accelerators("m7i.large") is None


def test_plan_lookups_raise_an_input_error_naming_the_region() -> None:
    with pytest.raises(
        PriceNotFound, match=r"no prices for region ap-south-2.*--region ap-south-2"
    ) as raised:
        TABLE.service("alb_hour", "ap-south-2")
    assert raised.value.exit_code == 2
    with pytest.raises(PriceNotFound, match=r"no price for alb_hour in eu-west-1"):
        TABLE.service("alb_hour", "eu-west-1")


def test_the_home_region_serves_callers_that_name_no_region() -> None:
    assert TABLE.instance("g5.xlarge").usd_per_hour == Decimal("1.006")
    assert TABLE.instance("g5.xlarge", "eu-west-1").usd_per_hour == Decimal("1.123")
    assert set(TABLE.instances) == {"g5.xlarge"}


def test_a_host_is_priced_where_it_runs_or_not_at_all() -> None:
    # status, reap and the sweep's notices price each host by its own region.
    assert TABLE.on_demand_in("g5.xlarge", "eu-west-1") == InstancePrice("g5.xlarge", Decimal("1.123"), 1)
    assert TABLE.on_demand_in("g5.xlarge", "us-east-1") == InstancePrice("g5.xlarge", Decimal("1.006"), 1)
    assert TABLE.on_demand_in("g5.xlarge", "ap-south-1") is None  # not the home region's price
    assert TABLE.on_demand_in("p6-b200.48xlarge", "us-east-1") is None


def test_the_shipped_table_is_dated_sourced_and_complete() -> None:
    document = json.loads(PRICES_FILE.read_text())
    table = load_price_table()
    assert document["accelerators"]["taken"]
    for region, prices in document["regions"].items():
        assert prices["taken"], region
        assert "refresh" in prices["source"], region
        for instance_type in prices["on_demand"]:
            assert is_accelerator(instance_type), instance_type
            assert table.accelerators(instance_type), f"{instance_type} has a price but no accelerator count"
    # the 2025 price reduction of P4 and P5 instances is in
    assert table.on_demand("p5.48xlarge", "us-east-1").usd_per_hour == Decimal("55.04")
    assert table.accelerators("trn2.48xlarge") == 16
    assert {"us-east-1", "us-west-2"} <= set(table.regions)  # the example stacks' regions
