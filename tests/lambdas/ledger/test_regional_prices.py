"""Every interval is priced by its own key: its region's on-demand price, a spot interval by its
zone's spot price or, without one, visibly by its region's on-demand price. A region with no price
is metered, counted unpriced and repriced when its price is recorded. Costs, runway, admission and
invoices all read the same prices (ledger_prices_for), and the pure rules agree."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from ledger_streams import T0, at, ms, step, who

from guardrails.invoice import FALLBACK
from guardrails.launch import AdmissionRequest
from guardrails.ledger import SPOT, PriceKey, usage_by_key
from guardrails.runway import Budget, runway_totals
from lambdas.ledger.store import LedgerStore

G5 = ("research", "training", "g5.xlarge")
HOUR = timedelta(hours=1)


def run(
    store: LedgerStore,
    host: str,
    start: float,
    stop: float | None,
    *,
    tenant: str = "research",
    cap_minutes: int = 90,
    **where: str,
) -> None:
    attribution = who(tenant, cap_minutes=cap_minutes, **where)
    events = [step(f"{host}-r", host, "running", ms(start), attribution)]
    if stop is not None:
        events.append(step(f"{host}-s", host, "stopped", ms(stop), attribution))
    store.append(events, source="meter", received_at=T0)


def test_each_region_is_priced_at_its_own_rates_and_a_region_without_a_price_is_repriced_later(
    store: LedgerStore,
) -> None:
    store.add_price("g5.xlarge", Decimal("2.000"), at(30), "test: us-west-2 change", region="us-west-2")
    run(store, "i-east", 0, 60)  # us-east-1 at 1.006
    run(store, "i-west", 0, 60, region="us-west-2")  # 1.006, then 2.000 from minute 30
    run(store, "i-eu", 0, 30, region="eu-west-1")  # no price for eu-west-1 yet
    assert store.prices_at([PriceKey("g5.xlarge", "eu-west-1")], at(0)) == {
        PriceKey("g5.xlarge", "eu-west-1"): None
    }
    (row,) = store.usage_rows(now=at(90))
    assert row.unpriced_ms == 30 * 60_000
    assert row.usage.cost_usd == Decimal("1.006") + Decimal("0.503") + Decimal("1.000")
    assert row.usage.accelerator_ms == (60 + 60 + 30) * 60_000  # metered in full, priced or not
    unpriced = [line for line in store.invoice_lines(now=at(90), since=at(-60), until=at(90))
                if line.usd_per_hour is None]  # fmt: skip
    assert [(line.region, line.billed_ms) for line in unpriced] == [("eu-west-1", 30 * 60_000)]

    store.add_price("g5.xlarge", Decimal("1.250"), None, "test: eu-west-1", region="eu-west-1")
    (repriced,) = store.usage_rows(now=at(90))
    assert (repriced.unpriced_ms, repriced.usage.cost_usd) == (0, Decimal("3.134000"))
    # The rollup (all-time counters) was counted again with the new region's price.
    (totals,) = store.usage_totals(now=at(90))
    assert totals.usage.cost_usd == Decimal("3.134000")
    assert store.usage(now=at(90)) == usage_by_key(store.intervals(), store.price_book(), now_ms=ms(90))
    lines = store.invoice_lines(now=at(90), since=at(-60), until=at(90))
    assert [(line.region, line.usd_per_hour, line.price_basis, line.subtotal_usd) for line in lines] == [
        ("eu-west-1", Decimal("1.250000"), "on-demand", Decimal("0.625000")),
        ("us-east-1", Decimal("1.006000"), "on-demand", Decimal("1.006000")),
        ("us-west-2", Decimal("1.006000"), "on-demand", Decimal("0.503000")),
        ("us-west-2", Decimal("2.000000"), "on-demand", Decimal("1.000000")),
    ]
    assert (lines[3].price_valid_from, lines[3].price_source) == (at(30), "test: us-west-2 change")


def test_a_spot_interval_without_a_spot_price_is_priced_on_demand_and_says_so(store: LedgerStore) -> None:
    run(store, "i-spot", 0, 10, tenant="vision", pricing_model=SPOT, zone="us-east-1a")
    (line,) = store.invoice_lines(now=at(20), since=at(-60), until=at(20))
    assert (line.pricing_model, line.price_basis, line.usd_per_hour) == (SPOT, FALLBACK, Decimal("1.006000"))
    assert line.subtotal_usd == Decimal("0.167667")  # 10 minutes at 1.006 an hour
    spot = PriceKey("g5.xlarge", "us-east-1", SPOT, "us-east-1a")
    assert store.prices_at([spot], at(5)) == {spot: Decimal("1.006000")}
    assert store.usage(now=at(20)) == usage_by_key(store.intervals(), store.price_book(), now_ms=ms(20))


def test_runway_and_admission_use_the_regions_price(store: LedgerStore) -> None:
    store.add_price("g5.xlarge", Decimal("1.250"), None, "test: eu-west-1", region="eu-west-1")
    store.set_budget(Budget("product", Decimal(10), "month"))
    run(store, "i-eu", 0, None, tenant="product", region="eu-west-1", cap_minutes=60)
    (status,) = store.runways(now=at(15), default_cap=HOUR, tenants=["product"])
    assert (status.spent_usd, status.committed_usd) == (Decimal("0.312500"), Decimal("0.937500"))
    assert (status.totals.burn_usd_per_hour, status.remaining_usd) == (
        Decimal("1.250000"),
        Decimal("8.750000"),
    )
    pure = runway_totals(store.intervals(tenant="product"), store.price_book(),
                         period_start_ms=ms(-60 * 24 * 4 - 600), now_ms=ms(15), default_cap_ms=3_600_000)  # fmt: skip
    assert (pure.spent_usd_hour_ms, pure.committed_usd_hour_ms) == (
        status.totals.spent_usd_hour_ms,
        status.totals.committed_usd_hour_ms,
    )
    granted = store.admit(AdmissionRequest("product", "g5.xlarge", 2, HOUR, region="eu-west-1"),
                          now=at(15), default_cap=HOUR, lease=timedelta(minutes=30))  # fmt: skip
    assert (granted.granted, granted.needed_usd) == (True, Decimal("2.500000"))
    (after,) = store.runways(now=at(15), default_cap=HOUR, tenants=["product"])
    assert after.reserved_usd == Decimal("2.500000")
    refused = store.admit(AdmissionRequest("product", "g5.xlarge", 1, HOUR, region="ap-south-1"),
                          now=at(15), default_cap=HOUR, lease=timedelta(minutes=30))  # fmt: skip
    assert not refused.granted
    assert "in ap-south-1" in str(refused.reason)


def test_on_demand_prices_are_added_by_the_owners_function_only(store: LedgerStore) -> None:
    from guardrails.errors import InputError

    with pytest.raises(InputError, match="only on-demand"):
        store.add_prices([(PriceKey("g5.xlarge", "us-east-1", SPOT, "us-east-1a"), Decimal(1), None)], "test")
