"""`parkbrake run` with real child processes and a real (recording) shutdown command.

Caps are one or two seconds; assertions are on outcomes (status, signal, who was invoked), never
on how fast anything ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from cli.host.job_wrapper import run_and_shut_down, run_job
from cli.host.supervision import ShutdownCommand
from guardrails.errors import InputError
from guardrails.job_policy import CapPolicy, OnExit
from tests.cli.host.conftest import ShutdownRecorder
from tests.conftest import REPO_ROOT

S = timedelta(seconds=1)
NO_CAP = CapPolicy(max_runtime=None, grace=S)
SHORT_CAP = CapPolicy(max_runtime=S, grace=S)
# A shell ignores SIGTERM within a millisecond of starting, far inside a one-second cap, and `sleep`
# inherits the ignored signal: the whole group can only be stopped by SIGKILL.
IGNORES_SIGTERM = ["sh", "-c", "trap '' TERM; sleep 60"]
PARKBRAKE = [sys.executable, "-c", "from cli.main import main; main()"]


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def wait_for(path: Path, *, limit: float = 30.0) -> None:
    """Wait for a child to reach a point it announces by writing ``path``; the limit only bounds a failure."""
    deadline = time.monotonic() + limit
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def is_gone(pid: int) -> bool:
    """Exited, or a zombie nobody reaped (PID 1 in a container may never reap it)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


# --- the job itself


def test_a_job_that_exits_0_gives_0() -> None:
    result = run_job(python("print('done')"), NO_CAP)
    assert (result.exit_status, result.ended_by, result.signal, result.cap_reached) == (
        0,
        "exited",
        None,
        False,
    )


def test_a_job_that_exits_3_gives_3() -> None:
    result = run_job(python("import sys; sys.exit(3)"), SHORT_CAP)
    assert (result.exit_status, result.ended_by, result.cap_reached) == (3, "exited", False)


def test_a_job_that_outlives_its_cap_gets_sigterm() -> None:
    result = run_job(python("import time; time.sleep(60)"), CapPolicy(max_runtime=S, grace=30 * S))
    assert result.cap_reached
    assert not result.killed
    assert (result.exit_status, result.signal, result.ended_by) == (143, "SIGTERM", "cap-reached")
    assert result.runtime >= S


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    result = run_job(IGNORES_SIGTERM, SHORT_CAP)
    assert result.cap_reached
    assert result.killed
    assert (result.exit_status, result.signal) == (137, "SIGKILL")
    assert result.runtime >= 2 * S


def test_a_job_that_cleans_up_on_sigterm_keeps_its_own_status(tmp_path: Path) -> None:
    marker = tmp_path / "checkpoint"
    code = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        f"    open({str(marker)!r}, 'w').write('saved')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "time.sleep(60)\n"
    )
    result = run_job(python(code), CapPolicy(max_runtime=2 * S, grace=30 * S))
    assert marker.read_text() == "saved"
    assert (result.exit_status, result.ended_by, result.killed) == (0, "cap-reached", False)


def test_signals_reach_the_jobs_children(tmp_path: Path) -> None:
    """The job runs in its own process group and signals go to the group: a shell's children stop too."""
    pid_file = tmp_path / "grandchild.pid"

    def stop_the_wrapper_once_the_grandchild_runs() -> None:
        wait_for(pid_file)
        os.kill(os.getpid(), signal.SIGTERM)  # to this process, where run_job is passing signals on

    sender = threading.Thread(target=stop_the_wrapper_once_the_grandchild_runs)
    sender.start()
    result = run_job(
        ["sh", "-c", f"sleep 60 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait"], NO_CAP
    )
    sender.join()
    assert result.forwarded == ("SIGTERM",)
    assert (result.exit_status, result.signal) == (143, "SIGTERM")
    # The grandchild got the same SIGTERM; it may finish dying a moment after the shell has exited.
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while not is_gone(grandchild):
        assert time.monotonic() < deadline, "the job's child outlived the SIGTERM"
        time.sleep(0.02)


def test_a_job_killed_by_a_signal_of_its_own_exits_128_plus_the_signal() -> None:
    result = run_job(python("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"), NO_CAP)
    assert (result.exit_status, result.signal, result.ended_by) == (137, "SIGKILL", "signalled")


