"""A throwaway PostgreSQL: the server the tests use, for ``parkbrake dev database`` and ``tests/postgres.py``.

The binaries are pgserver's (a wheel that carries a PostgreSQL build, one of the test tools), so no
system PostgreSQL is needed. The server listens on a Unix socket only (no TCP port to collide with),
in a fresh temporary data directory that is stopped and removed when the context ends.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from guardrails.errors import InputError

INSTALL_HINT = "install pgserver, which brings them: .venv/bin/pip install -e '.[dev]' (make test does)"


class PostgresNotFound(InputError):
    """PostgreSQL's binaries are not installed here."""


@dataclass(frozen=True)
class ThrowawayServer:
    url: str  # a libpq URL: postgresql://postgres:@/postgres?host=<socket directory>
    data_dir: Path
    pid: int  # the postmaster's


def postgres_bin_dir() -> Path:
    """Where pgserver's PostgreSQL binaries are (postgres, initdb, pg_ctl, pg_dump); PostgresNotFound if
    pgserver or its build is missing."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns where XDG_RUNTIME_DIR is unset (containers, CI); pgserver uses /tmp then.
            warnings.simplefilter("ignore")
            # Importing it lists its bin folder: a missing build is an OSError, not only an ImportError.
            from pgserver._commands import POSTGRES_BIN_PATH
    except (ImportError, OSError):
        raise PostgresNotFound(f"PostgreSQL's binaries were not found: {INSTALL_HINT}") from None
    if not (POSTGRES_BIN_PATH / "postgres").is_file():
        raise PostgresNotFound(f"PostgreSQL's binaries were not found in {POSTGRES_BIN_PATH}: {INSTALL_HINT}")
    return POSTGRES_BIN_PATH


@contextmanager
def throwaway_postgres(prefix: str = "parkbrake-pg-") -> Iterator[ThrowawayServer]:
    """A PostgreSQL server of its own, trusting local connections, stopped and its data directory
    removed on exit (Ctrl-C included)."""
    postgres_bin_dir()
    import pgserver

    data_dir = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    try:
        server = pgserver.get_server(data_dir, cleanup_mode="delete")
        try:
            pid = server.get_pid()
            assert pid is not None  # get_server returns once the server is ready
            yield ThrowawayServer(url=server.get_uri(), data_dir=data_dir, pid=pid)
        finally:
            server.cleanup()  # pg_ctl stop, then the data directory removed
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)  # a server that failed to start leaves it too
