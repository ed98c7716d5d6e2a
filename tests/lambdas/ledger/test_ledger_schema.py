"""The ledger's schema as the runner builds it: numbered migrations once, then the function files (the
current definition of every function) whenever their text changes. A fresh ledger and one upgraded
from any older migration end identical; each function has exactly one definition, in its file; a gap
in the migration numbers is explained or refused; docs/ledger.md says where each function lives."""

from __future__ import annotations

import fnmatch
import re
import tomllib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from lambdas.ledger.schema import (
    FUNCTIONS,
    MIGRATIONS,
    FunctionFile,
    LedgerError,
    function_files,
    migrations,
    unused_numbers,
)
from lambdas.ledger.store import LedgerStore
from tests.conftest import REPO_ROOT
from tests.postgres import schema_dump

NUMBERED = migrations()
FILES = function_files()
# pg_dump 16.10/17.6 and later open and close a dump with \restrict and \unrestrict and a random key
# per run: the one thing two dumps of the same schema may legitimately differ in.
RESTRICT_KEY = re.compile(r"^\\(un)?restrict \S+$", re.MULTILINE)
DEFINITION = re.compile(r"^CREATE (OR REPLACE )?FUNCTION (\w+)\(", re.MULTILINE)
DOCS_ROW = re.compile(r"^\| `(ledger_\w+)` \| `lambdas/ledger/functions/([a-z0-9_]+\.sql)` \|", re.MULTILINE)
FUNCTIONS_OF_THE_SCHEMA = """
SELECT p.oid::regprocedure::text, p.xmin::text
FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace
ORDER BY 1
"""


def normalised(dump: str) -> str:
    return RESTRICT_KEY.sub("", dump)


def defined_in(function_file: FunctionFile) -> list[str]:
    return [match[2] for match in DEFINITION.finditer(function_file.sql)]


def functions_and_versions(url: str) -> dict[str, str]:
    """Each function of the ledger's schema → its catalog row's version (xmin: a CREATE OR REPLACE,
    ALTER or GRANT of the function writes a new one)."""
    with psycopg.connect(url) as connection:
        return dict(connection.execute(FUNCTIONS_OF_THE_SCHEMA).fetchall())


@pytest.fixture
def new_database(database_url: str) -> Iterator[Callable[[], str]]:
    """Makes empty databases on the test's server, each dropped after the test."""
    made: list[str] = []

    def make() -> str:
        name = f"parkbrake_schema_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        made.append(name)
        return make_conninfo(database_url, dbname=name)

    yield make
    with psycopg.connect(database_url, autocommit=True) as admin:
        for name in made:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def fresh_dump(database_url: str) -> Iterator[str]:
    name = f"parkbrake_schema_fresh_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = make_conninfo(database_url, dbname=name)
    store = LedgerStore.connect(url)
    store.migrate()
    store.close()
    yield normalised(schema_dump(url))
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.parametrize(
    "upgraded_from", range(1, len(NUMBERED) + 1), ids=[f"from-{m.version:04d}" for m in NUMBERED]
)
def test_a_ledger_upgraded_from_an_older_migration_ends_identical_to_a_fresh_one(
    upgraded_from: int, new_database: Callable[[], str], fresh_dump: str
) -> None:
    """An installed ledger ran some numbered migrations and no function files (the runner had none
    before them); the whole migrate then leaves exactly the schema a fresh ledger gets."""
    url = new_database()
    store = LedgerStore.connect(url)
    older = NUMBERED[:upgraded_from]
    assert store.migrate(older, functions=()) == [f"{m.version:04d}_{m.name}" for m in older]
    applied = store.migrate()
    store.close()
    assert applied[-len(FILES) :] == [f"functions/{function_file.name}" for function_file in FILES]
    assert len(applied) == len(NUMBERED) - upgraded_from + len(FILES)
    upgraded = normalised(schema_dump(url))
    assert "CREATE FUNCTION public.ledger_settle()" in upgraded
    assert upgraded == fresh_dump


