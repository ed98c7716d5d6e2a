"""Nothing paid for is dropped: usage metered as ``unattributed`` takes its tenant when the ledger
learns it, from an event of the same launch or from an operator (``ledger attribute``), and the
ledger is a function of the events and the attributions, in any order of arrival."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_streams import T0, end_of, ms, step, who
from test_ledger_order_free import EXAMPLES, deliver, deliveries, host_history

from guardrails.decisions import Decision
from guardrails.errors import InputError
from guardrails.ledger import STATES, UNATTRIBUTED, Transition, from_ms, intervals_from, usage_by_key
from lambdas.ledger.attributions import (
    AttributionRequest,
    attribute,
    attribution_decision,
    log_attribution,
    unattributed_hosts,
    waiting_stops,
    waiting_stops_line,
)
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import UNBOUNDED_MS, LedgerStore

RANK = {state: rank for rank, state in enumerate(STATES)}
LAUNCH_ENDS = ("stopped", "terminated")
GUESS = who(UNATTRIBUTED, UNATTRIBUTED, "g4dn.xlarge", 90)  # the host's current type, no tags
RECEIVED = T0 + timedelta(days=1)


def order(event: Transition) -> tuple[int, int, str]:
    return event.at_ms, RANK[event.state], event.event_id


def resolved(
    events: list[Transition], operator: list[tuple[str, int, int, str, str | None]]
) -> list[Transition]:
    """The reference: each unattributed event with its launch's attribution (the latest event with a
    tenant at or before it, else the earliest after it, between the host's stops that bound the
    launch), else the operator's (the latest-starting one covering it)."""
    unique = sorted({event.event_id: event for event in events}.values(), key=order)
    out = []
    for event in unique:
        if event.attribution.tenant != UNATTRIBUTED:
            out.append(event)
            continue
        host = [e for e in unique if e.instance_id == event.instance_id]
        before = [e for e in host if e.state in LAUNCH_ENDS and order(e) < order(event)]
        ending = [e for e in host if e.state in LAUNCH_ENDS and order(e) >= order(event)]
        low = order(before[-1]) if before else None
        high = order(ending[0]) if ending else None
        earlier = [
            e for e in host
            if e.attribution.tenant != UNATTRIBUTED and order(e) <= order(event) and (low is None or order(e) > low)
        ]  # fmt: skip
        later = [
            e for e in host
            if e.attribution.tenant != UNATTRIBUTED and order(e) > order(event) and (high is None or order(e) <= high)
        ]  # fmt: skip
        known = earlier[-1] if earlier else later[0] if later else None
        if known is not None:
            out.append(replace(event, attribution=known.attribution))
            continue
        covering = sorted(
            (since, tenant, pool)
            for host_id, since, until, tenant, pool in operator
            if host_id == event.instance_id and since <= event.at_ms < until
        )
        if covering:
            _, tenant, pool = covering[-1]
            out.append(
                replace(
                    event,
                    attribution=replace(
                        event.attribution, tenant=tenant, pool=pool or event.attribution.pool
                    ),
                )
            )
        else:
            out.append(event)
    return out


def request(
    instance_id: str, tenant: str, since_ms: int, *, until_ms: int | None = None, pool: str | None = None
) -> AttributionRequest:
    until = None if until_ms is None else from_ms(until_ms)
    return AttributionRequest(
        instance_id, tenant, from_ms(since_ms), until, pool, "arn:aws:iam::123456789012:user/ops", "OPS-42"
    )