def test_a_missing_command_exits_127_and_an_unrunnable_one_126(tmp_path: Path) -> None:
    missing = run_job(["parkbrake-no-such-command"], NO_CAP)
    assert (missing.exit_status, missing.ended_by) == (127, "not-started")
    assert missing.error == "command not found: parkbrake-no-such-command"
    not_executable = tmp_path / "job.sh"
    not_executable.write_text("echo hi\n")
    refused = run_job([str(not_executable)], NO_CAP)
    assert (refused.exit_status, refused.ended_by) == (126, "not-started")
    assert "Permission denied" in (refused.error or "")


# --- the shutdown after it


def test_the_host_is_shut_down_after_the_job_with_the_choice_passed_on(recorder: ShutdownRecorder) -> None:
    report = run_and_shut_down(
        python("import sys; sys.exit(3)"),
        NO_CAP,
        on_exit=OnExit.TERMINATE,
        shutdown_command=ShutdownCommand.parse(recorder.command()),
    )
    assert report.exit_status == 3
    assert report.shutdown is not None
    assert report.shutdown.ok
    [call] = recorder.calls()
    assert call["argv"] == ["-h", "now"]
    assert call["env"] == {
        "PARKBRAKE_ON_EXIT": "terminate",
        "PARKBRAKE_SHUTDOWN_REASON": "job-exited",
        "PARKBRAKE_JOB_EXIT_STATUS": "3",
    }


def test_a_capped_job_shuts_the_host_down_with_the_reason(recorder: ShutdownRecorder) -> None:
    report = run_and_shut_down(
        IGNORES_SIGTERM,
        SHORT_CAP,
        on_exit=OnExit.STOP,
        shutdown_command=ShutdownCommand.parse(recorder.command()),
    )
    assert report.exit_status == 137
    [call] = recorder.calls()
    assert call["env"]["PARKBRAKE_SHUTDOWN_REASON"] == "job-cap-reached"
    assert call["env"]["PARKBRAKE_ON_EXIT"] == "stop"


def test_a_job_that_cannot_start_still_shuts_the_host_down(recorder: ShutdownRecorder) -> None:
    report = run_and_shut_down(
        ["parkbrake-no-such-command"],
        NO_CAP,
        on_exit=OnExit.STOP,
        shutdown_command=ShutdownCommand.parse(recorder.command()),
    )
    assert report.exit_status == 127
    assert [call["env"]["PARKBRAKE_SHUTDOWN_REASON"] for call in recorder.calls()] == ["job-not-started"]


def test_on_exit_none_keeps_the_host(recorder: ShutdownRecorder) -> None:
    report = run_and_shut_down(
        python("pass"),
        NO_CAP,
        on_exit=OnExit.NONE,
        shutdown_command=ShutdownCommand.parse(recorder.command()),
    )
    assert (report.exit_status, report.shutdown) == (0, None)
    assert recorder.calls() == []


@pytest.mark.parametrize(("job_status", "expected"), [(0, 1), (4, 4)])
def test_a_failed_shutdown_is_reported_and_never_reads_as_success(
    recorder: ShutdownRecorder, job_status: int, expected: int
) -> None:
    messages: list[str] = []
    report = run_and_shut_down(
        python(f"import sys; sys.exit({job_status})"),
        NO_CAP,
        on_exit=OnExit.STOP,
        shutdown_command=ShutdownCommand.parse(recorder.command(exit_status=5)),
        log=messages.append,
    )
    assert report.exit_status == expected
    assert report.shutdown is not None
    assert report.shutdown.exit_status == 5
    assert len(recorder.calls()) == 1
    assert any("could not shut itself down" in message and "exit status 5" in message for message in messages)


def test_a_missing_shutdown_command_is_reported() -> None:
    result = ShutdownCommand.parse("parkbrake-no-such-shutdown -h now").run({})
    assert (result.ok, result.error) == (False, "shutdown command not found: parkbrake-no-such-shutdown")


@pytest.mark.parametrize("text", ["", "   ", "shutdown 'unbalanced"])
def test_an_unusable_shutdown_command_is_an_input_error(text: str) -> None:
    with pytest.raises(InputError, match="shutdown command"):
        ShutdownCommand.parse(text)


# --- the command, as a real process receiving real signals