def test_the_function_files_define_every_function_of_the_ledger_exactly_once(
    new_database: Callable[[], str],
) -> None:
    """No function is defined only in an old migration: once the numbered migrations ran, applying
    the function files rewrites every function of the schema, and each is created by one statement."""
    url = new_database()
    store = LedgerStore.connect(url)
    store.migrate(functions=())
    before = functions_and_versions(url)
    assert store.migrate() == [f"functions/{function_file.name}" for function_file in FILES]
    store.close()
    after = functions_and_versions(url)
    assert [function for function, version in after.items() if before.get(function) == version] == []
    definitions = [name for function_file in FILES for name in defined_in(function_file)]
    assert len(definitions) == len(set(definitions)) == len(after)
    assert sorted(definitions) == sorted(function.split("(", 1)[0] for function in after)


def test_every_definition_in_a_function_file_can_be_applied_again() -> None:
    """A plain CREATE FUNCTION would fail the second time its file is applied."""
    plain_creates = [(f.name, m[2]) for f in FILES for m in DEFINITION.finditer(f.sql) if m[1] is None]
    assert plain_creates == []


def test_a_function_file_is_applied_again_when_its_text_changes_and_only_then(
    store: LedgerStore, ledger_url: str
) -> None:
    before = functions_and_versions(ledger_url)
    assert store.migrate() == []
    edited = [
        FunctionFile(f.name, f.sql + "COMMENT ON FUNCTION ledger_settle() IS 'edited';\n")
        if f.name == "settle.sql"
        else f
        for f in FILES
    ]
    assert store.migrate(functions=edited) == ["functions/settle.sql"]
    after = functions_and_versions(ledger_url)
    changed = sorted(function for function in after if after[function] != before[function])
    assert changed == [
        "ledger_backfill_slice()", "ledger_empty(regclass)", "ledger_settle()", "ledger_settle_backfill(ledger_cut)",
        "ledger_settle_pending()", "ledger_settle_slice(text,bigint,smallint,text)",
    ]  # fmt: skip
    with psycopg.connect(ledger_url) as connection:
        comment = connection.execute("SELECT obj_description('ledger_settle()'::regprocedure)").fetchone()
        recorded = dict(connection.execute("SELECT name, checksum FROM ledger_function_files").fetchall())
    assert comment == ("edited",)
    assert recorded == {f.name: f.checksum for f in edited}
    assert store.migrate(functions=edited) == []
    assert store.migrate() == ["functions/settle.sql"]  # back to the shipped text: applied again


def test_a_function_file_that_fails_is_named_and_leaves_the_ledger_as_it_was(
    store: LedgerStore, ledger_url: str
) -> None:
    before = functions_and_versions(ledger_url)
    broken = [
        FunctionFile(
            f.name,
            f.sql + ("SELECT ledger_no_such_function();\n" if f.name == "settle.sql" else "-- edited\n"),
        )
        for f in FILES
    ]
    with pytest.raises(
        LedgerError, match=r"^functions/settle\.sql failed: function ledger_no_such_function\(\) does not"
    ):
        store.migrate(functions=broken)
    with psycopg.connect(ledger_url) as connection:
        recorded = dict(connection.execute("SELECT name, checksum FROM ledger_function_files").fetchall())
    assert recorded == {f.name: f.checksum for f in FILES}  # the files before it were rolled back too
    assert functions_and_versions(ledger_url) == before


def test_migrating_again_changes_nothing(store: LedgerStore, ledger_url: str) -> None:
    dump, versions = schema_dump(ledger_url), functions_and_versions(ledger_url)
    with psycopg.connect(ledger_url) as connection:
        recorded = connection.execute(
            "SELECT name, checksum, applied_at FROM ledger_function_files"
        ).fetchall()
    assert sorted(name for name, _, _ in recorded) == sorted(f.name for f in FILES)
    assert store.migrate() == []
    assert store.migrate() == []
    assert schema_dump(ledger_url) == dump
    assert functions_and_versions(ledger_url) == versions
    with psycopg.connect(ledger_url) as connection:
        assert (
            connection.execute("SELECT name, checksum, applied_at FROM ledger_function_files").fetchall()
            == recorded
        )