def unattributed_launches(rng: random.Random, history: list[Transition]) -> list[Transition]:
    """``history`` with some launches' events metered as unattributed (the current type, no tags),
    all or all but one of them: what a backfill before the host's current launch meters."""
    launches: dict[str, list[int]] = {}
    for index, event in enumerate(history):
        launches.setdefault(event.event_id.rsplit("-", 1)[0], []).append(index)
    out = list(history)
    for indexes in launches.values():
        if rng.random() < 0.6:
            keep = rng.choice([None, *indexes])
            for index in indexes:
                if index != keep:
                    out[index] = replace(history[index], attribution=GUESS)
    return out


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rng=st.randoms(use_true_random=True))
def test_attributions_from_events_and_operators_derive_the_same_in_any_order(
    store: LedgerStore, rng: random.Random
) -> None:
    prefix = f"{uuid.uuid4().hex[:8]}-"
    events = [
        event
        for index in range(rng.randint(1, 3))
        for event in unattributed_launches(rng, host_history(rng, f"{prefix}i-{index}", prefix))
    ]
    host = events[0].instance_id
    since = rng.choice([e.at_ms for e in events if e.instance_id == host])
    operator = [(host, since, UNBOUNDED_MS, f"{prefix}ops", rng.choice([None, "backfill"]))]
    plan = deliveries(rng, events)
    attribute_after = rng.randint(0, len(plan))  # the attribution before, between or after the events
    for number, delivery in enumerate(plan):
        if number == attribute_after:
            attribute(store, request(host, f"{prefix}ops", since, pool=operator[0][4]), dry_run=False)
        deliver(store, rng, delivery)
    if attribute_after == len(plan):
        attribute(store, request(host, f"{prefix}ops", since, pool=operator[0][4]), dry_run=False)

    truth = resolved(events, operator)
    expected = intervals_from(truth)
    stored = store.intervals()
    mine = [i for i in stored if i.instance_id.startswith(prefix)]
    assert sorted(mine, key=lambda i: i.opened_by) == sorted(expected, key=lambda i: i.opened_by)
    tenants = sorted({e.attribution.tenant for e in truth})
    now_ms = end_of(events) + 60_000
    reference = usage_by_key(expected, store.price_book(), now_ms=now_ms)
    found = store.usage(now=from_ms(now_ms), tenants=tenants)
    if UNATTRIBUTED in tenants:  # other examples' unattributed hosts share the tenant
        found = {k: v for k, v in found.items() if k[0] != UNATTRIBUTED}
        reference = {k: v for k, v in reference.items() if k[0] != UNATTRIBUTED}
    assert found == reference


BACKFILLED = "i-0aaaaaaaaaaaaaaa1"
KNOWN = who("research", "training", "p4d.24xlarge", 90)


def launch_of_november() -> list[Transition]:
    """A host's earlier launch, backfilled after it restarted: the running metered unattributed as the
    current type; later the live meter's stopping of that launch, with its tags, arrives."""
    return [
        step("nov-run", BACKFILLED, "running", ms(0), GUESS),
        step("nov-stopping", BACKFILLED, "stopping", ms(60), KNOWN),
        step("nov-stopped", BACKFILLED, "stopped", ms(61), GUESS),
        step("dec-run", BACKFILLED, "running", ms(600), who("vision", "inference", "g4dn.xlarge", 90)),
    ]


@pytest.mark.parametrize("arrival", ["unattributed-first", "known-first"])
def test_an_event_of_the_same_launch_attributes_its_unattributed_intervals(
    store: LedgerStore, arrival: str
) -> None:
    run, stopping, stopped, later = launch_of_november()
    ordered = (
        [run, stopped, later, stopping]
        if arrival == "unattributed-first"
        else [stopping, later, stopped, run]
    )
    for event in ordered:
        store.append([event], source="replay", received_at=RECEIVED)
        store.settle()
    (november, december) = store.intervals(tenant=None)
    assert (november.attribution, november.started_ms, november.ended_ms) == (KNOWN, ms(0), ms(60))
    assert december.attribution.tenant == "vision"  # the next launch keeps its own
    usage = store.usage(now=from_ms(ms(700)), tenants=["research", UNATTRIBUTED])
    assert usage[("research", "training", "p4d.24xlarge")].accelerator_ms == 8 * 3_600_000
    assert not [key for key in usage if key[0] == UNATTRIBUTED]


def test_a_stop_between_ends_the_launch_so_a_later_event_attributes_nothing_before_it(
    store: LedgerStore,
) -> None:
    run, _stopping, stopped, later = launch_of_november()
    store.append([run, later], source="replay", received_at=RECEIVED)
    assert (
        store.intervals()[0].attribution.tenant == "vision"
    )  # no stop between: one launch, as far as it knows
    store.append([stopped], source="replay", received_at=RECEIVED)
    first = store.intervals()[0]
    assert (first.attribution.tenant, first.ended_ms) == (UNATTRIBUTED, ms(61))


