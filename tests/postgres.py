"""A real PostgreSQL for tests and benchmarks: ``PARKBRAKE_DATABASE_URL`` when set, else a throwaway pgserver."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def postgres_url(prefix: str = "parkbrake-pg-") -> Iterator[str]:
    configured = os.environ.get("PARKBRAKE_DATABASE_URL")
    if configured:
        yield configured
        return
    import pgserver

    with tempfile.TemporaryDirectory(prefix=prefix) as data_dir:
        server = pgserver.get_server(data_dir, cleanup_mode="delete")
        try:
            yield server.get_uri()
        finally:
            server.cleanup()


def schema_dump(url: str) -> str:
    """``pg_dump --schema-only`` of the database at ``url``, by the pg_dump beside pgserver's postgres
    (the build the throwaway server runs; pg_dump dumps servers of its own major version and older)."""
    from pgserver._commands import POSTGRES_BIN_PATH

    pg_dump = POSTGRES_BIN_PATH / "pg_dump"
    result = subprocess.run(
        [str(pg_dump), "--schema-only", "--dbname", url], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{pg_dump} --schema-only failed: {result.stderr.strip()}")
    return result.stdout
