"""A backfill (``source="ingest"``) is queued whole and settled later: the settle appends every
queued event, ignores duplicates, and derives, placing each event by its time."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from ledger_streams import T0, ms, step

from lambdas.ledger.store import LedgerStore

QUEUED = "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM ledger_backfill)"


def test_a_backfill_waits_in_its_queue_until_the_next_settle(store: LedgerStore, ledger_url: str) -> None:
    backfill = [step("start", "i-1", "running", ms(0)), step("stop", "i-1", "stopped", ms(10))]
    store.queue_backfill(backfill, received_at=T0)
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        assert owner.execute(QUEUED).fetchone() == (0, 2)
        settled = store.backfill_outcomes(backfill, received_at=T0)
        assert owner.execute(QUEUED).fetchone() == (2, 0)
    assert (settled.inserted, settled.duplicates, settled.outcomes) == (
        2, 0, {"start": "appended", "stop": "appended"}
    )  # fmt: skip
    assert settled.tenants == {"research"}
    assert [(i.opened_by, i.closed_by) for i in store.intervals()] == [("start", "stop")]
    # Queued, settled and answered in one call: a file ingested again appends nothing.
    again = store.append(backfill, source="ingest", received_at=T0 + timedelta(hours=1))
    assert again.outcomes == {"start": "duplicate", "stop": "duplicate"}


def test_a_backfill_inside_closed_history_is_appended_and_placed_by_its_time(store: LedgerStore) -> None:
    store.append(
        [step("start", "i-1", "running", ms(0)), step("stop", "i-1", "stopped", ms(10)),
         step("open", "i-2", "running", ms(0))],
        source="meter", received_at=T0,
    )  # fmt: skip
    first = [step("inside", "i-1", "running", ms(5)), step("after", "i-1", "running", ms(20)),
             step("after-stop", "i-1", "stopped", ms(40))]  # fmt: skip
    # "inside" falls in the closed interval (a running while running: it opens nothing), "late"
    # inside the one the first batch opens; neither is refused.
    second = [step("late", "i-1", "stopped", ms(30)), step("start", "i-1", "running", ms(0)),
              step("before-open", "i-2", "stopped", ms(-5)), step("raced", "i-3", "running", ms(50))]  # fmt: skip
    backfill_at = T0 + timedelta(hours=1)
    store.queue_backfill(first, received_at=backfill_at)
    store.queue_backfill(second, received_at=backfill_at)
    store.append([step("raced", "i-3", "running", ms(50))], source="meter", received_at=backfill_at)
    settled = store.backfill_outcomes(first + second, received_at=backfill_at)
    assert settled.outcomes == {
        "inside": "appended", "after": "appended", "after-stop": "appended", "late": "appended",
        "start": "duplicate", "before-open": "appended", "raced": "duplicate",
    }  # fmt: skip
    assert (settled.inserted, settled.duplicates) == (5, 2)
    intervals = sorted((i.instance_id, i.opened_by, i.closed_by) for i in store.intervals())
    assert intervals == [("i-1", "after", "late"), ("i-1", "start", "stop"), ("i-2", "open", None),
                         ("i-3", "raced", None)]  # fmt: skip


COLUMNS = (
    "SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute "
    "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
)
CHECKS = "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'c' ORDER BY 1"


@pytest.mark.parametrize("catalog", [COLUMNS, CHECKS], ids=["columns", "checks"])
def test_the_backfill_queue_refuses_what_events_refuses(ledger_url: str, catalog: str) -> None:
    # A queued row events would refuse would fail every later settle: it must fail its append.
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        queue = owner.execute(catalog, ("ledger_backfill",)).fetchall()
        assert queue
        assert queue == owner.execute(catalog, ("events",)).fetchall()