@pytest.mark.parametrize("arrival", ["attribute-first", "events-first"])
def test_an_operator_attribution_given_before_or_after_the_events_gives_the_same_ledger(
    store: LedgerStore, arrival: str
) -> None:
    events = [
        step("u-run", BACKFILLED, "running", ms(0), GUESS),
        step("u-stop", BACKFILLED, "stopped", ms(30), GUESS),
        step("u-run2", BACKFILLED, "running", ms(100), GUESS),
        step("u-stop2", BACKFILLED, "stopped", ms(160), GUESS),
    ]
    ask = request(BACKFILLED, "research", ms(90), pool="training")
    if arrival == "attribute-first":
        assert attribute(store, ask, dry_run=False) == []  # nothing to take yet
        store.append(events, source="reconciler", received_at=RECEIVED)
    else:
        store.append(events, source="reconciler", received_at=RECEIVED)
        preview = attribute(store, ask, dry_run=True)
        assert [i.attribution.tenant for i in store.intervals()] == [
            UNATTRIBUTED,
            UNATTRIBUTED,
        ]  # a dry run keeps
        changed = attribute(store, ask, dry_run=False)
        assert changed == preview
        assert [(c.opened_by, c.tenant_before, c.tenant_after, c.pool_after) for c in changed] == [
            ("u-run2", UNATTRIBUTED, "research", "training")
        ]
        assert changed[0].accelerator_ms == 60 * 60_000
    first, second = store.intervals()
    assert (first.attribution.tenant, second.attribution.tenant, second.attribution.pool) == (
        UNATTRIBUTED, "research", "training",
    )  # fmt: skip
    usage = store.usage(now=from_ms(ms(200)), tenants=["research"])
    assert usage == {("research", "training", "g4dn.xlarge"): usage[("research", "training", "g4dn.xlarge")]}
    assert usage[("research", "training", "g4dn.xlarge")].accelerator_ms == 60 * 60_000
    totals = {row.key: row.usage for row in store.usage_totals(now=from_ms(ms(200)))}
    assert totals[("research", "training", "g4dn.xlarge")].accelerator_ms == 60 * 60_000  # the rollups moved
    assert totals[(UNATTRIBUTED, UNATTRIBUTED, "g4dn.xlarge")].accelerator_ms == 30 * 60_000
    runways = {r.tenant: r for r in store.runways(now=from_ms(ms(200)), default_cap=timedelta(hours=1))}
    assert runways["research"].spent_usd > 0  # runway counts it at once
    assert runways[UNATTRIBUTED].spent_usd > 0  # the first launch is still nobody's, and shown
    assert [
        h.instance_id
        for h in unattributed_hosts(store, now=from_ms(ms(200)), since=T0, until=from_ms(ms(200)))
    ] == [BACKFILLED]


def test_a_later_attribution_from_the_same_instant_replaces_the_earlier(store: LedgerStore) -> None:
    store.append([step("r", BACKFILLED, "running", ms(0), GUESS), step("s", BACKFILLED, "stopped", ms(10), GUESS)],
                 source="reconciler", received_at=RECEIVED)  # fmt: skip
    attribute(store, request(BACKFILLED, "research", ms(0)), dry_run=False)
    changed = attribute(store, request(BACKFILLED, "vision", ms(0)), dry_run=False)
    assert [(c.tenant_before, c.tenant_after, c.pool_after) for c in changed] == [
        ("research", "vision", UNATTRIBUTED)
    ]
    assert store.usage(now=from_ms(ms(20)), tenants=["research"]) == {}


def test_an_attribution_is_refused_for_the_unattributed_tenant_a_missing_reason_or_an_empty_window() -> None:
    with pytest.raises(InputError, match="--tenant: unattributed"):
        request(BACKFILLED, UNATTRIBUTED, ms(0))
    with pytest.raises(InputError, match="--reason"):
        AttributionRequest(BACKFILLED, "research", T0, None, None, "arn", " ")
    with pytest.raises(InputError, match="--until: must be after --since"):
        request(BACKFILLED, "research", ms(10), until_ms=ms(10))


