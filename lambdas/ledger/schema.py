"""The ledger's schema: numbered SQL migrations, applied in order, each exactly once."""

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
# pg_advisory_xact_lock key that serialises migrations: "parkbrak" read as a 64-bit integer.
MIGRATION_LOCK = int.from_bytes(b"parkbrak", "big") - 2**63
_MIGRATION_NAME = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


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


def migrations(folder: Path = MIGRATIONS) -> list[Migration]:
    found = []
    for path in sorted(folder.glob("*.sql")):
        match = _MIGRATION_NAME.fullmatch(path.name)
        if match is None:
            raise LedgerError(f"{path.name}: migrations are named NNNN_name.sql")
        found.append(Migration(int(match[1]), match[2], path.read_text()))
    return found


def apply_migrations(connection: psycopg.Connection[Any], available: Sequence[Migration]) -> list[str]:
    """Apply pending migrations in order, inside the caller's transaction; safe from many processes."""
    connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    connection.execute(sql.MIGRATIONS_TABLE)
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
    return done
