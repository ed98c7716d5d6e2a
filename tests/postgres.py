"""A real PostgreSQL for tests and benchmarks: ``PARKBRAKE_DATABASE_URL`` when set, else a throwaway
server (cli/dev/postgres.py, the one ``parkbrake dev database`` starts)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from cli.dev.postgres import postgres_bin_dir, throwaway_postgres


@contextmanager
def postgres_url(prefix: str = "parkbrake-pg-") -> Iterator[str]:
    configured = os.environ.get("PARKBRAKE_DATABASE_URL")
    if configured:
        yield configured
        return
    with throwaway_postgres(prefix) as server:
        yield server.url


def schema_dump(url: str) -> str:
    """``pg_dump --schema-only`` of the database at ``url``, by the pg_dump beside pgserver's postgres
    (the build the throwaway server runs; pg_dump dumps servers of its own major version and older)."""
    pg_dump = postgres_bin_dir() / "pg_dump"
    result = subprocess.run(
        [str(pg_dump), "--schema-only", "--dbname", url], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{pg_dump} --schema-only failed: {result.stderr.strip()}")
    return result.stdout
