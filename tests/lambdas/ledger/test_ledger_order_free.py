"""The ledger is a function of the set of events: whatever their order, their split into batches and
files, the path each takes (the meter one by one, a batch of replays or the reconciler's, an
``ingest`` backfill queued in batches and settled later) and however often each is sent, the
database derives the intervals, accelerator-seconds and costs the pure rules (guardrails.ledger)
derive from all the events at once."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_streams import GPU_TYPES, T0, T0_MS, TENANTS, end_of, step, who

from guardrails.ledger import ON_DEMAND, SPOT, Transition, Usage, from_ms, intervals_from, usage_by_key
from lambdas.ledger.store import LedgerStore

STOPS = (("stopping", "stopped"), ("stopped",), ("shutting-down", "terminated"))
# The CI bound: each example appends a few dozen events through several paths into PostgreSQL.
EXAMPLES = 40


def host_history(rng: random.Random, instance_id: str, tenant_prefix: str) -> list[Transition]:
    """One host's launches, each with its own type (a resize between them) and pricing model, some
    retagged while running, the last possibly still running; a pending before some starts."""
    events: list[Transition] = []
    clock = T0_MS + rng.randint(0, 600_000)
    tenant = tenant_prefix + rng.choice(TENANTS)
    for launch in range(rng.randint(1, 4)):
        spot = rng.random() < 0.4
        attribution = who(
            tenant,
            rng.choice(("training", "inference")),
            rng.choice(sorted(GPU_TYPES)),
            rng.randint(1, 120),
            pricing_model=SPOT if spot else ON_DEMAND,
            zone=rng.choice(("us-east-1a", "us-east-1b")) if spot else None,
        )
        name = f"{instance_id}-{launch}"
        if rng.random() < 0.3:
            events.append(
                step(f"{name}-p", instance_id, "pending", clock - rng.randint(0, 5_000), attribution)
            )
        events.append(step(f"{name}-r", instance_id, "running", clock, attribution))
        end = clock + rng.choice((0, rng.randint(1, 59_999), rng.randint(60_000, 5_400_000)))
        if end - clock > 2 and rng.random() < 0.3:  # retagged while running: a running of another pool
            retag = rng.randint(clock + 1, end - 1)
            events.append(
                step(f"{name}-t", instance_id, "running", retag, replace(attribution, pool="retagged"))
            )
        if rng.random() < 0.15:  # still running: open to the end
            break
        when = end
        for index, state in enumerate(rng.choice(STOPS)):
            events.append(step(f"{name}-s{index}", instance_id, state, when, attribution))
            when += rng.randint(0, 30_000)
        clock = when + rng.randint(1, 600_000)
    return events


@dataclass(frozen=True)
class Delivery:
    """How one part of the stream reaches the ledger."""

    path: str  # "meter" (one event per append), "batch" (one append), "ingest" (queued files)
    source: str
    events: list[Transition]


def deliveries(rng: random.Random, events: list[Transition]) -> list[Delivery]:
    """``events`` with repeats, shuffled, cut into parts, each given a path."""
    stream = events + [rng.choice(events) for _ in range(rng.randint(0, len(events)))]
    rng.shuffle(stream)
    cuts = (
        sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(0, 4))))
        if len(stream) > 1
        else []
    )
    parts = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    plan = []
    for part in parts:
        path = rng.choice(("meter", "batch", "ingest"))
        source = {"meter": "meter", "ingest": "ingest"}.get(path) or rng.choice(
            ("meter", "replay", "reconciler")
        )
        plan.append(Delivery(path, source, part))
    return plan


def deliver(store: LedgerStore, rng: random.Random, delivery: Delivery) -> None:
    received_at = T0 + timedelta(days=1, seconds=rng.randint(0, 10_000))
    if delivery.path == "meter":
        for event in delivery.events:  # settled in the call (as the meter appends) or left pending
            store.append([event], source=delivery.source, received_at=received_at, settled=rng.random() < 0.5)
            if rng.random() < 0.2:
                store.settle()
    elif delivery.path == "batch":
        store.append(
            delivery.events, source=delivery.source, received_at=received_at, settled=rng.random() < 0.5
        )
    else:  # a file queued in batches, settled between some of them and at its end, as ledger ingest does
        size = rng.randint(1, max(1, len(delivery.events)))
        for start in range(0, len(delivery.events), size):
            store.queue_backfill(delivery.events[start : start + size], received_at=received_at)
            if rng.random() < 0.3:
                store.settle()
        outcomes = store.backfill_outcomes(delivery.events, received_at=received_at).outcomes
        assert set(outcomes.values()) <= {"appended", "duplicate"}, outcomes


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rng=st.randoms(use_true_random=True))
def test_any_order_split_path_and_repeats_derive_what_all_the_events_derive_at_once(
    store: LedgerStore, rng: random.Random
) -> None:
    prefix = f"{uuid.uuid4().hex[:8]}-"  # each example's own hosts and tenants
    events = [
        event
        for index in range(rng.randint(1, 4))
        for event in host_history(rng, f"{prefix}i-{index}", prefix)
    ]
    for delivery in deliveries(rng, events):
        deliver(store, rng, delivery)
        if rng.random() < 0.3:  # a reader in between settles what was appended so far
            store.intervals(tenant=events[0].attribution.tenant)

    expected = intervals_from(events)
    tenants = sorted({event.attribution.tenant for event in events})
    stored = [interval for tenant in tenants for interval in store.intervals(tenant=tenant)]
    assert sorted(stored, key=lambda i: i.opened_by) == sorted(expected, key=lambda i: i.opened_by)

    now_ms = end_of(events) + rng.randint(0, 3_600_000)
    book = store.price_book()
    reference = usage_by_key(expected, book, now_ms=now_ms)
    assert store.usage(now=from_ms(now_ms), tenants=tenants) == reference
    totals = {row.key: row.total for row in store.usage_totals(now=from_ms(now_ms)) if row.tenant in tenants}
    # The rollups keep a key whose hosts moved to another, at zero; the rules have no such key.
    assert {key: usage for key, usage in totals.items() if usage != Usage()} == {
        key: usage for key, usage in reference.items() if usage != Usage()
    }
