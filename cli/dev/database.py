"""``parkbrake dev database``: the throwaway PostgreSQL the tests use, migrated, until Ctrl-C.

It prints the URL first, as a line to paste into a shell, then waits. Ctrl-C (SIGINT) or SIGTERM stops
the server and removes its data directory, and the command exits 0; a second Ctrl-C while it stops is
ignored, so the stop is never cut short and leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import time
from pathlib import Path

import click

from cli.dev.postgres import ThrowawayServer, throwaway_postgres
from cli.options import output_option
from guardrails.errors import ParkbrakeError
from guardrails.plurals import counted

DATABASE_VARIABLE = "PARKBRAKE_DATABASE_URL"
ALIVE_CHECK_SECONDS = 1.0


@click.command()
@output_option
def database(output: str) -> None:
    """Start a throwaway PostgreSQL with the ledger's tables and print its URL; Ctrl-C stops and removes it.

    The first line is `export PARKBRAKE_DATABASE_URL=...` (json: {"url", "data_dir", "pid"}): paste it
    into the shell that runs `parkbrake keys`, `parkbrake ledger` or `parkbrake-inference`. The server
    is the tests' (pgserver's PostgreSQL build, a Unix socket in a temporary data directory); nothing
    outlives the command.

    \b
    Example:
      parkbrake dev database
    """
    from lambdas.ledger.store import LedgerStore, migrate_and_price

    with throwaway_postgres("parkbrake-dev-") as server:
        store = LedgerStore.connect(server.url)
        try:
            applied, priced = migrate_and_price(store)
        finally:
            store.close()
        if output == "json":
            click.echo(json.dumps({"url": server.url, "data_dir": str(server.data_dir), "pid": server.pid}))
        else:
            click.echo(f"export {DATABASE_VARIABLE}={shlex.quote(server.url)}")
            click.echo(
                f"PostgreSQL is ready, the ledger's tables made ({counted(len(applied), 'migration')}, "
                f"{counted(len(priced), 'price')}); Ctrl-C stops it and removes {server.data_dir}",
                err=True,
            )
        wait_for_a_stop_signal(server)
    if output == "text":
        click.echo(f"stopped; {server.data_dir} removed", err=True)


def wait_for_a_stop_signal(server: ThrowawayServer) -> None:
    """Return on SIGINT or SIGTERM, both then ignored while the server stops; fail if it stops by itself."""
    # Both as Ctrl-C, one way out. SIGINT too: a shell starts a background job (`&`) with it ignored,
    # and Python then leaves it ignored.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.default_int_handler)
    try:
        while _running(server.pid):
            time.sleep(ALIVE_CHECK_SECONDS)  # a sleep, not a lock's wait: a signal may end it safely
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return
    raise ParkbrakeError(f"the PostgreSQL server (pid {server.pid}) stopped by itself; start it again")


def _running(pid: int) -> bool:
    """Whether ``pid`` runs: it exists and is no zombie (a stopped postmaster is reparented to pid 1,
    which in a container may reap it late, and ``kill(pid, 0)`` still finds a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs as another user (pgserver's, when started by root): alive
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):  # no /proc (macOS): kill's answer stands
        return True
    return state not in {"Z", "X"}
