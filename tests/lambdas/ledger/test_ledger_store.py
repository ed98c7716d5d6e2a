"""The ledger in a real PostgreSQL: migrations, append-only history, grants, duplicates, concurrency,
prices, connections and a database that is down."""

from __future__ import annotations

import json
import random
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
import psycopg
import pytest
from ledger_streams import T0, T0_MS, at, end_of, events_of, ms, random_fleet, redelivered, step, who
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from guardrails.errors import InputError
from guardrails.ledger import Transition, intervals_from, to_ms, usage_by_key
from guardrails.runway import Budget, runway_totals
from lambdas.ledger.connections import LedgerUnavailable, PooledConnections, database_url
from lambdas.ledger.schema import LedgerError, Migration, function_files, migrations
from lambdas.ledger.store import LedgerStore

KEY = ("research", "training", "g5.xlarge")
G5 = Decimal("1.006")  # prices.json's g5.xlarge


def appended(store: LedgerStore, events: list[Any]) -> tuple[int, int]:
    result = store.append(events, source="meter", received_at=T0)
    return result.inserted, result.duplicates


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def all_migrations() -> list[str]:
    """What a first ``migrate`` applies: every numbered migration, then every function file."""
    numbered = [f"{migration.version:04d}_{migration.name}" for migration in migrations()]
    return numbered + [f"functions/{function_file.name}" for function_file in function_files()]


def test_migrations_apply_once_and_are_recorded(empty_database_url: str) -> None:
    store = LedgerStore.connect(empty_database_url)
    assert store.migrate() == all_migrations()
    assert store.migrate() == []
    with psycopg.connect(empty_database_url) as connection:
        rows = connection.execute("SELECT version, name FROM ledger_migrations ORDER BY version").fetchall()
    assert rows[0] == (1, "ledger")
    assert rows == [(migration.version, migration.name) for migration in migrations()]
    store.close()


