"""Spot intervals priced by their zone's spot history: exact across a change within an interval, on
demand (and marked so) before the zone's first spot price, in usage, rollups, invoices and runway
alike. Spot history only grows at its end, within the last 24 hours, and is audited; each refused
path is tried for real, as the app role and as the owner. Times are near the database's real clock,
since that is what the rule is measured against."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import psycopg
import pytest
from ledger_streams import step, who
from psycopg.conninfo import make_conninfo

from guardrails.errors import InputError
from guardrails.invoice import FALLBACK
from guardrails.ledger import SPOT, PriceKey, to_ms, usage_by_key
from guardrails.runway import Budget, runway_totals
from guardrails.spot_prices import SpotPrice, spot_changes
from lambdas.ledger.store import LedgerStore

HOUR_MS = 3_600_000
ZONE_A = PriceKey("g5.xlarge", "us-east-1", SPOT, "us-east-1a")
ZONE_B = PriceKey("g5.xlarge", "us-east-1", SPOT, "us-east-1b")


@pytest.fixture
def now() -> datetime:
    """The real time, to the second (the ledger's spot rule is measured against its own clock)."""
    return datetime.now(UTC).replace(microsecond=0)


def test_a_spot_interval_is_priced_by_its_zones_prices_across_a_change(
    store: LedgerStore, now: datetime
) -> None:
    n = to_ms(now)
    host = who("vision", pricing_model=SPOT, zone="us-east-1a")
    store.append([step("r", "i-a", "running", n - 3 * HOUR_MS, host), step("s", "i-a", "stopped", n - HOUR_MS, host)],
                 source="meter", received_at=now)  # fmt: skip
    (before,) = store.usage_totals(now=now)
    assert before.usage.cost_usd == Decimal("2.012000")  # two hours on demand: no spot price yet
    recorded = store.record_spot_prices([SpotPrice(ZONE_A, n - 150 * 60_000, Decimal("0.400")),
                                         SpotPrice(ZONE_A, n - 90 * 60_000, Decimal("0.500"))])  # fmt: skip
    assert recorded == 2
    # 30 min on demand (1.006/h) before the first spot price, 60 min at 0.40, 30 min at 0.50.
    expected = Decimal("0.503") + Decimal("0.400") + Decimal("0.250")
    (row,) = store.usage_rows(now=now)
    assert (row.usage.cost_usd, row.unpriced_ms) == (expected, 0)
    (after,) = store.usage_totals(now=now)
    assert after.usage.cost_usd == expected  # the rollup moved with the new prices
    assert after.usage.accelerator_ms == before.usage.accelerator_ms
    lines = store.invoice_lines(now=now, since=now - timedelta(hours=4), until=now)
    assert [(line.price_basis, line.usd_per_hour, line.subtotal_usd) for line in lines] == [
        (FALLBACK, Decimal("1.006000"), Decimal("0.503000")),
        ("spot", Decimal("0.400000"), Decimal("0.400000")),
        ("spot", Decimal("0.500000"), Decimal("0.250000")),
    ]
    assert lines[1].price_valid_from == now - timedelta(minutes=150)
    assert lines[1].price_source == "EC2 DescribeSpotPriceHistory"
    assert store.usage(now=now) == usage_by_key(store.intervals(), store.price_book(), now_ms=n)


def test_a_spot_tenants_runway_burns_at_its_zones_price(store: LedgerStore, now: datetime) -> None:
    n = to_ms(now)
    store.set_budget(Budget("vision", Decimal(50), "month"))
    store.record_spot_prices([SpotPrice(ZONE_B, n - 2 * HOUR_MS, Decimal("0.300"))])
    host = who("vision", cap_minutes=90, pricing_model=SPOT, zone="us-east-1b")
    store.append([step("r", "i-b", "running", n - HOUR_MS, host)], source="meter", received_at=now)
    (status,) = store.runways(now=now, default_cap=timedelta(hours=1), tenants=["vision"])
    assert status.totals.burn_usd_per_hour == Decimal("0.300000")
    assert status.committed_usd == Decimal("0.150000")  # the 30 minutes left to its cap, at 0.30
    pure = runway_totals(store.intervals(tenant="vision"), store.price_book(),
                         period_start_ms=to_ms(status.period_start), now_ms=n, default_cap_ms=HOUR_MS)  # fmt: skip
    assert (pure.spent_usd_hour_ms, pure.committed_usd_hour_ms, pure.burn_usd_per_hour) == (
        status.totals.spent_usd_hour_ms,
        status.totals.committed_usd_hour_ms,
        status.totals.burn_usd_per_hour,
    )


def test_only_changes_from_where_the_ledgers_history_ends_are_recorded() -> None:
    now_ms = 100 * HOUR_MS
    window_start = now_ms - 23 * HOUR_MS
    history = [
        SpotPrice(ZONE_A, 10 * HOUR_MS, Decimal("0.30")),  # before the window: in effect at its start
        SpotPrice(ZONE_A, 80 * HOUR_MS, Decimal("0.30")),  # the same price again: no change
        SpotPrice(ZONE_A, 90 * HOUR_MS, Decimal("0.35")),
        SpotPrice(ZONE_B, 99 * HOUR_MS, Decimal("0.20")),  # before ZONE_B's latest: clamped after it
        SpotPrice(ZONE_B, 101 * HOUR_MS, Decimal("0.90")),  # not yet in effect
    ]
    latest = {ZONE_B: SpotPrice(ZONE_B, 99 * HOUR_MS + 5, Decimal("0.25"))}
    assert spot_changes(history, latest, now_ms=now_ms) == [
        SpotPrice(ZONE_A, window_start, Decimal("0.30")),
        SpotPrice(ZONE_A, 90 * HOUR_MS, Decimal("0.35")),
        SpotPrice(ZONE_B, 99 * HOUR_MS + 6, Decimal("0.20")),
    ]
    assert spot_changes([SpotPrice(ZONE_B, 98 * HOUR_MS, Decimal("0.25"))], latest, now_ms=now_ms) == []


@pytest.fixture
def app(ledger_url: str) -> Iterator[tuple[LedgerStore, str]]:
    """The ledger as a login role that is a member of parkbrake_app (the reconciler's)."""
    name = f"parkbrake_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ledger_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN IN ROLE parkbrake_app")
    store = LedgerStore.connect(make_conninfo(ledger_url, user=name))
    yield store, name
    store.close()
    with psycopg.connect(ledger_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,))
        admin.execute(f"DROP OWNED BY {name}")
        admin.execute(f"DROP ROLE {name}")


