"""The demo fleet as on-call meets it: ``scripts/demo_fleet.py`` run against moto's server, a ledger
in PostgreSQL with a budget and a day of events, and ``parkbrake`` run as a real process on a
pseudo-terminal of a given width."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from tests.conftest import REPO_ROOT

STACK, REGION, ACCOUNT = "dev", "us-east-1", "123456789012"
WAIT_SECONDS = 180  # an upper bound on one command; it returns as soon as the process ends
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class Demo:
    environ: dict[str, str]  # AWS_ENDPOINT_URL, credentials, PARKBRAKE_DATABASE_URL
    project: Path  # a folder holding the example stack files (park's config path reads them)


def seed_demo(endpoint_url: str, database_url: str, project: Path) -> Demo:
    """A reset moto with the demo fleet, seeded by the script itself, and a migrated ledger of its own."""
    urllib.request.urlopen(
        urllib.request.Request(f"{endpoint_url}/moto-api/reset", method="POST"), timeout=120
    )
    environ = {
        **{key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "PARKBRAKE_"))},
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "PYTHONPATH": str(REPO_ROOT),
    }
    seeded = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "demo_fleet.py"), "--stack", STACK],
        env=environ, capture_output=True, text=True, timeout=WAIT_SECONDS, check=False,
    )  # fmt: skip
    assert seeded.returncode == 0, seeded.stderr
    name = f"parkbrake_demo_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    environ["PARKBRAKE_DATABASE_URL"] = make_conninfo(database_url, dbname=name)
    return Demo(environ, project)


def drop_ledger(demo: Demo, database_url: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(demo.environ["PARKBRAKE_DATABASE_URL"])["dbname"]
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def run(demo: Demo, *arguments: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``parkbrake ARGUMENTS`` as a plain process (a pipe): for JSON and for setting things up."""
    return subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", *arguments],
        env=demo.environ, cwd=demo.project, input=stdin, capture_output=True, text=True,
        timeout=WAIT_SECONDS, check=False,
    )  # fmt: skip


def document(demo: Demo, *arguments: str) -> Any:
    result = run(demo, *arguments, "--output", "json")
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)


def on_terminal(
    demo: Demo, columns: int, *arguments: str, rows: int = 50, term: str = "xterm-256color"
) -> tuple[int, str]:
    """Exit status and what a terminal of ``columns`` × ``rows`` shows (colours removed), COLUMNS and
    LINES set as a shell sets them."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    environ = {**demo.environ, "COLUMNS": str(columns), "LINES": str(rows), "TERM": term}
    process = subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", *arguments],
        env=environ, cwd=demo.project, stdin=terminal, stdout=terminal, stderr=terminal,
    )  # fmt: skip
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if not select.select([controller], [], [], 1)[0]:
            if process.poll() is not None:
                break
            continue
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the process exited and closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(controller)
    status = process.wait(timeout=WAIT_SECONDS)
    return status, ANSI.sub("", seen.decode()).replace("\r\n", "\n")


def events_file(path: Path, hosts: Mapping[str, tuple[str, datetime]], now: datetime) -> Path:
    """EC2's native state-change events for the demo's hosts (id -> pool, launch time): each started
    at its launch; the training host has stopped since (the ledger's history is all it knows)."""
    lines = []
    for instance_id, (pool, launched) in hosts.items():
        changes = [("running", launched)] + (
            [("stopped", max(now, launched + timedelta(seconds=1)))] if pool == "training" else []
        )
        for state, at in changes:
            lines.append({
                "version": "0", "id": str(uuid.uuid4()), "detail-type": "EC2 Instance State-change Notification",
                "source": "aws.ec2", "account": ACCOUNT, "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "region": REGION, "resources": [f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}"],
                "detail": {"instance-id": instance_id, "state": state},
            })  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def with_ledger(demo: Demo, tmp: Path) -> Iterator[str]:
    """Migrate the ledger, set budgets and ingest the demo hosts' events, through the CLI itself;
    yields each step's output (for the report)."""
    now = datetime.now(UTC)
    migrated = run(demo, "ledger", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    yield migrated.stdout
    hosts = {
        host["instance_id"]: (host["pool"], datetime.fromisoformat(host["launched"]))
        for host in document(demo, "status", "--stack", STACK)["hosts"]
    }
    steps = [
        ("ledger", "budget", "research", "--limit-usd", "5000"),
        ("ledger", "budget", "product", "--limit-usd", "800", "--period", "week"),
        ("ledger", "ingest", str(events_file(tmp / "events.jsonl", hosts, now))),
    ]
    for step in steps:
        result = run(demo, *step)
        assert result.returncode == 0, f"{' '.join(step)}: {result.stdout}{result.stderr}"
        yield result.stdout
    log_stop(demo, hosts, now)


def log_stop(demo: Demo, hosts: Mapping[str, tuple[str, datetime]], now: datetime) -> None:
    """The deadline's stop of the training host (which the events stop at ``now``), in the decision
    log: what `ledger savings` counts."""
    from guardrails.decisions import Decision
    from lambdas.ledger.decisions import DecisionLedger
    from lambdas.ledger.store import LedgerStore

    (training,) = [instance_id for instance_id, (pool, _) in hosts.items() if pool == "training"]
    store = LedgerStore.connect(demo.environ["PARKBRAKE_DATABASE_URL"])
    try:
        stop = Decision(
            "stop", "deadline", "past its cap", now, training, "research", {"rule": "past-deadline"}
        )
        DecisionLedger.of(store).append([stop], origin="demo")
    finally:
        store.close()
