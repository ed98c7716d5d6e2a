"""The job wrapper behind ``parkbrake run``, and the host shutdown it shares with ``parkbrake agent``.

The decisions (when to escalate, which exit status) are :mod:`guardrails.job_policy`'s; this module
only starts the process, passes signals on and waits.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import FrameType
from typing import Any

from cli.host.group_release import ReleaseResult, release_from_group
from guardrails.durations import format_duration
from guardrails.errors import InputError
from guardrails.job_policy import (
    NOT_EXECUTABLE_STATUS,
    NOT_FOUND_STATUS,
    Action,
    CapPolicy,
    OnExit,
    exit_status,
    next_step,
    signal_name,
    wrapper_exit_status,
)

DEFAULT_SHUTDOWN_COMMAND = "shutdown -h now"
SHUTDOWN_COMMAND_VARIABLE = "PARKBRAKE_SHUTDOWN_COMMAND"
# `shutdown -h now` returns at once; a command that hangs this long is reported as failed.
SHUTDOWN_TIMEOUT_SECONDS = 60
# Signals that would otherwise stop the wrapper and leave the job running without its cap.
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Re-decide at least this often, so a forwarded SIGTERM starts its grace even for a job with no cap.
RECHECK_SECONDS = 0.5

Log = Callable[[str], None]


def _ignore(_message: str) -> None:
    """The log of a caller that wants only the result."""


@dataclass(frozen=True)
class ShutdownResult:
    command: tuple[str, ...]
    exit_status: int | None
    error: str | None = None
    release: ReleaseResult | None = None  # None: leaving the Auto Scaling group was not asked for

    @property
    def ok(self) -> bool:
        """Whether the OS command ran; a group that could not be left is reported, not a failure."""
        return self.error is None

    def as_json(self) -> dict[str, Any]:
        return {
            "command": list(self.command),
            "exit_status": self.exit_status,
            "ok": self.ok,
            "error": self.error,
            "release_from_group": None if self.release is None else self.release.as_json(),
        }


@dataclass(frozen=True)
class ShutdownCommand:
    """The OS command that shuts the host down; the launch template makes that a stop or a terminate.

    With ``release_from_group`` the host first leaves its Auto Scaling group with the group's desired
    capacity lowered (:mod:`cli.host.group_release`), so that the terminate does not bring a replacement.
    """

    argv: tuple[str, ...]
    release_from_group: bool = False

    @classmethod
    def parse(cls, text: str, *, release_from_group: bool = False) -> ShutdownCommand:
        try:
            argv = tuple(shlex.split(text))
        except ValueError as error:
            raise InputError(f"shutdown command {text!r} cannot be split into words: {error}") from None
        if not argv:
            raise InputError(f"the shutdown command is empty; the default is {DEFAULT_SHUTDOWN_COMMAND!r}")
        return cls(argv, release_from_group)

    def run(self, environment: Mapping[str, str], *, log: Log = _ignore) -> ShutdownResult:
        """Leave the group if asked, then run the command with ``environment`` added; never raises.

        The command runs whatever leaving the group came to: stopping the bill needs no IAM permission.
        """
        release = None
        if self.release_from_group:
            release = release_from_group()
            log(release.describe())
        return replace(self._run_command(environment), release=release)

    def _run_command(self, environment: Mapping[str, str]) -> ShutdownResult:
        shown = shlex.join(self.argv)
        try:
            completed = subprocess.run(
                self.argv,
                env={**os.environ, **environment},
                stdin=subprocess.DEVNULL,
                timeout=SHUTDOWN_TIMEOUT_SECONDS,
                check=False,
            )
        except FileNotFoundError:
            return ShutdownResult(self.argv, None, f"shutdown command not found: {self.argv[0]}")
        except subprocess.TimeoutExpired:
            return ShutdownResult(
                self.argv, None, f"`{shown}` did not finish within {SHUTDOWN_TIMEOUT_SECONDS}s"
            )
        except OSError as error:
            return ShutdownResult(self.argv, None, f"cannot run `{shown}`: {error.strerror or error}")
        if completed.returncode != 0:
            status = exit_status(completed.returncode)
            return ShutdownResult(self.argv, status, f"`{shown}` failed with exit status {status}")
        return ShutdownResult(self.argv, 0)


@dataclass(frozen=True)
class JobResult:
    command: tuple[str, ...]
    exit_status: int
    runtime: timedelta
    signal: str | None = None  # the signal that ended the job, if one did
    cap_reached: bool = False
    killed: bool = False  # SIGKILLed after the grace
    forwarded: tuple[str, ...] = ()  # signals the wrapper received and passed on
    error: str | None = None  # why the job could not be started

    @property
    def ended_by(self) -> str:
        if self.error is not None:
            return "not-started"
        if self.cap_reached:
            return "cap-reached"
        return "signalled" if self.signal else "exited"

    def describe(self) -> str:
        status = f"status {self.exit_status}" + (f", {self.signal}" if self.signal else "")
        return {
            "not-started": f"the job could not start ({status})",
            "cap-reached": f"the job reached its cap and ended ({status})",
            "signalled": f"the job was ended by a signal ({status})",
            "exited": f"the job exited ({status})",
        }[self.ended_by]

    def as_json(self) -> dict[str, Any]:
        return {
            "command": list(self.command),
            "exit_status": self.exit_status,
            "ended_by": self.ended_by,
            "signal": self.signal,
            "runtime_seconds": round(self.runtime.total_seconds(), 3),
            "cap_reached": self.cap_reached,
            "killed": self.killed,
            "forwarded_signals": list(self.forwarded),
            "error": self.error,
        }


@dataclass
class _Job:
    """A child in its own process group; signals go to the whole group, so a shell's children get them too."""

    clock: Callable[[], float]
    process: subprocess.Popen[bytes] | None = None
    terminate_sent_at: float | None = None
    killed: bool = False
    pending: list[int] = field(default_factory=list)  # arrived before the job had started
    forwarded: list[str] = field(default_factory=list)

    def start(self, argv: Sequence[str]) -> None:
        self.process = subprocess.Popen(argv, start_new_session=True)
        for signum in self.pending:
            self.send(signum)

    def send(self, signum: int) -> None:
        if self.process is None:
            self.pending.append(signum)
            return
        # Bookkeeping first: a job that is already gone must not be asked again and again.
        if signum == signal.SIGTERM and self.terminate_sent_at is None:
            self.terminate_sent_at = self.clock()
        if signum == signal.SIGKILL:
            self.killed = True
        with suppress(ProcessLookupError):  # already gone; its exit is about to be collected
            os.killpg(self.process.pid, signum)

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Only bookkeeping and a kill(2) here: printing from a handler can re-enter the stream.
        self.forwarded.append(signal.Signals(signum).name)
        self.send(signum)


