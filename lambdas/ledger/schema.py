"""The ledger's schema: numbered SQL migrations, applied in order, each exactly once; then the function
files, the current definition of every function, each applied again whenever its text changes.

The function files are Flyway's repeatable migrations: ``functions/<group>.sql`` holds the
``CREATE OR REPLACE`` of a group of functions with their settings and privileges, in the order
``functions/order.txt`` gives. The numbered migrations keep tables, types, views, triggers, data
moves and signature changes (a migration drops the old function; its file creates the new one).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import psycopg

from guardrails.errors import ParkbrakeError
from lambdas.ledger import queries as sql

MIGRATIONS = Path(__file__).with_name("migrations")
FUNCTIONS = Path(__file__).with_name("functions")
FUNCTION_ORDER = "order.txt"
# Where the numbers no migration has are explained: a line "- 0008, 0009: why" lists them.
UNUSED_NUMBERS = "README.md"
# pg_advisory_xact_lock key that serialises migrations: "parkbrak" read as a 64-bit integer.
MIGRATION_LOCK = int.from_bytes(b"parkbrak", "big") - 2**63
_MIGRATION_NAME = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")
_FUNCTION_FILE_NAME = re.compile(r"[a-z0-9_]+\.sql")
_UNUSED_LINE = re.compile(r"- (\d{4}(?:, \d{4})*):")


class LedgerError(ParkbrakeError):
    """The ledger's contents or schema are not what this code expects."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True)
class FunctionFile:
    """One file of current function definitions, applied again whenever its checksum changes."""

    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def unused_numbers(folder: Path = MIGRATIONS) -> set[int]:
    """The migration numbers the folder's README.md says were never used (none without one)."""
    readme = folder / UNUSED_NUMBERS
    if not readme.is_file():
        return set()
    numbers: set[int] = set()
    for line in readme.read_text().splitlines():
        match = _UNUSED_LINE.match(line)
        if match is not None:
            numbers.update(int(number) for number in match[1].split(", "))
    return numbers


def migrations(folder: Path = MIGRATIONS) -> list[Migration]:
    """The folder's migrations in order; a number used twice, or missing and not explained, is refused."""
    found = []
    for path in sorted(folder.glob("*.sql")):
        match = _MIGRATION_NAME.fullmatch(path.name)
        if match is None:
            raise LedgerError(f"{path.name}: migrations are named NNNN_name.sql")
        found.append(Migration(int(match[1]), match[2], path.read_text()))
    versions = [migration.version for migration in found]
    for version in sorted(set(versions)):
        if versions.count(version) > 1:
            raise LedgerError(f"{folder.name}/: two migrations are numbered {version:04d}; renumber one")
    unused = unused_numbers(folder)
    for version in range(1, max(versions, default=0) + 1):
        if version in unused and version in versions:
            raise LedgerError(
                f"{folder.name}/{UNUSED_NUMBERS} lists {version:04d} as never used, but a migration has it; "
                "take it off the list"
            )
        if version not in unused and version not in versions:
            raise LedgerError(
                f"{folder.name}/: no migration is numbered {version:04d}; say why in {UNUSED_NUMBERS} "
                f'("- {version:04d}: why") or renumber the migrations after it'
            )
    return found


def function_files(folder: Path = FUNCTIONS) -> list[FunctionFile]:
    """The folder's function files in the order its order.txt lists them; each .sql file listed once."""
    order = folder / FUNCTION_ORDER
    if not order.is_file():
        raise LedgerError(
            f"{folder.name}/ has no {FUNCTION_ORDER}; list its .sql files there in the order they apply"
        )
    names: list[str] = []
    for number, line in enumerate(order.read_text().splitlines(), start=1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if _FUNCTION_FILE_NAME.fullmatch(name) is None:
            raise LedgerError(
                f"{folder.name}/{FUNCTION_ORDER} line {number}: {name!r} is not a name like settle.sql"
            )
        if name in names:
            raise LedgerError(
                f"{folder.name}/{FUNCTION_ORDER} line {number}: {name} is listed twice; list it once"
            )
        if not (folder / name).is_file():
            raise LedgerError(
                f"{folder.name}/{FUNCTION_ORDER} line {number}: there is no {folder.name}/{name}; "
                "add the file or remove the line"
            )
        names.append(name)
    for path in sorted(folder.glob("*.sql")):
        if path.name not in names:
            raise LedgerError(
                f"{folder.name}/{path.name} is not in {FUNCTION_ORDER}; list it after the files it depends on"
            )
    return [FunctionFile(name, (folder / name).read_text()) for name in names]


def apply_migrations(
    connection: psycopg.Connection[Any],
    available: Sequence[Migration],
    functions: Sequence[FunctionFile] = (),
) -> list[str]:
    """Apply pending migrations in order, then every function file whose checksum is not the one last
    applied, in order, inside the caller's transaction; safe from many processes."""
    connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    connection.execute(sql.MIGRATIONS_TABLE)
    connection.execute(sql.FUNCTION_FILES_TABLE)
    applied = dict(connection.execute("SELECT version, checksum FROM ledger_migrations").fetchall())
    done = []
    for migration in available:
        if migration.version in applied:
            if applied[migration.version] != migration.checksum:
                raise LedgerError(
                    f"migration {migration.version:04d}_{migration.name} was changed after it "
                    "was applied; add a new migration instead"
                )
            continue
        connection.execute(cast(Any, migration.sql))
        connection.execute(
            "INSERT INTO ledger_migrations (version, name, checksum) VALUES (%s, %s, %s)",
            (migration.version, migration.name, migration.checksum),
        )
        done.append(f"{migration.version:04d}_{migration.name}")
    current = dict(connection.execute("SELECT name, checksum FROM ledger_function_files").fetchall())
    for function_file in functions:
        if current.get(function_file.name) == function_file.checksum:
            continue
        try:
            connection.execute(cast(Any, function_file.sql))
        except psycopg.OperationalError:
            raise  # the database, not the file: LedgerUnavailable, as for any statement
        except psycopg.Error as error:
            detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise LedgerError(f"{FUNCTIONS.name}/{function_file.name} failed: {detail}") from error
        connection.execute(sql.RECORD_FUNCTION_FILE, (function_file.name, function_file.checksum))
        done.append(f"{FUNCTIONS.name}/{function_file.name}")
    return done