def start_wrapper(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PARKBRAKE, "run", *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def handles(signum: signal.Signals, ready: Path, seen: Path, status: int) -> list[str]:
    """A job that announces it is ready, and records the signal it gets before exiting ``status``."""
    return python(
        "import signal, sys, time\n"
        "def stop(signum, _):\n"
        f"    open({str(seen)!r}, 'w').write(signal.Signals(signum).name)\n"
        f"    sys.exit({status})\n"
        f"signal.signal(signal.{signum.name}, stop)\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "time.sleep(60)\n"
    )


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda signum: signum.name
)
def test_signals_to_the_wrapper_are_passed_on_to_the_job(
    tmp_path: Path, recorder: ShutdownRecorder, signum: signal.Signals
) -> None:
    ready, seen = tmp_path / "ready", tmp_path / "seen"
    wrapper = start_wrapper("-o", "json", "--", *handles(signum, ready, seen, 7))
    wait_for(ready)
    wrapper.send_signal(signum)
    _, stderr = wrapper.communicate(timeout=60)
    assert wrapper.returncode == 7
    assert seen.read_text() == signum.name
    report = json.loads(stderr.strip().splitlines()[-1])
    assert report["job"]["forwarded_signals"] == [signum.name]
    assert report["job"]["ended_by"] == "exited"
    assert [call["env"]["PARKBRAKE_SHUTDOWN_REASON"] for call in recorder.calls()] == ["job-exited"]


def test_a_job_that_ignores_a_forwarded_sigterm_is_killed_after_the_grace(
    tmp_path: Path, recorder: ShutdownRecorder
) -> None:
    ready = tmp_path / "ready"
    job = python(
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "time.sleep(60)\n"
    )
    wrapper = start_wrapper("--grace", "1s", "-o", "json", "--", *job)
    wait_for(ready)
    wrapper.send_signal(signal.SIGTERM)
    _, stderr = wrapper.communicate(timeout=60)
    assert wrapper.returncode == 137
    report = json.loads(stderr.strip().splitlines()[-1])["job"]
    assert (report["killed"], report["cap_reached"], report["signal"]) == (True, False, "SIGKILL")
    assert len(recorder.calls()) == 1


def test_the_command_runs_the_job_and_reports_in_text(recorder: ShutdownRecorder) -> None:
    wrapper = start_wrapper(
        "--max-runtime",
        "1s",
        "--grace",
        "1s",
        "--on-exit",
        "terminate",
        "--",
        "sh",
        "-c",
        "trap '' TERM; echo training; sleep 60",
    )
    stdout, stderr = wrapper.communicate(timeout=60)
    assert wrapper.returncode == 137
    assert stdout == "training\n"  # stdout is the job's alone
    assert "reached its cap of 1s" in stderr
    assert "SIGKILL sent" in stderr
    assert "exit status 137" in stderr
    assert recorder.calls()[0]["env"]["PARKBRAKE_ON_EXIT"] == "terminate"


def test_on_exit_none_from_the_command_line(recorder: ShutdownRecorder) -> None:
    wrapper = start_wrapper("--on-exit", "none", "--", *python("import sys; sys.exit(3)"))
    wrapper.communicate(timeout=60)
    assert wrapper.returncode == 3
    assert recorder.calls() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--max-runtime", "90 minutes", "--", "true"],
            "Error: invalid value for --max-runtime: '90 minutes' is not a duration — use 90m, 2h, 1h30m or 5400s",
        ),
        (["--max-runtime", "0s", "--", "true"], "Error: invalid value for --max-runtime: '0s' is zero"),
        (["--grace", "-1s", "--", "true"], "Error: invalid value for --grace"),
        (["--on-exit", "halt", "--", "true"], "Error: invalid value for --on-exit: 'halt' — use one of "),
        (["--shutdown-command", "", "--", "true"], "the shutdown command is empty"),
        ([], "Error: missing argument COMMAND — give it: parkbrake run [OPTIONS] COMMAND..."),
    ],
)
def test_bad_input_exits_2_without_a_traceback_and_runs_nothing(
    recorder: ShutdownRecorder, args: list[str], message: str
) -> None:
    wrapper = start_wrapper(*args)
    _, stderr = wrapper.communicate(timeout=60)
    assert wrapper.returncode == 2
    assert message in stderr
    assert "Traceback" not in stderr
    assert recorder.calls() == []


def test_the_flag_overrides_the_environment_variable(recorder: ShutdownRecorder) -> None:
    """$PARKBRAKE_SHUTDOWN_COMMAND (the fixture's recorder, exiting 0) loses to --shutdown-command."""
    wrapper = start_wrapper("--shutdown-command", recorder.command(exit_status=5), "--", "true")
    _, stderr = wrapper.communicate(timeout=60)
    assert wrapper.returncode == 1
    assert "failed with exit status 5" in stderr
    assert len(recorder.calls()) == 1
