"""Ledger fixtures: each test gets its own database, copied from one migrated once per session."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from guardrails.pricing import PRICES_FILE, PriceTable, price_table_from_document
from lambdas.ledger.store import LedgerStore

PRICE_SOURCE = "prices.json"
# The on-demand prices these tests' figures were worked out with, fixed so that a refresh of the
# shipped table (`parkbrake pricing refresh`) never changes what they expect.
TEST_ON_DEMAND = {
    "g4dn.xlarge": "0.526",
    "g5.xlarge": "1.006",
    "g5.12xlarge": "5.672",
    "p4d.24xlarge": "32.7726",
}


def fixed_price_table() -> PriceTable:
    """The shipped table's accelerator counts, with the fixed on-demand prices above in every region."""
    shipped = json.loads(PRICES_FILE.read_text())
    for region in shipped["regions"].values():
        region["on_demand"] = dict(TEST_ON_DEMAND)
    return price_table_from_document(shipped)


def _admin(database_url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(database_url, autocommit=True)


def _create_database(database_url: str, *, template: str | None = None) -> str:
    name = f"parkbrake_test_{uuid.uuid4().hex[:12]}"
    with _admin(database_url) as admin:
        clause = f" TEMPLATE {template}" if template else ""
        admin.execute(f"CREATE DATABASE {name}{clause}")
    return name


def _drop_database(database_url: str, name: str) -> None:
    with _admin(database_url) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def ledger_template(database_url: str) -> Iterator[str]:
    """A database migrated once; CREATE DATABASE ... TEMPLATE copies it in milliseconds."""
    name = f"parkbrake_ledger_template_{os.getpid()}"
    _drop_database(database_url, name)
    with _admin(database_url) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    store = LedgerStore.connect(make_conninfo(database_url, dbname=name))
    store.migrate()
    store.sync_prices(fixed_price_table(), source=PRICE_SOURCE)
    store.close()
    yield name
    _drop_database(database_url, name)


@pytest.fixture
def ledger_url(database_url: str, ledger_template: str) -> Iterator[str]:
    """A fresh, migrated ledger database of this test's own."""
    name = _create_database(database_url, template=ledger_template)
    yield make_conninfo(database_url, dbname=name)
    _drop_database(database_url, name)


@pytest.fixture
def empty_database_url(database_url: str) -> Iterator[str]:
    """A fresh database with no ledger tables yet (for the migrations themselves)."""
    name = _create_database(database_url)
    yield make_conninfo(database_url, dbname=name)
    _drop_database(database_url, name)


@pytest.fixture
def store(ledger_url: str) -> Iterator[LedgerStore]:
    ledger = LedgerStore.connect(ledger_url)
    yield ledger
    ledger.close()
