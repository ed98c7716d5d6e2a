"""Fixtures of the host-side guardrails: a shutdown command that records instead of shutting down."""

from __future__ import annotations

import json
import shlex
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

RECORDINGS = Path(__file__).parent / "recordings"

_RECORDER = """
import json, os, sys
calls, status = sys.argv[1], int(sys.argv[2])
with open(calls, "a") as file:
    settings = ("PARKBRAKE_SHUTDOWN_COMMAND", "PARKBRAKE_IMDS_ENDPOINT", "PARKBRAKE_API_STOP_AFTER")  # the tests' own, not what was passed on
    variables = {k: v for k, v in os.environ.items() if k.startswith("PARKBRAKE_") and k not in settings}
    file.write(json.dumps({"argv": sys.argv[3:], "env": variables}) + "\\n")
sys.exit(status)
"""


@dataclass(frozen=True)
class ShutdownRecorder:
    """A real program standing in for `shutdown -h now`: it appends each invocation to a file."""

    script: Path
    calls_file: Path

    def command(self, *, exit_status: int = 0) -> str:
        return shlex.join(
            [sys.executable, str(self.script), str(self.calls_file), str(exit_status), "-h", "now"]
        )

    def calls(self) -> list[dict[str, Any]]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines()]


@pytest.fixture(autouse=True)
def recorder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ShutdownRecorder:
    """Every host test gets one, also as $PARKBRAKE_SHUTDOWN_COMMAND: no test may shut the machine down."""
    script = tmp_path / "record_shutdown.py"
    script.write_text(_RECORDER)
    recording = ShutdownRecorder(script, tmp_path / "shutdown-calls.jsonl")
    monkeypatch.setenv("PARKBRAKE_SHUTDOWN_COMMAND", recording.command())
    # The recorder leaves this machine running, so the EC2 API fallback would wait its 120s for nothing.
    monkeypatch.setenv("PARKBRAKE_API_STOP_AFTER", "0s")
    return recording


@pytest.fixture(autouse=True)
def no_instance_metadata(monkeypatch: pytest.MonkeyPatch) -> str:
    """Every host test sees no metadata service (a closed local port) unless it starts its own.

    `run` and `agent` leave their Auto Scaling group by default: on a CI runner that is itself an EC2
    host in a group, the real 169.254.169.254 would answer and the test would terminate the runner.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("PARKBRAKE_IMDS_ENDPOINT", endpoint)
    return endpoint