def run_job(
    argv: Sequence[str], policy: CapPolicy, *, log: Log = _ignore, clock: Callable[[], float] = time.monotonic
) -> JobResult:
    """Run ``argv`` to its end under ``policy``; must be called from the main thread (it handles signals)."""
    command = tuple(argv)
    job = _Job(clock)
    previous = {signum: signal.signal(signum, job.on_signal) for signum in FORWARDED_SIGNALS}
    started = clock()
    cap_reached = False
    try:
        try:
            job.start(command)
        except FileNotFoundError:
            return JobResult(
                command, NOT_FOUND_STATUS, timedelta(0), error=f"command not found: {command[0]}"
            )
        except OSError as error:
            reason = error.strerror or str(error)
            return JobResult(
                command, NOT_EXECUTABLE_STATUS, timedelta(0), error=f"cannot run {command[0]}: {reason}"
            )
        assert job.process is not None
        logged = 0
        while True:
            for name in job.forwarded[logged:]:
                log(f"received {name}; passed it on to the job")
            logged = len(job.forwarded)
            now = clock()
            step = next_step(
                policy,
                elapsed=timedelta(seconds=now - started),
                terminating_for=(
                    None if job.terminate_sent_at is None else timedelta(seconds=now - job.terminate_sent_at)
                ),
                killed=job.killed,
            )
            if step.action is Action.TERMINATE:
                cap_reached = True
                log(
                    f"the job reached its cap of {format_duration(policy.max_runtime or timedelta(0))}: "
                    f"SIGTERM sent, SIGKILL in {format_duration(policy.grace)} if it is still running"
                )
                job.send(signal.SIGTERM)
                continue
            if step.action is Action.KILL:
                log(f"the job outlived its grace of {format_duration(policy.grace)}: SIGKILL sent")
                job.send(signal.SIGKILL)
                continue
            timeout = (
                RECHECK_SECONDS if step.wait is None else min(step.wait.total_seconds(), RECHECK_SECONDS)
            )
            try:
                returncode = job.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                continue
            break
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return JobResult(
        command,
        exit_status(returncode),
        timedelta(seconds=clock() - started),
        signal=signal_name(returncode),
        cap_reached=cap_reached,
        killed=job.killed,
        forwarded=tuple(job.forwarded),
    )


@dataclass(frozen=True)
class RunReport:
    job: JobResult
    on_exit: OnExit
    shutdown: ShutdownResult | None
    exit_status: int

    def as_json(self) -> dict[str, Any]:
        return {
            "job": self.job.as_json(),
            "on_exit": self.on_exit.value,
            "shutdown": None if self.shutdown is None else self.shutdown.as_json(),
            "exit_status": self.exit_status,
        }


def run_and_shut_down(
    argv: Sequence[str],
    policy: CapPolicy,
    *,
    on_exit: OnExit,
    shutdown_command: ShutdownCommand,
    log: Log = _ignore,
) -> RunReport:
    """``parkbrake run``: the job to its end, then the host down however the job ended (unless ``none``).

    A job that failed, crashed, was interrupted or could not even start leaves nothing for the host
    to do, so each of those shuts it down too: a guardrail that a typo or a Ctrl-C disables is no
    guardrail. ``--on-exit none`` is the way to keep the host.
    """
    job = run_job(argv, policy, log=log)
    if job.error is not None:
        log(job.error)
    shutdown = None
    if on_exit.shuts_down:
        log(f"{job.describe()}; shutting the host down ({on_exit.value})")
        shutdown = shutdown_command.run(
            {
                "PARKBRAKE_ON_EXIT": on_exit.value,
                "PARKBRAKE_SHUTDOWN_REASON": f"job-{job.ended_by}",
                "PARKBRAKE_JOB_EXIT_STATUS": str(job.exit_status),
            },
            log=log,
        )
        if shutdown.error is not None:
            log(f"the host could not shut itself down: {shutdown.error}")
    return RunReport(
        job,
        on_exit,
        shutdown,
        wrapper_exit_status(job.exit_status, shutdown_failed=shutdown is not None and not shutdown.ok),
    )
