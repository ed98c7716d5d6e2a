"""A ``parkbrake`` process on a pseudo-terminal, for what only happens when a person is there to ask."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

from tests.conftest import REPO_ROOT

WAIT_SECONDS = 120  # an upper bound on each wait; each returns as soon as its condition holds


def on_terminal(arguments: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """The process, and the controlling side of its terminal (stdin, stdout and stderr)."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", *arguments],
        env=dict(os.environ), cwd=REPO_ROOT, stdin=terminal, stdout=terminal, stderr=terminal,
    )  # fmt: skip
    os.close(terminal)
    return process, controller


def read_until(controller: int, wanted: bytes) -> bytes:
    """What the terminal shows until ``wanted`` appears or the process closes it."""
    seen = b""
    deadline = time.monotonic() + WAIT_SECONDS
    while wanted not in seen and time.monotonic() < deadline:
        if not select.select([controller], [], [], 1)[0]:
            continue
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the process exited and closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    return seen
