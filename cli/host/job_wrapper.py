"""The job wrapper behind ``parkbrake run``: start the job, pass signals on, wait for it under its cap
(with its watchdog, :mod:`cli.host.watchdog`, when asked), then shut the host down.

The decisions (when to escalate, which exit status) are :mod:`guardrails.job_policy`'s; the supervision
and the host shutdown it shares with its watchdog and ``parkbrake agent`` are :mod:`cli.host.supervision`'s.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cli.host.api_stop import ApiFallback, ApiStopResult
from cli.host.spot import SpotWatcher
from cli.host.supervision import (
    RECHECK_SECONDS,
    HangWatch,
    JobProcess,
    Log,
    ShutdownCommand,
    ShutdownResult,
    SupervisedJob,
    host_left_running,
    no_log,
    shut_down_host,
    supervise,
)
from cli.host.watchdog import Charge, Watchdog
from guardrails.clock import Clock, SystemClock
from guardrails.job_policy import (
    NOT_EXECUTABLE_STATUS,
    NOT_FOUND_STATUS,
    CapPolicy,
    OnExit,
    exit_status,
    signal_name,
    wrapper_exit_status,
)

# Signals that would otherwise stop the wrapper and leave the job running without its cap.
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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


def run_job(
    argv: Sequence[str],
    policy: CapPolicy,
    *,
    log: Log = no_log,
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


def run_and_shut_down(
    argv: Sequence[str],
    policy: CapPolicy,
    *,
    on_exit: OnExit,
    shutdown_command: ShutdownCommand,
    log: Log = no_log,
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
