"""Ctrl-C is exit 130 everywhere: a real SIGINT to a real ``parkbrake`` process, at several points.

* blocked in its first AWS call (an endpoint that accepts the connection and never answers), for
  every on-call command;
* at a confirmation prompt, on a pseudo-terminal;
* in the middle of a deploy, while the canary bakes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ops_fleet import STACK, project_copy, seed

from tests.cli.oncall.terminal import WAIT_SECONDS, on_terminal, read_until
from tests.conftest import REPO_ROOT

INTERRUPTED = 130


class SilentEndpoint:
    """A TCP server on 127.0.0.1 that accepts connections and never answers: an AWS call blocks in it."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.connected = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.held.append(connection)
            self.connected.set()

    def close(self) -> None:
        self.server.close()
        for connection in self.held:
            connection.close()


@pytest.fixture
def silent_endpoint() -> Iterator[SilentEndpoint]:
    endpoint = SilentEndpoint()
    yield endpoint
    endpoint.close()


def parkbrake_process(
    arguments: list[str], environment: dict[str, str], **streams: object
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", *arguments],
        env=environment, cwd=REPO_ROOT, **streams,  # type: ignore[call-overload]
    )  # fmt: skip


def interrupt(process: subprocess.Popen[bytes]) -> tuple[int, str]:
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=WAIT_SECONDS)
    return process.returncode, (stderr or b"").decode()


@pytest.mark.parametrize(
    "arguments",
    [
        ["status", "--regions", "us-east-1"],
        ["reap", "--stack", "dev", "--region", "us-east-1", "--dry-run"],
        ["schedule", "list", "--stack", "dev", "--region", "us-east-1"],
        ["park", "--now", "--dry-run", "--stack", "dev", "--region", "us-east-1"],
        ["verify", "inference", "--revision", "3f2c1ab"],
        ["deploy", "inference", "--abort", "--stack", "dev", "--yes"],
    ],
    ids=lambda arguments: " ".join(arguments[:2]),
)
def test_ctrl_c_in_the_first_aws_call_exits_130(
    silent_endpoint: SilentEndpoint, arguments: list[str]
) -> None:
    environment = {
        **os.environ, "AWS_ENDPOINT_URL": silent_endpoint.url, "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    }  # fmt: skip
    process = parkbrake_process(arguments, environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert silent_endpoint.connected.wait(WAIT_SECONDS), "the command never called AWS"

    code, stderr = interrupt(process)

    assert code == INTERRUPTED, stderr
    assert "Interrupted" in stderr
    assert "Traceback" not in stderr
    assert "Aborted!" not in stderr


@pytest.fixture
def busy_cores() -> Iterator[None]:
    """Every core busy (a `yes` per core), as on a loaded CI runner: the prompt's Ctrl-C must not depend
    on an idle machine. A SIGINT that landed between the prompt and the read was lost exactly then."""
    spinners = [
        subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(max(2, os.cpu_count() or 2))
    ]
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


@pytest.mark.usefixtures("busy_cores")
def test_ctrl_c_at_a_confirmation_prompt_exits_130(aws: str, tmp_path: Path) -> None:
    seed(aws)
    project = project_copy(tmp_path)
    process, controller = on_terminal(["park", "--now", "--stack", STACK, "--project-dir", str(project)])
    seen = read_until(controller, b"[y/N]")
    assert b"[y/N]" in seen, seen.decode(errors="replace")

    process.send_signal(signal.SIGINT)
    process.wait(timeout=WAIT_SECONDS)
    seen += read_until(controller, b"never")
    os.close(controller)

    assert process.returncode == INTERRUPTED, seen.decode(errors="replace")
    assert b"Interrupted" in seen
    assert b"Traceback" not in seen
    assert b"Aborted!" not in seen


DEPLOY_IN_REAL_TIME = """
import sys, time
from pathlib import Path
from cli.main import parkbrake
from tests.cli.oncall.deploy.inference_fleet import STACK, SimulatedScheduler, VirtualClock, build_fleet, runtime

class PacedClock(VirtualClock):
    # Each 15 s poll takes 20 ms of real time, so a real Ctrl-C lands in a wait, as it would.
    def sleep(self, seconds):
        time.sleep(0.02)
        super().sleep(seconds)

fleet = build_fleet(Path(sys.argv[1]))
scheduler = SimulatedScheduler(fleet)
parkbrake.main(
    ["deploy", "inference", "--stack", STACK, "--project-dir", sys.argv[1], "--image", fleet.image("v1"),
     "--revision", "9e8d7c6", "--bake", "2h", "--yes"],
    obj=runtime(fleet, scheduler, PacedClock(scheduler)), prog_name="parkbrake",
)
"""


def test_ctrl_c_while_a_deploy_bakes_exits_130_and_says_how_to_resume(aws: str, tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", DEPLOY_IN_REAL_TIME, str(tmp_path / "project")],
        env=dict(os.environ), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    seen = ""
    deadline = time.monotonic() + WAIT_SECONDS
    while "Canary: 10% of traffic to green" not in seen and time.monotonic() < deadline:
        line = process.stderr.readline().decode()
        if not line:
            break
        seen += line
    assert "Canary: 10% of traffic to green" in seen, seen

    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=WAIT_SECONDS)
    stderr = seen + rest.decode()

    assert process.returncode == INTERRUPTED, stderr
    assert "the service is still serving" in stderr
    assert "--abort" in stderr
    assert "Traceback" not in stderr
