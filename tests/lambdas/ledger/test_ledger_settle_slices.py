"""A backfill never stalls the ledger: deriving attributes a host's events all at once (held to the
per-event rule by a property test), a settle takes one slice of a queued backfill, the meter's
settled append never settles a backfill, and one that waits past its lock timeout is reported."""

from __future__ import annotations

import itertools
import logging
import uuid
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_streams import T0, ms, step, who

from guardrails.ledger import UNATTRIBUTED, Transition
from lambdas.ledger.appends import SettleBusy, settle
from lambdas.ledger.store import LedgerStore

SLICE = 1_000  # ledger_backfill_slice()
QUEUED = "SELECT count(*) FROM ledger_backfill"
INTERVALS = """
SELECT opened_by, instance_id, tenant, pool, started_ms, ended_ms, closed_by FROM intervals ORDER BY opened_by
"""
TOTALS = "SELECT tenant, pool, instance_type, accelerator_ms FROM usage_totals ORDER BY 1, 2, 3"
NOBODY = who(UNATTRIBUTED, UNATTRIBUTED)
# Each host's cut: the event named, else the host's first.
CUTS = """
WITH cuts AS (
    SELECT c.instance_id, c.at_ms, c.state_rank, c.event_id
    FROM unnest(%(hosts)s::text[], %(cuts)s::text[]) AS h (host, named)
    CROSS JOIN LATERAL (SELECT * FROM events f WHERE f.instance_id = h.host AND (h.named IS NULL OR f.event_id = h.named)
                        ORDER BY f.at_ms, f.state_rank, f.event_id COLLATE "C" LIMIT 1) AS c
)
"""
# Every event of some hosts from their cuts through the per-event rule, and through the set-based one.
PER_EVENT = (
    CUTS
    + """
SELECT ROW(a.*)::text FROM cuts c
JOIN events e ON e.instance_id = c.instance_id
             AND (e.at_ms, e.state_rank, e.event_id COLLATE "C") >= (c.at_ms, c.state_rank, c.event_id COLLATE "C")
CROSS JOIN LATERAL ledger_attributed(e) AS a
ORDER BY e.event_id
"""
)
SET_BASED = (
    CUTS
    + """
SELECT ROW(a.*)::text
FROM ledger_attributed_from(ARRAY(SELECT ROW(c.*)::ledger_cut FROM cuts c)) AS a
ORDER BY a.event_id
"""
)
# Stored as the owner, straight into events (no derivation: only the attribution rules are compared).
STORE_EVENTS = """
INSERT INTO events (event_id, instance_id, state, event_time, tenant, pool, instance_type, accelerators, region,
                    source, pricing_model, at_ms, state_rank)
SELECT b.id, b.host, b.state, 'epoch'::timestamptz + b.at_ms * interval '1 millisecond', b.tenant, b.tenant,
       'g5.xlarge', 1, 'us-east-1', 'meter', 'on-demand', b.at_ms, ledger_state_rank(b.state)
FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[], %s::text[]) AS b (id, host, state, at_ms, tenant)
"""
STATES = ("pending", "running", "running", "stopping", "stopped", "terminated")
TENANTS = (UNATTRIBUTED, UNATTRIBUTED, "research", "product")


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[int, str, int, str]]:
    """(host, state, minute, tenant) of a few hosts' events: ties of minute, every state, unattributed often."""
    return draw(st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(STATES), st.integers(0, 30), st.sampled_from(TENANTS)),
        min_size=1, max_size=30,
    ))  # fmt: skip


# Each example appends hosts of its own (a fresh id), so the one database serves them all.
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    history=histories(),
    cut_picks=st.lists(st.integers(0, 40), min_size=3, max_size=3),
    operator=st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(1, 30))),
)
def test_deriving_attributes_a_hosts_events_at_once_as_the_per_event_rule_does(
    ledger_url: str,
    history: list[tuple[int, str, int, str]],
    cut_picks: list[int],
    operator: tuple[int, int, int] | None,
) -> None:
    run = uuid.uuid4().hex[:8]
    hosts = [f"i-{run}-{host}" for host in range(3)]
    events = [step(f"{run}-{n}", hosts[host], state, ms(minute), who(tenant, tenant))
              for n, (host, state, minute, tenant) in enumerate(history)]  # fmt: skip
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        owner.execute(STORE_EVENTS, list(map(list, zip(*[
            (e.event_id, e.instance_id, e.state, e.at_ms, e.attribution.tenant) for e in events
        ], strict=True))))  # fmt: skip
        if operator is not None:
            host, since, length = operator
            owner.execute(
                "INSERT INTO attributions (instance_id, since_ms, until_ms, tenant, pool, actor, reason)"
                " VALUES (%s, %s, %s, 'vision', NULL, 'test', 'test')",
                (hosts[host], ms(since), ms(since + length)),
            )
        by_host = {h: [e.event_id for e in events if e.instance_id == h] for h in hosts}
        cuts = [ids[pick % len(ids)] if ids and pick < 30 else None
                for ids, pick in zip(by_host.values(), cut_picks, strict=True)]  # fmt: skip
        arguments = {"hosts": hosts, "cuts": cuts}
        per_event = owner.execute(PER_EVENT, arguments).fetchall()
        assert owner.execute(SET_BASED, arguments).fetchall() == per_event