def test_an_attribution_is_logged_as_a_decision_with_its_actor_and_reason(store: LedgerStore) -> None:
    store.append([step("r", BACKFILLED, "running", ms(0), GUESS), step("s", BACKFILLED, "stopped", ms(10), GUESS)],
                 source="reconciler", received_at=RECEIVED)  # fmt: skip
    ask = request(BACKFILLED, "research", ms(0))
    changed = attribute(store, ask, dry_run=False)
    now = datetime(2036, 5, 6, tzinfo=UTC)
    log_attribution(store, ask, changed, now=now)
    (logged,) = DecisionLedger.of(store).read(kinds=["attribute"])
    assert logged.decision == attribution_decision(ask, changed, now=now)
    decision: Decision = logged.decision
    assert (decision.actor, decision.reason, decision.tenant, decision.instance_id) == (
        "arn:aws:iam::123456789012:user/ops", "OPS-42", "research", BACKFILLED,
    )  # fmt: skip
    assert decision.details["intervals"] == ["r"]
    assert decision.details["accelerator_seconds"] == 600.0


def test_a_stop_waiting_for_its_start_is_reported_once_older_than_a_day(store: LedgerStore) -> None:
    alone = step("alone-stop", BACKFILLED, "stopped", ms(0), GUESS)
    other = "i-0bbbbbbbbbbbbbbb2"
    store.append([alone, step("o-run", other, "running", ms(0)), step("o-stop", other, "stopped", ms(5))],
                 source="replay", received_at=RECEIVED)  # fmt: skip
    assert waiting_stops(store, now=from_ms(ms(0)) + timedelta(hours=23)) == []  # not a day yet
    (waiting,) = waiting_stops(store, now=from_ms(ms(0)) + timedelta(days=1, seconds=1))
    assert (waiting.instance_id, waiting.event_id, waiting.state) == (BACKFILLED, "alone-stop", "stopped")
    assert "waiting: 1 stop(s) older than a day with no start in the ledger: i-0aaaaaaaaaaaaaaa1" in (
        waiting_stops_line([waiting])
    )
    store.append(
        [step("start", BACKFILLED, "running", ms(-30), GUESS)], source="replay", received_at=RECEIVED
    )
    assert waiting_stops(store, now=from_ms(ms(0)) + timedelta(days=2)) == []  # its start arrived
    assert store.intervals()[0].ended_ms == ms(0)


@pytest.mark.parametrize(
    ("history", "waiting"),
    [
        # an earlier launch, then a stop whose running is missing: reported
        (
            (
                ("r1", "running", 0),
                ("s1", "stopping", 5),
                ("t1", "stopped", 6),
                ("s2", "stopping", 50),
                ("t2", "stopped", 51),
            ),
            ["s2"],
        ),
        # a stopped host terminated: one launch going forward, nothing waits
        (
            (
                ("r1", "running", 0),
                ("t1", "stopped", 6),
                ("d1", "shutting-down", 40),
                ("x1", "terminated", 41),
            ),
            [],
        ),
        # a second stopped after a stopped, with a pending between and no running: reported
        ((("r1", "running", 0), ("t1", "stopped", 6), ("p2", "pending", 40), ("t2", "stopped", 50)), ["t2"]),
        # every launch has its running: nothing waits
        ((("r1", "running", 0), ("t1", "stopped", 6), ("r2", "running", 40), ("t2", "stopped", 50)), []),
    ],
)
def test_a_stop_after_an_earlier_launch_waits_for_its_missing_running(
    store: LedgerStore, history: tuple[tuple[str, str, int], ...], waiting: list[str]
) -> None:
    events = [step(event_id, BACKFILLED, state, ms(minute), GUESS) for event_id, state, minute in history]
    store.append(events, source="replay", received_at=RECEIVED)
    later = from_ms(ms(60)) + timedelta(days=1, seconds=1)
    assert [stop.event_id for stop in waiting_stops(store, now=later)] == waiting
    if waiting:  # the missing running arrives: nothing waits any more, and the stop ends its interval
        store.append(
            [step("r2", BACKFILLED, "running", ms(45), GUESS)], source="replay", received_at=RECEIVED
        )
        assert waiting_stops(store, now=later) == []
        assert [interval.ended_ms for interval in store.intervals()][-1] == ms(50)
