"""How events enter the ledger: the append functions check what the table no longer does, appends
are derived by the next settle (which waits for appends in flight), and a derivation reads its
hosts' events from the index (in-order and late appends against a derivation
from scratch: test_ledger_store.py)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from ledger_streams import T0, T0_MS, at, ms, step
from psycopg import sql

from guardrails.launch import AdmissionRequest
from guardrails.ledger import Transition, from_ms, to_ms
from lambdas.ledger.appends import append_transitions, settle
from lambdas.ledger.store import LedgerStore

APPEND = (
    "SELECT * FROM ledger_append_events(%s::text[], ARRAY['i-1'], %s::text[], ARRAY[%s::bigint], %s::integer[], "
    "ARRAY['research'], ARRAY['training'], ARRAY['g5.xlarge'], ARRAY[1], ARRAY[NULL::bigint], "
    "ARRAY['us-east-1'], %s::text[], ARRAY[NULL::text], %s::text[], 'meter', now())"
)
APPEND_ONE = (  # the meter's one-event function, with the same arguments
    "SELECT ledger_append_event((%s::text[])[1], 'i-1', (%s::text[])[1], %s::bigint, 'research', 'training', "
    "'g5.xlarge', 1, NULL, 'us-east-1', (%s::text[])[1], NULL, (%s::text[])[1], 'meter', now())"
)


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (("parked", "on-demand"), "event e-1: state 'parked' is not an EC2 state"),
        (("running", "reserved"), "event e-1: pricing model 'reserved' is not on-demand or spot"),
        (("running", None), "event e-1: pricing model NULL is not on-demand or spot"),
        (("running", "on-demand", "1234"), "event e-1: account '1234' is not a 12-digit AWS account id"),
        (("running", "on-demand", None), "event e-1: account NULL is not a 12-digit AWS account id"),
    ],
)
@pytest.mark.parametrize(
    "append",
    [
        APPEND.replace("%s::integer[]", "ARRAY[1]"),
        APPEND_ONE,
        APPEND_ONE.replace("ledger_append_event(", "ledger_append_settled_event("),
    ],
    ids=["batch", "one event", "one event settled"],
)
def test_the_append_functions_refuse_what_the_table_does_not_check(
    ledger_url: str, event: tuple[str | None, ...], message: str, append: str
) -> None:
    state, model, *account = event
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        with pytest.raises(psycopg.errors.CheckViolation, match=message):
            owner.execute(append, (["e-1"], [state], T0_MS, [model], account or ["111122223333"]))
        assert owner.execute("SELECT count(*) FROM events").fetchone() == (0,)


@pytest.mark.parametrize("attributed", [[2], [None], [0]])
def test_a_batch_refuses_an_event_whose_attribution_it_does_not_carry(
    ledger_url: str, attributed: list[int | None]
) -> None:
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        with pytest.raises(
            psycopg.errors.CheckViolation, match=r"event e-1: attribution \w+ is not one of the batch's 1"
        ):
            owner.execute(APPEND, (["e-1"], ["running"], T0_MS, attributed, ["on-demand"], ["111122223333"]))
        assert owner.execute("SELECT count(*) FROM events").fetchone() == (0,)


def test_one_event_has_the_outcomes_a_batch_has(store: LedgerStore) -> None:
    def outcome(transition: Transition, source: str = "meter") -> str:
        return store.append([transition], source=source, received_at=T0).outcomes[transition.event_id]

    assert outcome(step("start", "i-1", "running", ms(0))) == "appended"
    assert outcome(step("start", "i-1", "running", ms(0))) == "duplicate"
    assert outcome(step("stop", "i-1", "stopped", ms(10))) == "appended"
    # A backfill inside the host's closed history is appended and placed by its time: the stop at
    # 5 minutes closes the interval there.
    assert outcome(step("old", "i-1", "stopped", ms(5)), "ingest") == "appended"
    assert outcome(step("later", "i-1", "running", ms(20)), "ingest") == "appended"
    assert [(i.opened_by, i.closed_by) for i in store.intervals()] == [("start", "old"), ("later", None)]


def test_an_append_derives_nothing_and_the_next_read_derives_it(store: LedgerStore, ledger_url: str) -> None:
    store.append([step("start", "i-1", "running", ms(0))], source="meter", received_at=T0)
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        assert owner.execute(DERIVED).fetchone() == (0, 1)
        assert [i.opened_by for i in store.intervals()] == ["start"]
        assert owner.execute(DERIVED).fetchone() == (1, 0)


DERIVED = (
    "SELECT (SELECT count(*) FROM intervals), "
    "(SELECT count(*) FROM ledger_pending) + (SELECT count(*) FROM ledger_backfill)"
)
QUEUES = ["ledger_pending", "ledger_backfill"]  # appended, not derived; queued backfill


def bulk_append(store: LedgerStore, queue: str) -> None:
    """30,000 rows in ``queue``: more than a MiB, which deleted would stay for every settle to read."""
    starts = [step(f"start-{n}", f"i-{n}", "running", ms(0)) for n in range(30_000)]
    for first in range(0, len(starts), 2_000):
        batch = starts[first : first + 2_000]
        if queue == "ledger_backfill":
            store.queue_backfill(batch, received_at=T0)
        else:
            store.append(batch, source="meter", received_at=T0)


@pytest.mark.parametrize("queue", QUEUES)
def test_a_settle_after_a_bulk_append_leaves_no_pages_for_later_settles_to_read(
    store: LedgerStore, ledger_url: str, queue: str
) -> None:
    bulk_append(store, queue)
    pages = f"SELECT pg_relation_size('{queue}') / 8192"
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        assert owner.execute(pages).fetchone()[0] > 128
        assert store.settle() == 30_000
        assert owner.execute(pages).fetchone() == (0,)
        store.append([step("stop-0", "i-0", "stopped", ms(1))], source="meter", received_at=T0)
        assert store.settle() == 1
        assert owner.execute(DERIVED).fetchone() == (30_000, 0)


@pytest.mark.parametrize("queue", QUEUES)
def test_a_settle_never_waits_to_truncate_for_a_reader_of_its_queue(
    store: LedgerStore, ledger_url: str, queue: str
) -> None:
    # The reader may be a settle waiting for this one's lock: waiting for it would be a deadlock.
    bulk_append(store, queue)
    settled: list[int] = []
    with psycopg.connect(ledger_url) as reader:
        reader.execute(f"SELECT 1 FROM {queue} LIMIT 1")  # its lock is held to its commit
        thread = threading.Thread(target=lambda: settled.append(store.settle()))
        thread.start()
        thread.join(timeout=30)
        assert settled == [30_000]
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        assert owner.execute(DERIVED).fetchone() == (30_000, 0)


WAITING_FOR_THE_SETTLE_LOCK = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"


@pytest.mark.parametrize(
    ("hosts", "source"), [(1, "meter"), (2, "meter"), (2, "ingest")], ids=["one event", "batch", "backfill"]
)
def test_a_settle_waits_for_an_append_in_flight_and_then_derives_it(
    store: LedgerStore, ledger_url: str, hosts: int, source: str
) -> None:
    # Without the wait, a settle could take an event as derived that committed while it ran, or
    # empty the backfill queue of one that committed after it read the queue.
    settled: list[int] = []
    reader = LedgerStore.connect(ledger_url)
    store.append([step("start", "i-1", "running", ms(0))], source="meter", received_at=T0)
    with psycopg.connect(ledger_url) as meter, psycopg.connect(ledger_url, autocommit=True) as watcher:
        in_flight = [step("stop", "i-1", "stopped", ms(10)), step("other", "i-2", "running", ms(10))][:hosts]
        append_transitions(meter, in_flight, source=source, received_at=T0)
        thread = threading.Thread(target=lambda: settled.append(reader.settle()))
        thread.start()
        for _ in range(200):
            if watcher.execute(WAITING_FOR_THE_SETTLE_LOCK).fetchone() == (1,):
                break
            time.sleep(0.05)
        assert watcher.execute(WAITING_FOR_THE_SETTLE_LOCK).fetchone() == (1,)
        assert settled == []
        meter.commit()
        thread.join(timeout=10)
    reader.close()
    assert settled == [1 + hosts]
    derived = sorted((i.opened_by, i.closed_by) for i in store.intervals())
    assert derived == sorted([("start", "stop"), ("other", None)][:hosts])


# Tables an append reads by key, and how many times the transaction scanned each whole.
SCANS = (
    "SELECT relname, seq_scan FROM pg_stat_xact_user_tables "
    "WHERE relname IN ('events', 'intervals') ORDER BY relname"
)


@pytest.mark.parametrize("source", ["meter", "ingest"])
def test_an_append_finds_rows_by_key_even_with_plans_made_on_an_empty_ledger(
    ledger_url: str, source: str
) -> None:
    # The append's and the settle's plans are made once per session, at their first call: here on
    # empty tables, where a join of the batch to events or intervals is cheapest as a scan of the
    # table. The pending events, the hosts' last events and open intervals, the closing update, a
    # backfill's duplicates, and the reservations' claims must still be found by key.
    with (
        psycopg.connect(ledger_url, autocommit=True) as owner,
        psycopg.connect(ledger_url, autocommit=True) as meter,
    ):
        reserve = (
            "INSERT INTO reservations (tenant, instance_type, region, pricing_model, zone, hosts, cap_ms, "
            "usd_per_hour, created_ms, expires_ms) "
            "VALUES ('research', 'g5.xlarge', 'us-east-1', 'on-demand', '', 10, 5400000, 1.006, %s, %s)"
        )
        owner.execute(reserve, (ms(0), ms(1000)))
        starts = [step(f"start-{n}", f"i-{n}", "running", ms(n)) for n in range(200)]
        append_transitions(meter, starts, source=source, received_at=T0)
        owner.execute(reserve, (ms(0), ms(1000)))
        stops = [step(f"stop-{n}", f"i-{n}", "stopped", ms(300 + n)) for n in range(200)]
        restarts = [step(f"restart-{n}", f"i-{n}", "running", ms(600 + n)) for n in range(20)]
        settle(meter)
        with meter.transaction():
            result = append_transitions(meter, stops + restarts + starts[:50], source=source, received_at=T0)
            assert settle(meter) == 220
            scans = meter.execute(SCANS).fetchall()
        # A backfill is only queued by its append: nothing appended, nothing a duplicate yet.
        assert (result.inserted, result.duplicates) == ((220, 50) if source == "meter" else (0, 0))
        assert set(result.outcomes.values()) == (
            {"appended", "duplicate"} if source == "meter" else {"queued"}
        )
        assert scans == [("events", 0), ("intervals", 0)]
        closed = meter.execute("SELECT count(*) FROM intervals WHERE ended_ms IS NOT NULL").fetchone()
        assert closed == (200,)
        # The first ten hosts claimed the first reservation; the next ten the second, at their restart.
        claims = meter.execute("SELECT count(*), count(DISTINCT reservation_id) FROM reservation_claims")
        assert claims.fetchone() == (20, 2)


HOSTS = 400
EVENTS_PER_HOST = 60
GENERATE = f"""
INSERT INTO events (event_id, instance_id, state, event_time, tenant, pool, instance_type, accelerators,
                    cap_ms, region, source, at_ms, state_rank)