def mixed_backfill(hosts: int, per_host: int) -> list[Transition]:
    """Alternating running/stopped events a minute apart, unattributed but every other launch's stop."""
    return [
        step(f"b-{host}-{n}", f"i-b{host}", "running" if n % 2 == 0 else "stopped", ms(n),
             who() if n % 4 == 3 else NOBODY)
        for host in range(hosts)
        for n in range(per_host)
    ]  # fmt: skip


def test_a_settle_takes_one_slice_of_a_backfill_and_the_slices_derive_what_one_settle_would(
    store: LedgerStore, ledger_url: str
) -> None:
    backfill = mixed_backfill(2, 2_500)  # one host's events cut between two slices
    store.queue_backfill(backfill, received_at=T0)
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        assert settle(owner) == SLICE
        assert owner.execute(QUEUED).fetchone() == (len(backfill) - SLICE,)
        assert store.settle() == len(backfill) - SLICE  # slice by slice, to the end
        assert owner.execute(QUEUED).fetchone() == (0,)
        sliced = (owner.execute(INTERVALS).fetchall(), owner.execute(TOTALS).fetchall())
        owner.execute("SELECT ledger_rebuild()")  # every host derived at once, from its first event
        assert (owner.execute(INTERVALS).fetchall(), owner.execute(TOTALS).fetchall()) == sliced
    assert len(sliced[0]) == len(backfill) // 2
    # Every other launch's stop said whose it was; the others stay unattributed.
    assert sorted(row[2] for row in sliced[0]).count("research") == len(backfill) // 4


def test_the_meters_settled_append_never_settles_a_queued_backfill(
    store: LedgerStore, ledger_url: str
) -> None:
    store.queue_backfill(mixed_backfill(1, 8), received_at=T0)
    metered = store.append(
        [step("m-1", "i-meter", "running", ms(0))], source="meter", received_at=T0, settled=True
    )
    assert metered.outcomes == {"m-1": "appended"}
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        assert owner.execute(QUEUED).fetchone() == (8,)  # left to a reader's settle
        assert owner.execute("SELECT opened_by FROM intervals").fetchall() == [("m-1",)]  # derived at once
    assert [i.opened_by for i in store.intervals()] == ["b-0-0", "b-0-2", "b-0-4", "b-0-6", "m-1"]


SETTLED_EVENT = (
    "ledger_append_settled_event(text, text, text, bigint, text, text, text, integer, bigint, text, text, text, "
    "text, text, timestamptz)"  # the account (migration 0027) before the time
)


@pytest.mark.parametrize("events", [1, 2])
def test_a_settled_append_waiting_past_its_lock_timeout_is_reported_and_appends_nothing(
    store: LedgerStore,
    ledger_url: str,
    events: int,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        "lambdas.ledger.appends.SETTLE_LOCK_TIMEOUT", "200ms"
    )  # a batch's, set per transaction
    counter = itertools.count()
    appended: list[Any] = [step(f"m-{next(counter)}", "i-meter", "running", ms(n)) for n in range(events)]
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        owner.execute(
            f"ALTER FUNCTION {SETTLED_EVENT} SET lock_timeout = '200ms'"
        )  # the one event's, shortened
        with psycopg.connect(ledger_url) as settling:  # a settle that cannot finish: holds the lock
            settling.execute("SELECT pg_advisory_xact_lock(hashtextextended('parkbrake settle', 0))")
            with (
                caplog.at_level(logging.ERROR, logger="lambdas.ledger.appends"),
                pytest.raises(SettleBusy) as busy,
            ):
                store.append(appended, source="meter", received_at=T0, settled=True)
            settling.rollback()
        assert "the ledger's settle lock was held over" in str(busy.value)
        assert f"{events} meter event(s) were not appended" in str(busy.value)
        assert [r.getMessage().split(":")[0] for r in caplog.records] == ["ledger settle busy"]
        assert owner.execute("SELECT count(*) FROM events").fetchone() == (0,)
    # Once the lock is free, the same append goes through.
    assert store.append(appended, source="meter", received_at=T0, settled=True).inserted == events


def test_a_backfill_slice_that_fails_is_reported_and_never_fails_a_readers_settle(
    store: LedgerStore, ledger_url: str
) -> None:
    store.queue_backfill(mixed_backfill(1, 4), received_at=T0)
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        # A slice that cannot settle, whatever the cause (the function replaced for this database).
        owner.execute(
            "CREATE OR REPLACE FUNCTION ledger_settle_backfill(after ledger_cut, OUT appended integer,"
            " OUT last ledger_cut, OUT waiting boolean) LANGUAGE plpgsql AS $$"
            " BEGIN RAISE EXCEPTION 'cannot settle'; END $$"
        )
        warnings: list[str] = []
        owner.add_notice_handler(lambda notice: warnings.append(str(notice.message_primary)))
        store.append([step("m-1", "i-meter", "running", ms(0))], source="meter", received_at=T0)  # pending
        assert owner.execute("SELECT ledger_settle()").fetchone() == (1,)  # the pending event, not the slice
        assert warnings == [
            "ledger settle: a slice of the queued backfill could not be settled, left queued: cannot settle (P0001)"
        ]
        assert owner.execute(QUEUED).fetchone() == (4,)
    assert [i.opened_by for i in store.intervals()] == ["m-1"]  # a reader reads on
    with pytest.raises(psycopg.errors.RaiseException, match="cannot settle"):
        store.settle()  # what `ledger ingest` calls: the error itself
