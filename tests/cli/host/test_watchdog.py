"""A SIGKILLed `parkbrake run` still ends its job at the cap and shuts the host down: the watchdog.

Real processes and a real SIGKILL; the shutdown is the recorder. Waits are bounded and only bound a
failure: the assertions are on what happened (who was signalled, what the recorder was told).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from cli.host.watchdog import group_alive
from tests.cli.host.conftest import ShutdownRecorder
from tests.conftest import REPO_ROOT

PARKBRAKE = [sys.executable, "-c", "from cli.main import main; main()"]


def eventually(condition: Callable[[], bool], what: str, *, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen"
        time.sleep(0.05)


def is_gone(pid: int) -> bool:
    """Exited, or a zombie nobody reaped (PID 1 in a container may never reap it)."""
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def processes_marked(mark: str) -> list[int]:
    """Live processes whose environment carries ``mark``: the wrapper's descendants, the watchdog too."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"PARKBRAKE_TEST_MARK={mark}".encode() in environ.read_bytes():
                pid = int(environ.parent.name)
                if not is_gone(pid):
                    found.append(pid)
        except OSError:
            continue
    return found


def start_wrapper(tmp_path: Path, *args: str, job: str) -> tuple[subprocess.Popen[str], int, str]:
    """`parkbrake run ARGS -- sh -c JOB`, once the job runs: the wrapper, the job's pid, the mark."""
    mark = uuid.uuid4().hex
    pid_file = tmp_path / "job.pid"
    wrapper = subprocess.Popen(
        [
            *PARKBRAKE,
            "run",
            *args,
            "--",
            "sh",
            "-c",
            f"echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; {job}",
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PARKBRAKE_TEST_MARK": mark},
        # A file, not a pipe: the watchdog inherits stderr, and a pipe would stay open while it lives.
        stderr=(tmp_path / "wrapper.stderr").open("w"),
        text=True,
    )
    eventually(pid_file.exists, "the job starting")
    return wrapper, int(pid_file.read_text()), mark


def kill_wrapper(wrapper: subprocess.Popen[str]) -> None:
    wrapper.send_signal(signal.SIGKILL)
    assert wrapper.wait(timeout=30) == -signal.SIGKILL


def test_a_sigkilled_wrapper_s_job_is_still_ended_at_its_cap_and_the_host_shut_down(
    tmp_path: Path, recorder: ShutdownRecorder
) -> None:
    wrapper, job, mark = start_wrapper(tmp_path, "--max-runtime", "6s", "--grace", "2s", job="exec sleep 600")

    kill_wrapper(wrapper)

    assert not is_gone(job), "the job must run on to its cap, not die with the wrapper"
    assert recorder.calls() == []
    eventually(lambda: is_gone(job), "the job being ended at its cap")
    eventually(lambda: len(recorder.calls()) == 1, "the shutdown")
    (call,) = recorder.calls()
    assert call["env"]["PARKBRAKE_SHUTDOWN_REASON"] == "wrapper-killed-cap-reached"
    assert call["env"]["PARKBRAKE_ON_EXIT"] == "stop"
    eventually(lambda: processes_marked(mark) == [], "the watchdog exiting")
    said = (tmp_path / "wrapper.stderr").read_text()
    assert "parkbrake run (watchdog): the wrapper died" in said
    assert "the job reached its cap of 6s" in said


def test_a_job_that_ends_by_itself_after_the_wrapper_was_killed_still_shuts_the_host_down(
    tmp_path: Path, recorder: ShutdownRecorder
) -> None:
    go = tmp_path / "go"
    wrapper, job, mark = start_wrapper(
        tmp_path, "--max-runtime", "2h", job=f"while [ ! -e {go} ]; do sleep 0.05; done; exit 0"
    )
    kill_wrapper(wrapper)
    go.touch()  # the job finishes its work with nobody but the watchdog watching

    eventually(lambda: is_gone(job), "the job finishing")
    eventually(lambda: len(recorder.calls()) == 1, "the shutdown")
    assert recorder.calls()[0]["env"]["PARKBRAKE_SHUTDOWN_REASON"] == "wrapper-killed-job-ended"
    eventually(lambda: processes_marked(mark) == [], "the watchdog exiting")


def test_a_wrapper_that_finishes_releases_its_watchdog_and_the_host_is_shut_down_once(
    recorder: ShutdownRecorder,
) -> None:
    mark = uuid.uuid4().hex
    completed = subprocess.run(
        [*PARKBRAKE, "run", "--max-runtime", "1h", "--", sys.executable, "-c", "pass"],
        cwd=REPO_ROOT,
        env={**os.environ, "PARKBRAKE_TEST_MARK": mark},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    eventually(lambda: processes_marked(mark) == [], "the watchdog exiting")
    assert len(recorder.calls()) == 1
    assert "watchdog" not in completed.stderr


def test_a_group_of_only_zombies_is_not_alive(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "600"], start_new_session=True)
    assert group_alive(child.pid)
    os.killpg(child.pid, signal.SIGKILL)
    eventually(lambda: is_gone(child.pid), "the child dying")
    assert not group_alive(child.pid)  # a zombie until reaped just below: not a live member
    child.wait()