SELECT 'g-' || n, 'i-' || n %% {HOSTS}, state, moment, 'research', 'training', 'g5.xlarge', 1, NULL,
       'us-east-1', 'ingest', ledger_ms(moment), ledger_state_rank(state)
FROM generate_series(0, {HOSTS * EVENTS_PER_HOST - 1}) AS n
CROSS JOIN LATERAL (SELECT CASE WHEN n / {HOSTS} %% 2 = 0 THEN 'running' ELSE 'stopped' END AS state,
                           %s::timestamptz + n * interval '1 second' AS moment) AS e
"""
# The cuts a refresh of every host passes (each host from before its first event), as a literal so
# that the planner knows how many hosts it reads.
EVERY_HOST = (
    "SELECT ARRAY(SELECT ROW(h, -4611686018427387904, 0, '')::ledger_cut "
    "FROM (SELECT DISTINCT instance_id AS h FROM events) AS x)::text"
)


def test_a_derivation_reads_each_hosts_events_from_the_index(store: LedgerStore, ledger_url: str) -> None:
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        owner.execute(GENERATE, (T0,))
        owner.execute("SELECT ledger_rebuild()")
        owner.execute("ANALYZE")
        (text,) = owner.execute(EVERY_HOST).fetchone() or ("",)
        cuts = sql.SQL("{}::ledger_cut[]").format(sql.Literal(text)).as_string(owner)
        # Large enough that a plain join of those hosts to their events is planned as a scan of the table.
        join = owner.execute(
            f"EXPLAIN SELECT e.* FROM unnest({cuts}) AS cut JOIN events e ON e.instance_id = cut.instance_id"
        ).fetchall()
        assert "Seq Scan on events" in "\n".join(row[0] for row in join)
        owner.execute("PREPARE derive (ledger_cut[]) AS SELECT * FROM ledger_derive_intervals($1)")
        for mode in ("force_custom_plan", "force_generic_plan"):  # as first called, and as cached
            owner.execute(f"SET plan_cache_mode = {mode}")
            plan = "\n".join(row[0] for row in owner.execute(f"EXPLAIN EXECUTE derive ({cuts})"))
            assert "Seq Scan on events" not in plan, plan
            assert "events_by_instance" in plan, plan
    # And the derivation it plans gives the intervals: one per host per start.
    intervals = store.intervals(tenant="research")
    assert len(intervals) == HOSTS * EVENTS_PER_HOST // 2
    assert intervals[0].started_ms == T0_MS


def test_ledger_ms_is_inlined_and_agrees_with_the_rules_at_every_instant(ledger_url: str) -> None:
    # A function call per price row cost a settle 7.5 ms per 1,000 events before it was inlined.
    rng = random.Random(5)
    instants = [datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), T0.replace(microsecond=123000)]
    instants += [T0 + timedelta(milliseconds=rng.randrange(-(10**12), 10**12)) for _ in range(200)]
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        plan = owner.execute(
            "EXPLAIN (VERBOSE) SELECT ledger_ms(t) FROM unnest(%s::timestamptz[]) AS t", (instants,)
        )
        assert "ledger_ms" not in "\n".join(row[0] for row in plan)
        in_sql = owner.execute(
            "SELECT ledger_ms(t) FROM unnest(%s::timestamptz[]) AS t", (instants,)
        ).fetchall()
        assert [row[0] for row in in_sql] == [to_ms(instant) for instant in instants]
        assert owner.execute("SELECT ledger_ms('-infinity'), ledger_ms('infinity')").fetchone() == (
            -(2**62),
            2**62,
        )


CAP = timedelta(minutes=90)
# Every LedgerStore method that reads derived tables (intervals, rollups, claims), with arguments.
DERIVED_READS: dict[str, Callable[[LedgerStore], object]] = {
    "intervals": lambda store: store.intervals(),
    "latest_intervals": lambda store: store.latest_intervals(["i-1"]),
    "usage_rows": lambda store: store.usage_rows(now=at(60)),
    "invoice_lines": lambda store: store.invoice_lines(now=at(60), since=at(-60), until=at(60)),
    "usage_totals": lambda store: store.usage_totals(now=at(60)),
    "runways": lambda store: store.runways(now=at(60), default_cap=CAP),
    "admit": lambda store: store.admit(
        AdmissionRequest("research", "g5.xlarge", 1, CAP), now=at(60), default_cap=CAP, lease=CAP
    ),
}


@pytest.mark.parametrize("read", DERIVED_READS)
def test_every_read_of_derived_tables_settles_first(store: LedgerStore, ledger_url: str, read: str) -> None:
    store.append([step("start", "i-1", "running", ms(0))], source="meter", received_at=T0)
    DERIVED_READS[read](store)
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        assert owner.execute(DERIVED).fetchone() == (1, 0)


@pytest.mark.parametrize("count", [1, 6], ids=["one event", "batch"])
def test_an_events_time_is_stored_to_the_millisecond_it_was_sent(
    store: LedgerStore, ledger_url: str, count: int
) -> None:
    moments = [-1, 0, 1, T0_MS + 999, 2**41 + 7, -(2**40) - 3][:count]
    store.append([step(f"e{n}", f"i-{n}", "running", moment) for n, moment in enumerate(moments)],
                 source="meter", received_at=T0)  # fmt: skip
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        stored = owner.execute("SELECT event_time, at_ms FROM events ORDER BY event_id").fetchall()
    assert stored == [(from_ms(moment), moment) for moment in moments]


def test_meters_appending_and_settling_at_once_neither_deadlock_nor_lose_an_interval(ledger_url: str) -> None:
    # Each append takes the settle lock shared and each settle exclusively: an append settled in
    # the same transaction must take it exclusively first, or two of them wait on each other.
    hosts = [f"i-{n}" for n in range(6)]
    histories = {
        host: [
            step(f"{host}-{k}", host, "running" if k % 2 == 0 else "stopped", ms(k * 10 + n))
            for k in range(30)
        ]
        for n, host in enumerate(hosts)
    }
    failures: list[BaseException] = []

    def meter(mine: list[str], batched: bool) -> None:
        store = LedgerStore.connect(ledger_url)
        try:
            for k in range(0, 30, 2):
                events = [e for host in mine for e in histories[host][k : k + 2]]
                if batched:
                    store.append(events, source="meter", received_at=T0, settled=True)
                else:
                    for event in events:
                        store.append([event], source="meter", received_at=T0, settled=True)
        except BaseException as error:  # a deadlock is a psycopg error raised in the thread
            failures.append(error)
        finally:
            store.close()

    threads = [
        threading.Thread(target=meter, args=(hosts[0:3], True)),
        threading.Thread(target=meter, args=(hosts[2:5], True)),  # overlapping: i-2 from both
        threading.Thread(target=meter, args=(hosts[4:6], False)),
        threading.Thread(target=meter, args=(hosts[0:2], False)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        pending = owner.execute("SELECT count(*) FROM ledger_pending").fetchone()
        rows = owner.execute("SELECT opened_by, closed_by FROM intervals ORDER BY opened_by").fetchall()
    assert pending == (0,)  # each append settled itself
    assert rows == sorted((f"{host}-{k}", f"{host}-{k + 1}") for host in hosts for k in range(0, 30, 2))


def test_an_event_appended_and_settled_in_one_call_is_derived_by_key(ledger_url: str) -> None:
    # The meter's whole path (ledger_append_settled_event: one event after its host's last, derived
    # by ledger_derive_next) with plans made on an empty ledger: every row it reads found by key,
    # and a start claims its share of an open reservation as the set derivation's does.
    with (
        psycopg.connect(ledger_url, autocommit=True) as owner,
        psycopg.connect(ledger_url, autocommit=True) as meter,
    ):
        owner.execute(
            "INSERT INTO reservations (tenant, instance_type, region, pricing_model, zone, hosts, cap_ms, "
            "usd_per_hour, created_ms, expires_ms) "
            "VALUES ('research', 'g5.xlarge', 'us-east-1', 'on-demand', '', 10, 5400000, 1.006, %s, %s)",
            (ms(0), ms(1000)),
        )
        for n in range(50):
            append_transitions(
                meter,
                [step(f"start-{n}", f"i-{n}", "running", ms(n))],
                source="meter",
                received_at=T0,
                settled=True,
            )
        with meter.transaction():
            for n in range(50):
                result = append_transitions(
                    meter, [step(f"stop-{n}", f"i-{n}", "stopped", ms(100 + n))], source="meter", received_at=T0,
                    settled=True,
                )  # fmt: skip
                assert result.outcomes == {f"stop-{n}": "appended"}
            scans = meter.execute(SCANS).fetchall()
            pending = meter.execute("SELECT count(*) FROM ledger_pending").fetchone()
        assert scans == [("events", 0), ("intervals", 0)]
        assert pending == (0,)
        closed = meter.execute("SELECT count(*), sum(ended_ms - started_ms) FROM intervals").fetchone()
        assert closed == (50, 50 * (ms(100) - ms(0)))
        totals = meter.execute("SELECT sum(accelerator_ms) FROM usage_totals").fetchone()
        assert totals == (50 * (ms(100) - ms(0)),)  # g5.xlarge: one accelerator
        claims = meter.execute("SELECT count(*) FROM reservation_claims").fetchone()
        assert claims == (10,)  # the reservation's ten hosts, the first ten to start
