"""What the job wrapper (``parkbrake run``) and its watchdog both do: supervise the job's process group
to its cap (or until it hangs), and shut the host down, with the EC2 API as the fallback; the host
shutdown is ``parkbrake agent``'s too. A module of its own, so that the wrapper can start its watchdog
and the watchdog can take over from the wrapper with neither importing the other.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import FrameType
from typing import Any, Protocol

from cli.host.api_stop import ApiFallback, ApiStopResult
from cli.host.group_release import ReleaseResult, release_from_group
from cli.host.shutdown_command import DEFAULT_SHUTDOWN_COMMAND
from guardrails.clock import Clock
from guardrails.durations import format_duration
from guardrails.errors import InputError
from guardrails.idle import IdlePolicy, IdleState, Observation, observe
from guardrails.job_policy import Action, CapPolicy, exit_status, next_step

# `shutdown -h now` returns at once; a command that hangs this long is reported as failed.
SHUTDOWN_TIMEOUT_SECONDS = 60
# Re-decide at least this often, so a forwarded SIGTERM starts its grace even for a job with no cap.
RECHECK_SECONDS = 0.5

Log = Callable[[str], None]


def no_log(_message: str) -> None:
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

    def run(self, environment: Mapping[str, str], *, log: Log = no_log) -> ShutdownResult:
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


class JobProcess(Protocol):
    """The job as the wrapper sees it: a process group it can signal and wait for."""

    pid: int

    def wait(self, seconds: float) -> int | None:
        """The return code once the job has ended, waiting up to ``seconds``; None while it runs."""
        ...

    def signal_group(self, signum: int) -> None: ...


@dataclass(frozen=True)
class HangWatch:
    """``--hang-after``: the GPUs sampled every ``interval``; the job is hung once all were quiet that long.

    ``sample`` returns the GPUs now, a :class:`SampleFailure`, or None once there is nothing more to
    read (a replay that ended): the watch then stops and the cap alone applies.
    """

    sample: Callable[[], Observation | None]
    after: timedelta
    threshold_percent: float
    interval: timedelta

    @property
    def policy(self) -> IdlePolicy:
        # Three missed samples in a row: what happened in between is unknown, the window restarts.
        return IdlePolicy(
            self.after, self.threshold_percent, max_gap=self.interval * 3, hang_after=self.after
        )


@dataclass
class SupervisedJob:
    """The job and what it has been sent; signals before it started are kept for it."""

    clock: Clock
    process: JobProcess | None = None
    terminate_sent_at: datetime | None = None
    killed: bool = False
    pending: list[int] = field(default_factory=list)  # arrived before the job had started
    forwarded: list[str] = field(default_factory=list)

    def started(self, process: JobProcess) -> None:
        self.process = process
        for signum in self.pending:
            self.send(signum)

    def send(self, signum: int) -> None:
        if self.process is None:
            self.pending.append(signum)
            return
        # Bookkeeping first: a job that is already gone must not be asked again and again.
        if signum == signal.SIGTERM and self.terminate_sent_at is None:
            self.terminate_sent_at = self.clock.now()
        if signum == signal.SIGKILL:
            self.killed = True
        self.process.signal_group(signum)

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Only bookkeeping and a kill(2) here: printing from a handler can re-enter the stream.
        self.forwarded.append(signal.Signals(signum).name)
        self.send(signum)


@dataclass(frozen=True)
class Supervised:
    returncode: int
    cap_reached: bool
    hung: bool


def supervise(
    job: SupervisedJob,
    policy: CapPolicy,
    *,
    started: datetime,
    log: Log = no_log,
    hang: HangWatch | None = None,
    recheck: float | None = RECHECK_SECONDS,
) -> Supervised:
    """Wait for the job, escalating at its cap or once it hangs; shared by the wrapper and its watchdog.

    ``recheck`` bounds each wait so a forwarded signal is acted on promptly (None: in virtual time,
    where nothing happens between two decisions).
    """
    assert job.process is not None
    clock = job.clock
    cap_reached = hung = False
    hang_state = IdleState()
    next_sample = started
    logged = 0
    while True:
        for name in job.forwarded[logged:]:
            log(f"received {name}; passed it on to the job")
        logged = len(job.forwarded)
        now = clock.now()
        if hang is not None and not hung and now >= next_sample:
            observation = hang.sample()
            if observation is None:
                log("no more GPU samples to read: the hang window is no longer watched")
                hang = None
            else:
                verdict = observe(hang.policy, hang_state, observation, now)
                hang_state = verdict.state
                hung = verdict.quiet_for >= hang.after
                next_sample = now + hang.interval
        step = next_step(
            policy,
            elapsed=now - started,
            terminating_for=None if job.terminate_sent_at is None else now - job.terminate_sent_at,
            killed=job.killed,
            hung=hung and job.terminate_sent_at is None,
        )
        if step.action is Action.TERMINATE:
            if hung:
                assert hang is not None
                log(
                    f"every GPU at or under {hang.threshold_percent:g}% for the hang window of "
                    f"{format_duration(hang.after)}: the job is hung; SIGTERM sent, SIGKILL in "
                    f"{format_duration(policy.grace)} if it is still running"
                )
            else:
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
        waits = [seconds for seconds in (recheck,) if seconds is not None]
        if step.wait is not None:
            waits.append(step.wait.total_seconds())
        if hang is not None and not hung:
            waits.append((next_sample - now).total_seconds())
        returncode = job.process.wait(min(waits) if waits else RECHECK_SECONDS)
        if returncode is not None:
            return Supervised(returncode, cap_reached, hung)


def shut_down_host(
    shutdown_command: ShutdownCommand,
    environment: Mapping[str, str],
    *,
    fallback: ApiFallback,
    clock: Clock,
    log: Log = no_log,
) -> tuple[ShutdownResult, ApiStopResult | None]:
    """The OS shutdown, then the EC2 API if the host is still up (shared by run, agent and watchdog)."""
    shutdown = shutdown_command.run(environment, log=log)
    if shutdown.error is not None:
        log(f"the host could not shut itself down: {shutdown.error}")
    api_stop = fallback.after_shutdown(shutdown.ok, clock)
    if api_stop is not None:
        log(api_stop.describe())
    return shutdown, api_stop


def host_left_running(shutdown: ShutdownResult | None, api_stop: ApiStopResult | None) -> bool:
    """Whether a shutdown that was asked for is known not to have happened."""
    if shutdown is None:
        return False
    if api_stop is not None and (api_stop.done or api_stop.on_ec2):
        return not api_stop.done
    return not shutdown.ok
