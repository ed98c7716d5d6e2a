"""The job wrapper behind ``parkbrake run``, and the host shutdown it shares with ``parkbrake agent``.

The decisions (when to escalate, which exit status) are :mod:`guardrails.job_policy`'s; this module
only starts the process, passes signals on and waits.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import FrameType
from typing import Any, Protocol

from cli.host.api_stop import ApiFallback, ApiStopResult
from cli.host.group_release import ReleaseResult, release_from_group
from cli.host.shutdown_command import DEFAULT_SHUTDOWN_COMMAND
from cli.host.spot import SpotWatcher
from guardrails.clock import Clock, SystemClock
from guardrails.durations import format_duration
from guardrails.errors import InputError
from guardrails.idle import IdlePolicy, IdleState, Observation, observe
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
    hung: bool = False  # its GPUs were quiet for the whole hang window, so it was stopped

    @property
    def ended_by(self) -> str:
        if self.error is not None:
            return "not-started"
        if self.hung:
            return "hung"
        if self.cap_reached:
            return "cap-reached"
        return "signalled" if self.signal else "exited"

    def describe(self) -> str:
        status = f"status {self.exit_status}" + (f", {self.signal}" if self.signal else "")
        return {
            "not-started": f"the job could not start ({status})",
            "hung": f"the job hung (its GPUs idle for the hang window) and was ended ({status})",
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
            "hung": self.hung,
            "killed": self.killed,
            "forwarded_signals": list(self.forwarded),
            "error": self.error,
        }


class JobProcess(Protocol):
    """The job as the wrapper sees it: a process group it can signal and wait for."""

    pid: int

    def wait(self, seconds: float) -> int | None:
        """The return code once the job has ended, waiting up to ``seconds``; None while it runs."""
        ...

    def signal_group(self, signum: int) -> None: ...


class PopenJob:
    """A child in its own process group; signals go to the whole group, so a shell's children get them too.

    With an injected clock the wait is the clock's (virtual time), and the real process is given a
    moment to react to what it was sent.
    """

    REACTION_SECONDS = 0.02

    def __init__(self, argv: Sequence[str], clock: Clock | None = None) -> None:
        self.process = subprocess.Popen(argv, start_new_session=True)
        self.pid = self.process.pid
        self._clock = clock

    def wait(self, seconds: float) -> int | None:
        if self._clock is not None:
            self._clock.sleep(seconds)
            seconds = self.REACTION_SECONDS
        try:
            return self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def signal_group(self, signum: int) -> None:
        with suppress(ProcessLookupError):  # already gone; its exit is about to be collected
            os.killpg(self.pid, signum)


StartJob = Callable[[Sequence[str]], JobProcess]


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
    log: Log = _ignore,
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


def run_job(
    argv: Sequence[str],
    policy: CapPolicy,
    *,
    log: Log = _ignore,
    clock: Clock | None = None,
    hang: HangWatch | None = None,
    start: StartJob | None = None,
    on_start: Callable[[JobProcess], None] | None = None,
) -> JobResult:
    """Run ``argv`` to its end under ``policy``; must be called from the main thread (it handles signals).

    ``clock`` injected: the job's cap, grace and hang window run in that clock's time (replays,
    tests, the fleet-day benchmark). ``start`` makes the process (a real child by default);
    ``on_start`` is told once it runs (the watchdog takes it in charge).
    """
    command = tuple(argv)
    virtual = clock is not None
    job_clock: Clock = clock if clock is not None else SystemClock()
    job = SupervisedJob(job_clock)
    previous = {signum: signal.signal(signum, job.on_signal) for signum in FORWARDED_SIGNALS}
    started = job_clock.now()
    try:
        try:
            process = (start or (lambda args: PopenJob(args, clock)))(command)
        except FileNotFoundError:
            return JobResult(
                command, NOT_FOUND_STATUS, timedelta(0), error=f"command not found: {command[0]}"
            )
        except OSError as error:
            reason = error.strerror or str(error)
            return JobResult(
                command, NOT_EXECUTABLE_STATUS, timedelta(0), error=f"cannot run {command[0]}: {reason}"
            )
        job.started(process)
        if on_start is not None:
            on_start(process)
        outcome = supervise(
            job, policy, started=started, log=log, hang=hang, recheck=None if virtual else RECHECK_SECONDS
        )
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return JobResult(
        command,
        exit_status(outcome.returncode),
        job_clock.now() - started,
        signal=signal_name(outcome.returncode),
        cap_reached=outcome.cap_reached,
        killed=job.killed,
        forwarded=tuple(job.forwarded),
        hung=outcome.hung,
    )


@dataclass(frozen=True)
class RunReport:
    job: JobResult
    on_exit: OnExit
    shutdown: ShutdownResult | None
    exit_status: int
    api_stop: ApiStopResult | None = None  # None: the host went down, or no shutdown was asked
    spot: dict[str, Any] | None = None  # what the spot watch saw and did; None: not watched

    def as_json(self) -> dict[str, Any]:
        return {
            "job": self.job.as_json(),
            "on_exit": self.on_exit.value,
            "shutdown": None if self.shutdown is None else self.shutdown.as_json(),
            "api_stop": None if self.api_stop is None else self.api_stop.as_json(),
            "spot": self.spot,
            "exit_status": self.exit_status,
        }


def shut_down_host(
    shutdown_command: ShutdownCommand,
    environment: Mapping[str, str],
    *,
    fallback: ApiFallback,
    clock: Clock,
    log: Log = _ignore,
) -> tuple[ShutdownResult, ApiStopResult | None]:
    """The OS shutdown, then the EC2 API if the host is still up (shared by run, agent and watchdog)."""
    shutdown = shutdown_command.run(environment, log=log)
    if shutdown.error is not None:
        log(f"the host could not shut itself down: {shutdown.error}")
    api_stop = fallback.after_shutdown(shutdown.ok, clock)
    if api_stop is not None:
        log(api_stop.describe())
    return shutdown, api_stop


def run_and_shut_down(
    argv: Sequence[str],
    policy: CapPolicy,
    *,
    on_exit: OnExit,
    shutdown_command: ShutdownCommand,
    log: Log = _ignore,
    hang: HangWatch | None = None,
    fallback: ApiFallback | None = None,
    clock: Clock | None = None,
    start: StartJob | None = None,
    watchdog: bool = False,
    spot: SpotWatcher | None = None,
) -> RunReport:
    """``parkbrake run``: the job to its end, then the host down however the job ended (unless ``none``).

        A job that failed, crashed, was interrupted or could not even start leaves nothing for the host
        to do, so each of those shuts it down too: a guardrail that a typo or a Ctrl-C disables is no
        guardrail. ``--on-exit none`` is the way to keep the host. ``fallback``: how the host stops
    itself through the EC2 API when the OS shutdown did not take it down. With ``watchdog``, a process of its
        own session outlives this one and enforces the cap and the shutdown if this one is killed
        (:mod:`cli.host.watchdog`). ``spot`` watches for spot notices from the job's start, and signals
        the job on one; a checkpoint hook still running when the job ends is waited for (it is bounded
        by the notice) before the shutdown.
    """
    from cli.host.watchdog import Charge, Watchdog

    fallback = fallback or ApiFallback(after=None)
    guard = (
        Watchdog.spawn(Charge(policy, on_exit, shutdown_command, fallback))
        if watchdog and (on_exit.shuts_down or policy.max_runtime is not None)
        else None
    )

    def on_start(process: JobProcess) -> None:
        if guard is not None:
            guard.guard(process)
        if spot is not None:
            spot.watch_job(process.signal_group)

    try:
        job = run_job(argv, policy, log=log, clock=clock, hang=hang, start=start, on_start=on_start)
    finally:
        if spot is not None:
            spot.stop()
        if guard is not None:
            guard.release()
    if job.error is not None:
        log(job.error)
    shutdown = api_stop = None
    if on_exit.shuts_down:
        log(f"{job.describe()}; shutting the host down ({on_exit.value})")
        shutdown, api_stop = shut_down_host(
            shutdown_command,
            {
                "PARKBRAKE_ON_EXIT": on_exit.value,
                "PARKBRAKE_SHUTDOWN_REASON": f"job-{job.ended_by}",
                "PARKBRAKE_JOB_EXIT_STATUS": str(job.exit_status),
            },
            fallback=fallback,
            clock=clock or SystemClock(),
            log=log,
        )
    return RunReport(
        job,
        on_exit,
        shutdown,
        wrapper_exit_status(job.exit_status, shutdown_failed=host_left_running(shutdown, api_stop)),
        api_stop,
        None if spot is None else spot.summary(),
    )


def host_left_running(shutdown: ShutdownResult | None, api_stop: ApiStopResult | None) -> bool:
    """Whether a shutdown that was asked for is known not to have happened."""
    if shutdown is None:
        return False
    if api_stop is not None and (api_stop.done or api_stop.on_ec2):
        return not api_stop.done
    return not shutdown.ok
