"""Exactness over random streams: whatever the order and however often events arrive, every tenant's
accelerator-milliseconds equal Σ accelerators × elapsed, and the database agrees with the rules."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from datetime import timedelta
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_streams import GPU_TYPES, T0_MS, end_of, events_of, random_fleet, redelivered, step, us_east_book

from guardrails.ledger import Usage, UsageKey, billable_ms, from_ms, intervals_from, usage_by_key
from guardrails.runway import PERIODS, Budget, runway_totals
from lambdas.ledger.store import LedgerStore

FLAT = us_east_book([(name, None, Decimal("1.5")) for name in GPU_TYPES])
seeds = st.randoms(use_true_random=True)


def without_zeros(usage: dict[UsageKey, Usage]) -> dict[UsageKey, Usage]:
    """The rollup keeps a key whose hosts moved to another (at zero); the rules have no such key."""
    return {key: amount for key, amount in usage.items() if amount != Usage()}


def per_tenant_accelerator_ms(usage: dict[UsageKey, Usage]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for (tenant, _pool, _type), amount in usage.items():
        totals[tenant] += amount.accelerator_ms
    return totals


@settings(max_examples=3000, deadline=None)
@given(seeds)
def test_accelerator_seconds_equal_gpus_times_elapsed_for_any_delivery(rng: random.Random) -> None:
    fleet = random_fleet(rng)
    events = events_of(fleet)
    stream = redelivered(rng, events)
    now_ms = end_of(events)
    truth: Counter[str] = Counter()
    for host in fleet:
        truth[host.attribution.tenant] += host.accelerator_ms(now_ms)
    ledger = per_tenant_accelerator_ms(usage_by_key(intervals_from(stream), FLAT, now_ms=now_ms))
    assert +ledger == +truth  # unary + drops zero counts: a host that ran 0 ms is 0 either way


@settings(max_examples=300, deadline=None)
@given(
    start_s=st.integers(0, 600),
    run_s=st.integers(0, 400),
    changes=st.dictionaries(st.integers(1, 1200), st.decimals("0.01", "100", places=2), max_size=4),
)
def test_cost_is_the_price_in_effect_over_every_billed_second(
    start_s: int, run_s: int, changes: dict[int, Decimal]
) -> None:
    base = Decimal("1.00")
    book = us_east_book(
        [("g5.xlarge", None, base)] + [("g5.xlarge", T0_MS + s * 1000, p) for s, p in changes.items()]
    )
    start = T0_MS + start_s * 1000
    events = [step("r", "i-1", "running", start), step("s", "i-1", "stopped", start + run_s * 1000)]
    ((_, usage),) = usage_by_key(intervals_from(events), book, now_ms=start + 10**7).items()

    def price_at(second: int) -> Decimal:
        in_effect = [changes[at] for at in sorted(changes) if at <= second]
        return in_effect[-1] if in_effect else base

    billed_seconds = billable_ms(run_s * 1000) // 1000
    assert usage.usd_hour_ms == sum(price_at(start_s + k) * 1000 for k in range(billed_seconds))


# UTC, zones behind and ahead of it, and one a quarter of an hour off the hour.
ZONES = ("UTC", "Europe/Berlin", "America/Los_Angeles", "Asia/Tokyo", "Asia/Kathmandu")


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rng=seeds)
def test_the_database_derives_the_same_intervals_usage_and_runway(
    store: LedgerStore, rng: random.Random
) -> None:
    # Each example writes its own hosts and tenants, so examples share the test's database safely.
    prefix = f"{uuid.uuid4().hex[:8]}-"
    fleet = random_fleet(rng, prefix, max_hosts=4)
    events = events_of(fleet, prefix)
    stream = redelivered(rng, events)
    for start in range(0, len(stream), 7):  # in batches, as several meters and a backfill would
        store.append(stream[start : start + 7], source="meter", received_at=from_ms(T0_MS))
    if rng.random() < 0.5:  # a price change somewhere in the streams' time (valid_from is unique)
        change_ms = T0_MS + rng.randint(0, 7_200_000) * 1000 + rng.randint(0, 999)
        store.add_price(
            "g5.xlarge", Decimal(rng.choice(["0.5", "2.25", "1.006"])), from_ms(change_ms), "test"
        )
    now_ms = end_of(events) + rng.choice([rng.randint(0, 3_600_000), rng.randint(86_400_000, 172_800_000)])
    tenants = sorted({host.attribution.tenant for host in fleet})
    for (
        tenant
    ) in tenants:  # periods starting at different midnights (local ones too): spend is clipped differently
        store.set_budget(Budget(tenant, Decimal(100), rng.choice(PERIODS), timezone=rng.choice(ZONES)))
    book = store.price_book()

    expected = intervals_from(stream)
    stored = [interval for tenant in tenants for interval in store.intervals(tenant=tenant)]
    assert sorted(stored, key=lambda i: i.opened_by) == sorted(expected, key=lambda i: i.opened_by)

    since = rng.choice([None, rng.randint(T0_MS - 60_000, now_ms)])
    until = rng.choice([None, rng.randint(since or T0_MS, now_ms + 600_000)])
    usage = store.usage(
        now=from_ms(now_ms),
        since=from_ms(since) if since is not None else None,
        until=from_ms(until) if until is not None else None,
        tenants=tenants,
    )
    assert usage == usage_by_key(expected, book, now_ms=now_ms, since_ms=since, until_ms=until)
    all_time = {
        row.key: row.total for row in store.usage_totals(now=from_ms(now_ms)) if row.tenant in tenants
    }
    assert without_zeros(all_time) == without_zeros(usage_by_key(expected, book, now_ms=now_ms))

    default_cap = timedelta(minutes=90)
    for status in store.runways(now=from_ms(now_ms), default_cap=default_cap, tenants=tenants):
        mine = [interval for interval in expected if interval.attribution.tenant == status.tenant]
        assert status.totals == runway_totals(
            mine, book, period_start_ms=int(status.period_start.timestamp() * 1000), now_ms=now_ms,
            default_cap_ms=int(default_cap.total_seconds() * 1000),
        )  # fmt: skip
