"""A ledger command against a database without the ledger's schema (never migrated, or migrated by an
older parkbrake) says in one line to run ``parkbrake ledger migrate`` and exits 2: no traceback."""

from __future__ import annotations

import psycopg
import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from lambdas.ledger.connections import masked_url
from lambdas.ledger.schema import migrations
from lambdas.ledger.store import LedgerStore

READS = [
    ["ledger", "report", "--since", "2036-05-05", "--until", "2036-05-06T00:00:00Z"],
    ["ledger", "runway"],
]


def assert_told_to_migrate(arguments: list[str], url: str) -> None:
    result = CliRunner().invoke(parkbrake, arguments)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert lines == [
        f"Error: the ledger at {masked_url(url)} has no schema (or an older one): run parkbrake ledger migrate"
    ]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("arguments", READS, ids=lambda arguments: " ".join(arguments[:2]))
def test_a_read_of_an_empty_database_says_to_migrate(
    arguments: list[str], empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", empty_database_url)
    assert_told_to_migrate(arguments, empty_database_url)


@pytest.fixture
def first_migration_only(empty_database_url: str) -> str:
    """A database an old parkbrake migrated: the first migration, none of the function files."""
    store = LedgerStore.connect(empty_database_url)
    try:
        store.migrate(migrations()[:1], functions=())
    finally:
        store.close()
    return empty_database_url


@pytest.mark.parametrize("arguments", READS, ids=lambda arguments: " ".join(arguments[:2]))
def test_a_read_of_an_older_schema_says_to_migrate(
    arguments: list[str], first_migration_only: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", first_migration_only)
    assert_told_to_migrate(arguments, first_migration_only)


def test_after_the_migration_the_same_read_works(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", empty_database_url)
    assert CliRunner().invoke(parkbrake, ["ledger", "migrate"]).exit_code == 0
    result = CliRunner().invoke(parkbrake, READS[0])
    assert result.exit_code == 0, result.output
    with psycopg.connect(empty_database_url) as connection:
        assert connection.execute("SELECT count(*) FROM ledger_migrations").fetchone() == (len(migrations()),)


def test_a_migration_that_fails_on_its_own_sql_names_its_file_not_the_migrate_command(
    empty_database_url: str,
) -> None:
    from lambdas.ledger.schema import FunctionFile, LedgerError

    store = LedgerStore.connect(empty_database_url)
    broken = FunctionFile("broken.sql", "SELECT * FROM no_such_ledger_table;")
    try:
        with pytest.raises(LedgerError) as raised:
            store.migrate(migrations()[:1], functions=(broken,))
    finally:
        store.close()

    assert str(raised.value).startswith('functions/broken.sql failed: relation "no_such_ledger_table"')
    assert "run parkbrake ledger migrate" not in str(raised.value)