def test_migrations_run_concurrently_from_two_processes_apply_exactly_once(empty_database_url: str) -> None:
    barrier = threading.Barrier(3)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def migrate() -> None:
        store = LedgerStore.connect(empty_database_url)  # its own connection: its own server process
        try:
            barrier.wait()
            results.append(store.migrate())
        except BaseException as error:  # collected: the assertion below names it
            errors.append(error)
        finally:
            store.close()

    threads = [threading.Thread(target=migrate) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(results) == [[], [], all_migrations()]


def test_a_migration_changed_after_it_was_applied_is_refused(store: LedgerStore) -> None:
    original = migrations()[0]
    edited = Migration(original.version, original.name, original.sql + "\n-- edited\n")
    with pytest.raises(LedgerError, match="changed after it was applied"):
        store.migrate([edited])


def test_the_event_table_is_append_only_even_for_its_owner(store: LedgerStore, ledger_url: str) -> None:
    appended(store, [step("e1", "i-1", "running", ms(0))])
    with psycopg.connect(ledger_url, autocommit=True) as connection:
        for statement in ("UPDATE events SET state = 'stopped'", "DELETE FROM events", "TRUNCATE events"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                connection.execute(statement)
        assert connection.execute("SELECT state FROM events").fetchall() == [("running",)]


def test_a_duplicate_event_id_is_stored_once(store: LedgerStore) -> None:
    events = [step("e1", "i-1", "running", ms(0)), step("e2", "i-1", "stopped", ms(10))]
    assert appended(store, events + events[:1]) == (2, 1)
    assert appended(store, events) == (0, 2)
    assert store.usage(now=at(60))[KEY].accelerator_ms == 10 * 60_000


def test_reordered_delivery_gives_the_same_intervals(store: LedgerStore) -> None:
    events = [step("a", "i-1", "running", ms(0)), step("b", "i-1", "stopping", ms(10)),
              step("c", "i-1", "stopped", ms(11)), step("d", "i-1", "running", ms(20))]  # fmt: skip
    for event in reversed(events):  # the stop arrives before the start it ends
        appended(store, [event])
    assert store.intervals() == sorted(intervals_from(events), key=lambda i: i.started_ms)
    assert [interval.ended_ms for interval in store.intervals()] == [ms(10), None]


def test_a_host_that_never_reports_stopping_accrues_until_now_and_commits_to_its_cap(
    store: LedgerStore,
) -> None:
    appended(store, [step("e1", "i-1", "running", ms(0), who(cap_minutes=90))])
    assert store.usage(now=at(30))[KEY].accelerator_ms == 30 * 60_000
    (status,) = store.runways(now=at(30), default_cap=timedelta(hours=2))
    assert status.totals.spent_usd_hour_ms == G5 * 30 * 60_000
    assert status.totals.committed_usd_hour_ms == G5 * 60 * 60_000  # 60 more minutes to its 90m cap
    assert (status.totals.burn_usd_per_hour, status.totals.running_accelerators) == (G5, 1)


def test_a_price_change_mid_interval_splits_its_cost_and_leaves_earlier_usage_alone(
    store: LedgerStore,
) -> None:
    appended(store, [step("r0", "i-0", "running", ms(-60)), step("s0", "i-0", "stopped", ms(-30))])
    before = store.usage(now=at(0))[KEY]
    store.add_price("g5.xlarge", Decimal("2.000"), at(30), "test: new price")
    appended(store, [step("r1", "i-1", "running", ms(0)), step("s1", "i-1", "stopped", ms(60))])
    assert store.usage(now=at(90), until=at(0))[KEY] == before
    assert store.usage(now=at(90), since=at(0))[KEY].usd_hour_ms == G5 * 30 * 60_000 + 2 * 30 * 60_000
    totals = {row.key: row.total for row in store.usage_totals(now=at(90))}
    assert totals == store.usage(now=at(90))  # the rollup was counted again under the new price
    with pytest.raises(InputError, match="already recorded"):
        store.add_price("g5.xlarge", Decimal("3"), at(30), "test: same instant again")


def test_a_day_budget_counts_only_the_part_of_a_start_after_midnight(store: LedgerStore) -> None:
    store.set_budget(Budget("research", Decimal(100), "day"))
    evening = who(instance_type="p4d.24xlarge")
    appended(store, [step("r", "i-1", "running", ms(13 * 60), evening),  # 23:00
                     step("s", "i-1", "stopped", ms(15 * 60), evening)])  # 01:00 the next day  # fmt: skip
    (status,) = store.runways(now=at(15 * 60 + 30), default_cap=timedelta(minutes=90))
    assert status.totals.spent_usd_hour_ms == Decimal("32.7726") * 3_600_000
    assert status.totals == runway_totals(
        store.intervals(), store.price_book(), period_start_ms=ms(14 * 60), now_ms=ms(15 * 60 + 30),
        default_cap_ms=90 * 60_000,
    )  # fmt: skip


def test_a_budget_in_its_tenants_time_zone_counts_from_the_local_month_start(store: LedgerStore) -> None:
    # 1 June begins at 22:00 UTC on 31 May in Berlin (CEST). Closed starts that straddle it, and one
    # running across it: only the time after the local midnight counts toward June.
    store.set_budget(Budget("research", Decimal(1000), "month", timezone="Europe/Berlin"))
    store.set_budget(Budget("product", Decimal(1000), "month"))  # UTC: all of it is still May
    may_31 = datetime(2036, 5, 31, tzinfo=UTC)
    events = []
    for tenant in ("research", "product"):
        mine = who(tenant, instance_type="p4d.24xlarge", cap_minutes=600)
        events += [step(f"{tenant}-r1", f"i-{tenant}-1", "running", to_ms(may_31 + timedelta(hours=21)), mine),
                   step(f"{tenant}-s1", f"i-{tenant}-1", "stopped", to_ms(may_31 + timedelta(hours=23)), mine),
                   step(f"{tenant}-r2", f"i-{tenant}-2", "running", to_ms(may_31 + timedelta(hours=21.5)), mine)]  # fmt: skip
    appended(store, events)
    now = may_31 + timedelta(hours=23, minutes=30)
    statuses = {status.tenant: status for status in store.runways(now=now, default_cap=timedelta(hours=10))}
    berlin, utc_tenant = statuses["research"], statuses["product"]
    assert berlin.period_start == may_31 + timedelta(hours=22)
    hour = Decimal("32.7726") * 3_600_000
    assert berlin.totals.spent_usd_hour_ms == hour + hour * Decimal("1.5")  # 22:00–23:00 and 22:00–23:30
    assert utc_tenant.totals.spent_usd_hour_ms == hour * 2 + hour * 2  # 21:00–23:00 and 21:30–23:30
    for status in statuses.values():
        assert status.totals == runway_totals(
            store.intervals(tenant=status.tenant), store.price_book(), period_start_ms=to_ms(status.period_start), now_ms=to_ms(now),
            default_cap_ms=600 * 60_000,
        )  # fmt: skip


def test_a_day_budget_across_a_dst_change_counts_from_the_local_midnight(store: LedgerStore) -> None:
    # 30 March 2036 in Berlin has 23 hours: it begins at 23:00 UTC (CET) and ends at 22:00 UTC (CEST).
    store.set_budget(Budget("research", Decimal(1000), "day", timezone="Europe/Berlin"))
    p4d = who(instance_type="p4d.24xlarge", cap_minutes=600)
    evening = datetime(2036, 3, 29, 22, 30, tzinfo=UTC)  # 23:30 CET on the 29th
    hour = Decimal("32.7726") * 3_600_000

    def check(now: datetime, start: datetime, spent: Decimal) -> None:
        (status,) = store.runways(now=now, default_cap=timedelta(hours=10))
        assert status.period_start == start
        assert status.totals.spent_usd_hour_ms == spent
        assert status.totals == runway_totals(
            store.intervals(), store.price_book(), period_start_ms=to_ms(start), now_ms=to_ms(now),
            default_cap_ms=600 * 60_000,
        )  # fmt: skip

    appended(store, [step("r", "i-1", "running", to_ms(evening), p4d),
                     step("s", "i-1", "stopped", to_ms(evening + timedelta(hours=2)), p4d)])  # 02:30 CEST  # fmt: skip
    check(datetime(2036, 3, 30, 12, tzinfo=UTC), datetime(2036, 3, 29, 23, tzinfo=UTC), hour * Decimal("1.5"))
    # The next day begins at 22:00 UTC: of a host started at 21:30, only the 30 minutes after it count.
    appended(store, [step("r2", "i-2", "running", to_ms(datetime(2036, 3, 30, 21, 30, tzinfo=UTC)), p4d)])
    check(datetime(2036, 3, 30, 22, 30, tzinfo=UTC), datetime(2036, 3, 30, 22, tzinfo=UTC), hour / 2)


def test_four_meters_writing_the_same_events_while_readers_settle_store_each_once_and_agree_with_the_rules(
    ledger_url: str,
) -> None:
    # Settles run between and during the appends: each derives from a history no append is still
    # writing to (the settle lock), so the end is what the rules derive from all events at once.
    rng = random.Random(4)
    events = events_of(random_fleet(rng, max_hosts=6) + random_fleet(rng, "b-", max_hosts=6))
    barrier = threading.Barrier(6)
    metering = threading.Event()
    errors: list[BaseException] = []
    settled: list[int] = []

    def meter(seed: int) -> None:
        store = LedgerStore.connect(ledger_url)
        stream = redelivered(random.Random(seed), events)
        try:
            barrier.wait()
            for start in range(0, len(stream), 5):
                store.append(stream[start : start + 5], source="meter", received_at=T0)
        except BaseException as error:
            errors.append(error)
        finally:
            store.close()

    def reader() -> None:
        store = LedgerStore.connect(ledger_url)
        try:
            barrier.wait()
            while metering.is_set():
                settled.append(store.settle())
        except BaseException as error:
            errors.append(error)
        finally:
            store.close()

    metering.set()
    meters = [threading.Thread(target=meter, args=(seed,)) for seed in range(4)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for thread in meters + readers:
        thread.start()
    for thread in meters:
        thread.join()
    metering.clear()
    for thread in readers:
        thread.join()
    assert errors == []
    assert sum(settled) > 0  # the readers derived some of it while the meters appended
    store = LedgerStore.connect(ledger_url)
    with psycopg.connect(ledger_url) as connection:
        assert connection.execute("SELECT count(*) FROM events").fetchone() == (len(events),)
    now_ms = end_of(events)
    expected = intervals_from(events)
    assert sorted(store.intervals(), key=lambda i: i.opened_by) == sorted(expected, key=lambda i: i.opened_by)
    now = at(0) + timedelta(milliseconds=now_ms - T0_MS)
    assert store.usage(now=now) == usage_by_key(expected, store.price_book(), now_ms=now_ms)
    assert {row.key: row.total for row in store.usage_totals(now=now)} == store.usage(now=now)
    store.close()


def in_order_then_backlog(rng: random.Random, events: list[Transition]) -> list[Transition]:
    """The meter's usual case (each host's events after its last), then a redelivered backlog:
    duplicates, and events older than what their hosts already have."""
    in_order = sorted(events, key=lambda transition: transition.at_ms)
    cut = len(in_order) * 2 // 3
    return in_order[:cut] + redelivered(rng, in_order[cut:] + in_order[: cut // 2])


@pytest.mark.parametrize("delivery", [redelivered, in_order_then_backlog])
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_incremental_refreshes_leave_what_a_full_rebuild_derives(
    store: LedgerStore,
    ledger_url: str,
    delivery: Callable[[random.Random, list[Transition]], list[Transition]],
    seed: int,
) -> None:
    rng = random.Random(seed)
    events = events_of(random_fleet(rng, max_hosts=8) + random_fleet(rng, "b-", max_hosts=8))
    stream = delivery(rng, events)
    size = rng.choice([1, 3])  # one event per append, as the meter; or a few
    for start in range(0, len(stream), size):
        appended(store, stream[start : start + size])
        if rng.random() < 0.7:  # derived after most appends, as the meter reads its runway; or later
            store.settle()
    store.add_price("g5.xlarge", Decimal("2.5"), at(90), "test")

    def snapshot() -> list[list[tuple[Any, ...]]]:
        store.settle()
        # Rollup rows at zero (a key whose hosts moved on) are left by refreshes, not by a rebuild.
        with psycopg.connect(ledger_url) as connection:
            return [
                connection.execute("SELECT * FROM intervals ORDER BY opened_by").fetchall(),
                connection.execute(
                    "SELECT * FROM usage_totals WHERE accelerator_ms <> 0 OR usd_hour_ms <> 0 ORDER BY 1, 2, 3"
                ).fetchall(),
                connection.execute(
                    "SELECT * FROM spend_daily WHERE usd_hour_ms <> 0 ORDER BY 1, 2, 3"
                ).fetchall(),
            ]

    incremental = snapshot()
    with psycopg.connect(ledger_url, autocommit=True) as connection:
        connection.execute("SELECT ledger_rebuild()")
    assert snapshot() == incremental
    assert incremental[0]  # not vacuous


def test_the_ledger_remembers_what_it_knew_of_a_host_at_each_moment(store: LedgerStore) -> None:
    appended(store, [step("e1", "i-1", "running", ms(0), who("vision", "inference", "p4d.24xlarge")),
                     step("e2", "i-1", "stopped", ms(10), who("vision", "inference", "p4d.24xlarge")),
                     step("e3", "i-1", "running", ms(20), who("product", "training", "g5.xlarge"))])  # fmt: skip
    moments = [("i-1", ms(5)), ("i-1", ms(25)), ("i-1", ms(-5)), ("i-unknown", ms(0))]
    assert store.attributions_at(moments) == {
        ("i-1", ms(5)): who("vision", "inference", "p4d.24xlarge"),
        ("i-1", ms(25)): who("product", "training", "g5.xlarge"),
        ("i-1", ms(-5)): who("vision", "inference", "p4d.24xlarge"),  # before all: the earliest known
    }


def test_a_database_that_is_down_is_a_clear_error(ledger_url: str) -> None:
    down = f"postgresql://parkbrake@127.0.0.1:{closed_port()}/ledger"
    with pytest.raises(LedgerUnavailable, match=r"cannot use the ledger database parkbrake@127\.0\.0\.1"):
        LedgerStore.connect(down).intervals()
    with pytest.raises(LedgerUnavailable, match="PARKBRAKE_DATABASE_URL"):
        PooledConnections(down, timeout=0.5)


def test_a_lambda_container_reconnects_after_its_connection_dies(store: LedgerStore, ledger_url: str) -> None:
    assert store.intervals() == []
    with psycopg.connect(ledger_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    with pytest.raises(LedgerUnavailable):  # this invocation fails, and EventBridge retries it...
        store.intervals()
    assert store.intervals() == []  # ...and the next one has a new connection


def test_the_pool_serves_long_running_processes(ledger_url: str) -> None:
    store = LedgerStore.connect(ledger_url, pooled=True)
    appended(store, [step("e1", "i-1", "running", ms(0))])
    assert store.usage(now=at(1))[KEY].accelerator_ms == 60_000
    store.close()


def test_the_database_can_come_from_a_secrets_manager_secret(aws: str, ledger_url: str) -> None:
    parts = conninfo_to_dict(ledger_url)
    secret = {"engine": "postgres", "username": parts.get("user"), "password": parts.get("password", ""),
              "host": parts.get("host"), "port": int(parts.get("port") or 5432), "dbname": parts["dbname"]}  # fmt: skip
    arn = boto3.client("secretsmanager").create_secret(Name="ledger", SecretString=json.dumps(secret))["ARN"]
    url = database_url({"PARKBRAKE_DATABASE_SECRET_ARN": arn})
    assert LedgerStore.connect(url).intervals() == []
    assert (
        database_url({"PARKBRAKE_DATABASE_URL": ledger_url, "PARKBRAKE_DATABASE_SECRET_ARN": arn})
        == ledger_url
    )


def test_no_database_configured_says_what_to_set() -> None:
    with pytest.raises(Exception, match="PARKBRAKE_DATABASE_URL"):
        database_url({})


def test_a_plain_url_secret_is_used_as_is() -> None:
    from lambdas.ledger.connections import url_from_secret

    assert url_from_secret("postgresql://app:pw@db:5432/ledger\n") == "postgresql://app:pw@db:5432/ledger"
    assert conninfo_to_dict(url_from_secret('{"username": "app", "password": "p w", "host": "db"}')) == {
        "user": "app",
        "password": "p w",
        "host": "db",
    }
    assert make_conninfo(url_from_secret('{"url": "host=db"}')) == "host=db"


def test_an_invoice_splits_at_a_price_change_and_forecasts_the_month_at_the_current_burn(
    store: LedgerStore,
) -> None:
    from cli.usage.invoices import tenant_invoices

    appended(store, [step("r1", "i-1", "running", ms(0))])  # g5.xlarge at $1.006/h, still running
    store.add_price("g5.xlarge", Decimal("2"), at(60), "test: a change")
    month_end = datetime(2036, 6, 1, tzinfo=UTC)
    (invoice,) = tenant_invoices(store, now=at(120), since=datetime(2036, 5, 1, tzinfo=UTC), until=at(120),
                                 month_end=month_end, tenants=())  # fmt: skip
    assert [(line.usd_per_hour, line.billed_ms, line.subtotal_usd) for line in invoice.lines] == [
        (Decimal("1.006000"), 3_600_000, Decimal("1.006000")),
        (Decimal("2.000000"), 3_600_000, Decimal("2.000000")),
    ]
    assert invoice.total_usd == Decimal("3.006000")
    hours_left = Decimal((month_end - at(120)).total_seconds()) / 3600
    assert invoice.forecast_usd == (Decimal("3.006") + 2 * hours_left).quantize(Decimal("0.000001"))


def test_the_runway_query_is_planned_once_per_session(store: LedgerStore) -> None:
    # Planning it costs several times running it: every call after the first reuses one plan.
    store.set_budget(Budget("research", Decimal(500), "month", actions=frozenset({"notify"})))
    for tenants in (["research"], ["product"], None, ["research", "vision"]):
        store.runways(now=at(30), default_cap=timedelta(hours=2), tenants=tenants)
    with store.connections.connection() as connection:
        plans = connection.execute(
            "SELECT sum(generic_plans), sum(custom_plans) FROM pg_prepared_statements WHERE statement LIKE %s",
            ("%WITH budgeted AS%",),
        ).fetchall()
    assert plans == [(4, 0)]  # prepared at the first call, never planned for its parameters


def test_a_host_retagged_on_the_meter_path_brings_its_new_tenant_into_the_runways(store: LedgerStore) -> None:
    """The meter's one-event derivation spares the tenant look-up only when the host's last event
    has the same tenant: a retag to a tenant the ledger has not seen makes it known, so its runway
    is read (the budget guardrail reads every known tenant's)."""
    for event_id, tenant, minute in (("a", "research", 0), ("b", "newco", 1)):
        store.append([step(event_id, "i-1", "running", ms(minute), who(tenant))], source="meter", received_at=at(5),
                     settled=True)  # fmt: skip
    running = {
        r.tenant: r.totals.running_hosts for r in store.runways(now=at(2), default_cap=timedelta(hours=1))
    }
    assert running == {"research": 0, "newco": 1}