def test_spot_history_grows_only_at_its_end_within_a_day_and_is_audited(
    store: LedgerStore, app: tuple[LedgerStore, str], ledger_url: str, now: datetime
) -> None:
    reconciler, role = app
    n = to_ms(now)
    assert reconciler.record_spot_prices([SpotPrice(ZONE_A, n - HOUR_MS, Decimal("0.400"))]) == 1
    assert reconciler.record_spot_prices([SpotPrice(ZONE_A, n - HOUR_MS, Decimal("0.400"))]) == 0  # again
    refused = {
        "at or before its latest": SpotPrice(ZONE_A, n - 2 * HOUR_MS, Decimal("0.001")),
        "within the last 24 hours": SpotPrice(ZONE_B, n - 25 * HOUR_MS, Decimal("0.001")),
        "within the last 24 hours (future)": SpotPrice(ZONE_B, n + HOUR_MS, Decimal("0.001")),
        "needs the availability zone": SpotPrice(PriceKey("g5.xlarge", "us-east-1", SPOT, ""), n, Decimal(1)),
    }
    for reason, price in refused.items():
        with pytest.raises(InputError, match=reason.removesuffix(" (future)")):
            reconciler.record_spot_prices([price])
    with pytest.raises(InputError, match="within the last 24 hours"):  # the owner is held to it too
        store.record_spot_prices([SpotPrice(ZONE_B, n - 25 * HOUR_MS, Decimal("0.001"))])
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        for statement in (
            "INSERT INTO prices (instance_type, region, pricing_model, zone, valid_from, usd_per_hour, source) "
            "VALUES ('g5.xlarge', 'us-east-1', 'spot', 'us-east-1c', now(), 0, 'forged')",
            "SELECT ledger_add_prices('{g5.xlarge}', '{us-east-1}', '{-infinity}', '{0}', 'forged')",
        ):
            with (
                pytest.raises(psycopg.errors.InsufficientPrivilege),
                psycopg.connect(make_conninfo(ledger_url, user=role), autocommit=True) as forger,
            ):
                forger.execute(statement)
        audit = owner.execute(
            "SELECT zone, usd_per_hour, source, recorded_by FROM price_changes WHERE pricing_model = 'spot'"
        ).fetchall()
    assert audit == [("us-east-1a", Decimal("0.400000"), "EC2 DescribeSpotPriceHistory", role)]
    _, latest = store.latest_spot_prices([ZONE_A, ZONE_B])
    assert latest == {ZONE_A: SpotPrice(ZONE_A, n - HOUR_MS, Decimal("0.400000"))}
