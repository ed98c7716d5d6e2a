"""The ledger cannot be rewritten: the application role appends through functions only, and prices
are the owner's, append-only, never backdated and audited. Each refused path is tried for real."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal

import psycopg
import pytest
from ledger_streams import T0, at, ms, step, who
from psycopg.conninfo import make_conninfo

from guardrails.errors import InputError
from lambdas.ledger.store import LedgerStore

APP_REFUSED = (
    "UPDATE usage_totals SET usd_hour_ms = 0",
    "DELETE FROM usage_totals",
    "UPDATE spend_daily SET usd_hour_ms = 0",
    "DELETE FROM intervals",
    "UPDATE intervals SET ended_ms = started_ms",
    "INSERT INTO events (event_id, instance_id, state, event_time, tenant, pool, instance_type, accelerators, "
    "region, source) VALUES ('forged', 'i-1', 'stopped', now(), 'research', 'training', 'g5.xlarge', 1, "
    "'us-east-1', 'meter')",
    "UPDATE events SET state = 'stopped'",
    "DELETE FROM events",
    "DELETE FROM ledger_pending",  # an appended event never derived
    "INSERT INTO ledger_pending VALUES ('s1')",  # derived twice
    "INSERT INTO ledger_backfill SELECT * FROM events",  # past the backfill's checks
    "DELETE FROM ledger_backfill",  # a queued backfill lost
    "SELECT ledger_empty('ledger_backfill')",
    "INSERT INTO prices (instance_type, region, pricing_model, zone, valid_from, usd_per_hour, source) "
    "VALUES ('p4d.24xlarge', 'us-west-2', 'on-demand', '', now(), 0, 'x')",
    "UPDATE prices SET usd_per_hour = 0",
    "DELETE FROM prices",
    "DELETE FROM price_changes",
    "UPDATE reservations SET claimed = hosts",
    "DELETE FROM reservations",
    "UPDATE budgets SET limit_usd = 1000000",
    "UPDATE tenants SET actions = '{}'",
    "SELECT ledger_add_prices('{p4d.24xlarge}', '{us-west-2}', '{-infinity}', '{0}', 'forged')",
    "SELECT ledger_rebuild()",
    "SELECT ledger_recount_rollups(NULL)",
    "SELECT ledger_refresh_intervals(ARRAY['i-1'], ARRAY[0::bigint])",
    "SELECT ledger_derive(ARRAY[]::events[])",
    "UPDATE guardrail_actions SET reason = 'nothing happened'",
    "DELETE FROM guardrail_actions",
)


@pytest.fixture
def app_url(ledger_url: str) -> Iterator[str]:
    """A login role that is a member of parkbrake_app, as the Lambdas' and the CLI's role is."""
    name = f"parkbrake_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ledger_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN IN ROLE parkbrake_app")
    yield make_conninfo(ledger_url, user=name)
    with psycopg.connect(ledger_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,))
        admin.execute(f"DROP OWNED BY {name}")
        admin.execute(f"DROP ROLE {name}")


def test_the_app_role_appends_and_reads_through_the_ledgers_functions(app_url: str) -> None:
    app = LedgerStore.connect(app_url)
    result = app.append([step("r1", "i-1", "running", ms(0)), step("s1", "i-1", "stopped", ms(30))],
                        source="meter", received_at=T0)  # fmt: skip
    assert result.inserted == 2
    one = app.append([step("r2", "i-2", "running", ms(60))], source="meter", received_at=T0)
    assert one.inserted == 1  # the one-event function
    assert app.settle() == 3
    assert app.usage(now=at(60))[("research", "training", "g5.xlarge")].accelerator_ms == 30 * 60_000
    app.close()


@pytest.mark.parametrize("statement", APP_REFUSED)
def test_the_app_role_cannot_rewrite_history(store: LedgerStore, app_url: str, statement: str) -> None:
    store.append([step("r1", "i-1", "running", ms(0)), step("s1", "i-1", "stopped", ms(30))],
                 source="meter", received_at=T0)  # fmt: skip
    with psycopg.connect(app_url, autocommit=True) as connection:
        before = connection.execute("SELECT count(*), sum(usd_hour_ms) FROM usage_totals").fetchone()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            connection.execute(statement)
        assert connection.execute("SELECT count(*), sum(usd_hour_ms) FROM usage_totals").fetchone() == before
        assert connection.execute("SELECT count(*) FROM events").fetchone() == (2,)


def test_the_append_function_refuses_an_unknown_source(app_url: str) -> None:
    app = LedgerStore.connect(app_url)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="source"):
        app.append([step("r1", "i-1", "running", ms(0))], source="forger", received_at=T0)
    app.close()


def test_a_price_change_cannot_start_in_the_past_even_for_the_owner(
    store: LedgerStore, ledger_url: str
) -> None:
    store.append([step("r1", "i-1", "running", ms(0), who(instance_type="p4d.24xlarge")),
                  step("s1", "i-1", "stopped", ms(60), who(instance_type="p4d.24xlarge"))],
                 source="meter", received_at=T0)  # fmt: skip
    spent = store.usage(now=at(120))[("research", "training", "p4d.24xlarge")].cost_usd
    with pytest.raises(InputError, match="cannot start in the past"):
        store.add_price("p4d.24xlarge", Decimal(0), at(-60 * 24 * 365 * 20), "backdated")
    assert store.usage(now=at(120))[("research", "training", "p4d.24xlarge")].cost_usd == spent > 0
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        for statement in ("UPDATE prices SET usd_per_hour = 0", "DELETE FROM prices", "TRUNCATE prices",
                          "UPDATE price_changes SET usd_per_hour = 0", "TRUNCATE price_changes"):  # fmt: skip
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                owner.execute(statement)


def test_every_price_change_is_audited_with_who_recorded_it(store: LedgerStore, ledger_url: str) -> None:
    store.add_price("p4d.24xlarge", Decimal("40"), at(60), "test: a later change")
    with psycopg.connect(ledger_url) as owner:
        rows = owner.execute(
            "SELECT region, pricing_model, zone, usd_per_hour, source, recorded_by = session_user "
            "FROM price_changes WHERE instance_type = 'p4d.24xlarge' ORDER BY id"
        ).fetchall()
    assert rows[-1] == ("us-east-1", "on-demand", "", Decimal("40.000000"), "test: a later change", True)
    # The first price of each region prices.json holds (from prices.json), and the change.
    assert sorted(row[0] for row in rows) == ["us-east-1", "us-east-1", "us-east-2", "us-west-2"]
