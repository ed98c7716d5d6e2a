"""The meter's rollup of one closed interval (``ledger_add_closed_interval``, key look-ups) adds
exactly what the set-based ``ledger_move_rollups`` adds for it, whatever the interval: across UTC
midnights and price changes, spot before and after its zone's first price, unpriced, zero GPUs."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guardrails.ledger import Attribution, Transition
from lambdas.ledger.store import LedgerStore

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
ROLLUPS = (
    "SELECT 'usage', tenant, pool, instance_type, NULL::bigint, accelerator_ms, usd_hour_ms FROM usage_totals "
    "UNION ALL SELECT 'spend', tenant, NULL, instance_type, day_ms, NULL, usd_hour_ms FROM spend_daily "
    "ORDER BY 1, 2, 3, 4, 5"
)
INTERVAL = (
    "ROW(%(opened_by)s, 'i-1', %(tenant)s, 'training', %(instance_type)s, %(accelerators)s, NULL, "
    "%(started_ms)s, %(ended_ms)s, 'closer', %(region)s, %(pricing_model)s, %(zone)s)::ledger_interval"
)
# Prices this test records on top of the fixture's (an on-demand price since always, per type and
# region): on-demand changes of g5.xlarge in us-east-1 in the future (one cannot start in the past),
# and spot prices of its zone us-east-1a in the last day (EC2's history).
ON_DEMAND_CHANGES_H = (5, 30, 49)
SPOT_PRICES_H = (-20, -7, -1)

intervals = st.fixed_dictionaries(
    {
        "opened_by": st.just("opener"),
        "tenant": st.sampled_from(["acme", "zeta"]),
        "instance_type": st.sampled_from(["g5.xlarge", "g5.12xlarge", "x9.unpriced"]),
        "accelerators": st.integers(0, 8),
        "region": st.sampled_from(["us-east-1", "eu-west-1"]),
        "pricing_model": st.sampled_from(["on-demand", "spot", None]),
        "zone": st.sampled_from(["us-east-1a", "us-east-1b", "", None]),
        "start_offset_ms": st.integers(-30 * HOUR_MS, 60 * HOUR_MS),
        "length_ms": st.one_of(st.integers(0, 120_000), st.integers(0, 3 * DAY_MS)),
    }
)


def rollups_after(
    connection: psycopg.Connection[Any], call: str, interval: dict[str, Any]
) -> list[tuple[Any, ...]]:
    """The rollups once ``call`` has added the interval, then undone (a savepoint)."""
    with connection.transaction(force_rollback=True):
        connection.execute(f"SELECT {call}", interval)
        return connection.execute(ROLLUPS).fetchall()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(interval=intervals, earlier=intervals)
def test_one_closed_interval_adds_what_the_set_based_rollup_adds(
    ledger_url: str, interval: dict[str, Any], earlier: dict[str, Any]
) -> None:
    with psycopg.connect(ledger_url) as connection, connection.transaction(force_rollback=True):
        now_ms = connection.execute(
            "SELECT ledger_ms(date_trunc('milliseconds', statement_timestamp()))"
        ).fetchone()
        assert now_ms is not None
        for hours in ON_DEMAND_CHANGES_H:
            connection.execute(
                "INSERT INTO prices (instance_type, region, pricing_model, zone, valid_from, usd_per_hour, source) "
                "VALUES ('g5.xlarge', 'us-east-1', 'on-demand', '', 'epoch'::timestamptz + %s * interval '1 ms', "
                "%s, 'test')",
                (now_ms[0] + hours * HOUR_MS, Decimal("1.006") + Decimal(hours) / 100),
            )
        for hours in SPOT_PRICES_H:
            connection.execute(
                "INSERT INTO prices (instance_type, region, pricing_model, zone, valid_from, usd_per_hour, source) "
                "VALUES ('g5.xlarge', 'us-east-1', 'spot', 'us-east-1a', "
                "'epoch'::timestamptz + %s * interval '1 ms', %s, 'test')",
                (now_ms[0] + hours * HOUR_MS, Decimal("0.3") - Decimal(hours) / 1000),
            )
        for span in (interval, earlier):
            span["started_ms"] = now_ms[0] + span["start_offset_ms"]
            span["ended_ms"] = span["started_ms"] + span["length_ms"]
        # Rows already there: an upsert adds to them.
        connection.execute(f"SELECT ledger_move_rollups(ARRAY[{INTERVAL}], '{{}}')", earlier)
        before = connection.execute(ROLLUPS).fetchall()
        by_sets = rollups_after(connection, f"ledger_move_rollups(ARRAY[{INTERVAL}], '{{}}')", interval)
        by_keys = rollups_after(connection, f"ledger_add_closed_interval({INTERVAL})", interval)
    assert by_keys == by_sets
    if interval["accelerators"] * interval["length_ms"] > 0:  # it used something: the rollups moved
        assert by_keys != before


def test_a_stop_the_meter_derives_moves_the_rollups_by_its_interval(ledger_url: str) -> None:
    """The meter's path itself (ledger_derive_next closing an interval) adds the interval's usage."""
    store = LedgerStore.connect(ledger_url)
    who = Attribution("acme", "training", "g5.12xlarge", 4, None, "us-east-1")
    start = 1_900_000_000_000
    for event_id, state, at_ms in (("a", "running", start), ("b", "stopped", start + 90_500)):
        store.append([Transition(event_id, "i-1", state, at_ms, who)], source="meter",
                     received_at=datetime(2030, 3, 1, tzinfo=UTC), settled=True)  # fmt: skip
    with psycopg.connect(ledger_url) as connection:
        rows = connection.execute("SELECT tenant, accelerator_ms, usd_hour_ms FROM usage_totals").fetchall()
    store.close()
    # 4 GPUs × 90.5 s used; billed 91 s at 5.672 $/h.
    assert rows == [("acme", Decimal(4 * 90_500), Decimal("5.672") * 91_000)]
