"""A real PostgreSQL for tests and benchmarks: ``PARKBRAKE_DATABASE_URL`` when set, else a throwaway pgserver."""

from __future__ import annotations

import os
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