def write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_function_files_come_in_the_order_their_list_gives(tmp_path: Path) -> None:
    folder = write(tmp_path, {"order.txt": "# comment\nsecond.sql  # first, all the same\n\nfirst.sql\n",
                              "first.sql": "SELECT 1;\n", "second.sql": "SELECT 2;\n"})  # fmt: skip
    assert [(f.name, f.sql) for f in function_files(folder)] == [
        ("second.sql", "SELECT 2;\n"),
        ("first.sql", "SELECT 1;\n"),
    ]
    assert FILES[0].name == "units.sql"  # what every other file calls


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"order.txt": "a.sql\n", "a.sql": "", "b.sql": ""}, r"functions/b\.sql is not in order\.txt"),
        ({"order.txt": "a.sql\na.sql\n", "a.sql": ""}, r"order\.txt line 2: a\.sql is listed twice"),
        (
            {"order.txt": "a.sql\ngone.sql\n", "a.sql": ""},
            r"order\.txt line 2: there is no functions/gone\.sql",
        ),
        ({"order.txt": "A file.sql\n"}, r"order\.txt line 1: 'A file\.sql' is not a name like settle\.sql"),
        ({"a.sql": ""}, r"functions/ has no order\.txt; list its \.sql files there"),
    ],
    ids=["unlisted", "twice", "missing", "bad-name", "no-list"],
)
def test_a_function_file_list_that_disagrees_with_the_folder_is_refused(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    with pytest.raises(LedgerError, match=message):
        function_files(write(tmp_path / FUNCTIONS.name, files))


def test_the_shipped_migrations_explain_their_missing_numbers() -> None:
    assert unused_numbers() == {8, 9, 18, 19}
    numbers = {migration.version for migration in NUMBERED}
    assert numbers | unused_numbers() == set(range(1, max(numbers) + 1))


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"0001_a.sql": "", "0003_c.sql": ""}, r"no migration is numbered 0002; say why in README\.md"),
        ({"0001_a.sql": "", "0003_c.sql": "", "README.md": "- 0004: never\n"}, r"numbered 0002"),
        ({"0001_a.sql": "", "0002_b.sql": "", "README.md": "- 0002: never\n"}, r"lists 0002 as never used"),
        ({"0001_a.sql": "", "0001_b.sql": ""}, r"two migrations are numbered 0001"),
    ],
    ids=["unexplained-gap", "other-number-explained", "explained-but-used", "number-twice"],
)
def test_a_gap_in_the_migration_numbers_not_explained_is_refused(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    with pytest.raises(LedgerError, match=message):
        migrations(write(tmp_path / "migrations", files))


def test_an_explained_gap_is_accepted(tmp_path: Path) -> None:
    folder = write(
        tmp_path, {"0001_a.sql": "", "0004_d.sql": "", "README.md": "# x\n\n- 0002, 0003: never written\n"}
    )
    assert [migration.version for migration in migrations(folder)] == [1, 4]


def test_the_docs_say_which_file_defines_each_function() -> None:
    documented = dict(DOCS_ROW.findall((REPO_ROOT / "docs" / "ledger.md").read_text()))
    defined = {name: function_file.name for function_file in FILES for name in defined_in(function_file)}
    assert documented == defined


def test_every_file_the_runner_reads_is_package_data() -> None:
    """An installed parkbrake (the wheel) migrates from its own copy of these files."""
    package_data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    patterns = package_data["lambdas.ledger"]
    root = REPO_ROOT / "lambdas" / "ledger"
    read = [*MIGRATIONS.iterdir(), *FUNCTIONS.iterdir()]
    assert {path.name for path in read} >= {"README.md", "order.txt", "0001_ledger.sql", "settle.sql"}
    unpackaged = [
        path.relative_to(root).as_posix()
        for path in read
        if not any(fnmatch.fnmatch(path.relative_to(root).as_posix(), pattern) for pattern in patterns)
    ]
    assert unpackaged == []
