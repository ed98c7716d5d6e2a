"""Fixtures of the host-side guardrails: a shutdown command that records instead of shutting down."""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy
from guardrail_fleet import REGION

RECORDINGS = Path(__file__).parent / "recordings"
# Set by the fixtures below, so a command made before them still leaves them out.
TESTS_OWN_SETTINGS = ("PARKBRAKE_SHUTDOWN_COMMAND", "PARKBRAKE_IMDS_ENDPOINT", "PARKBRAKE_API_STOP_AFTER")

_RECORDER = """
import json, os, sys
calls, status, inherited = sys.argv[1], int(sys.argv[2]), set(sys.argv[3].split(","))
with open(calls, "a") as file:
    # What the agent passed on: the test process's own settings (the shutdown command, the session's
    # CA bundle, a developer's database URL) were inherited, not passed.
    variables = {k: v for k, v in os.environ.items() if k.startswith("PARKBRAKE_") and k not in inherited}
    file.write(json.dumps({"argv": sys.argv[4:], "env": variables}) + "\\n")
sys.exit(status)
"""


@dataclass(frozen=True)
class ShutdownRecorder:
    """A real program standing in for `shutdown -h now`: it appends each invocation to a file."""

    script: Path
    calls_file: Path

    def command(self, *, exit_status: int = 0) -> str:
        inherited = ",".join(
            sorted({*(k for k in os.environ if k.startswith("PARKBRAKE_")), *TESTS_OWN_SETTINGS})
        )
        return shlex.join(
            [sys.executable, str(self.script), str(self.calls_file), str(exit_status), inherited, "-h", "now"]
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
    # The recorder leaves this machine running: the EC2 API fallback is off unless a test turns it on.
    monkeypatch.setenv("PARKBRAKE_API_STOP_AFTER", "off")
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
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED", raising=False)
    return endpoint


# --- IMDSv2 on 127.0.0.1, and the fault proxy in front of moto

TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
TAGS_PREFIX = "/latest/meta-data/tags/instance/"


@dataclass
class FakeImds:
    """IMDSv2 as EC2 serves it, for one instance: reads without a valid token get 401."""

    instance_id: str
    group: str | None  # None: the instance carries no aws:autoscaling:groupName tag (404)
    region: str = REGION
    issues_tokens: bool = True  # False: answers the token PUT with 403
    # The spot documents, served once set (404 until then), as EC2 serves them: JSON text.
    instance_action: str | None = None
    rebalance: str | None = None
    requests: list[tuple[str, str, bool]] = field(default_factory=list)  # method, path, token presented
    tokens: set[str] = field(default_factory=set)

    def revoke_tokens(self) -> None:
        """Every token issued so far stops working, as when it expires: the next read gets 401."""
        self.tokens.clear()

    def answer(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
        presented = headers.get(TOKEN_HEADER.lower())
        self.requests.append((method, path, presented is not None))
        if method == "PUT" and path == "/latest/api/token":
            if not self.issues_tokens:
                return 403, "Forbidden"
            ttl = headers.get(TOKEN_TTL_HEADER.lower(), "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:  # IMDSv2 allows 1 s to 6 h
                return 400, "Bad Request"
            token = uuid.uuid4().hex
            self.tokens.add(token)
            return 200, token
        if presented not in self.tokens:
            return 401, "Unauthorized"
        tags = {} if self.group is None else {"aws:autoscaling:groupName": self.group}
        values = {
            "/latest/meta-data/instance-id": self.instance_id,
            "/latest/meta-data/placement/region": self.region,
            **{f"{TAGS_PREFIX}{key}": value for key, value in tags.items()},
            **(
                {}
                if self.instance_action is None
                else {"/latest/meta-data/spot/instance-action": self.instance_action}
            ),
            **(
                {}
                if self.rebalance is None
                else {"/latest/meta-data/events/recommendations/rebalance": self.rebalance}
            ),
        }
        return (200, values[path]) if path in values else (404, "Not Found")


@pytest.fixture
def serve_imds(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Starts a :class:`FakeImds` on 127.0.0.1 and points $PARKBRAKE_IMDS_ENDPOINT at it."""
    servers: list[ThreadingHTTPServer] = []

    def start(imds: FakeImds) -> FakeImds:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def _answer(self) -> None:
                headers = {key.lower(): value for key, value in self.headers.items()}
                status, body = imds.answer(self.command, self.path, headers)
                payload = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_PUT = _answer

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        monkeypatch.setenv("PARKBRAKE_IMDS_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        return imds

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy(aws: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """The fault proxy in front of moto, as the endpoint the self-release's client uses."""
    with FaultProxy(aws) as running:
        monkeypatch.setenv("AWS_ENDPOINT_URL", running.url)
        yield running
