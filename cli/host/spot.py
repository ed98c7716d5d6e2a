"""The spot watch of ``parkbrake run`` and ``parkbrake agent``: interruption notices and rebalance recommendations.

A thread polls IMDSv2 every ``poll`` (AWS suggests 5 s) for the two documents :mod:`guardrails.spot`
reads. On an interruption notice the job gets its signal (``run``; the agent has no job of its own)
and the ``--on-interrupt`` hook runs, killed if it is still running ``HOOK_MARGIN`` before the
action. Every step is an event (kind, message, detail) that the command prints as a line of text or
JSON. Off EC2, or with the metadata service turned off, the watch says so once and stops: it never
gets in the job's way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cli.host.group_release import InstanceMetadata, MetadataError, MetadataUnreachable, NoSessionToken
from guardrails.clock import Clock, SystemClock
from guardrails.errors import InputError
from guardrails.spot import (
    HOOK_MARGIN,
    INSTANCE_ACTION_PATH,
    NOTICE_LEAD,
    REBALANCE_PATH,
    InterruptionNotice,
    NoticeError,
    OnRebalance,
    RebalanceRecommendation,
    hook_budget,
    parse_instance_action,
    parse_rebalance,
)

DEFAULT_POLL = timedelta(seconds=5)
# Set to true, the AWS SDKs' switch that turns instance metadata off; the watch honours it too.
METADATA_DISABLED_VARIABLE = "AWS_EC2_METADATA_DISABLED"

Emit = Callable[[str, str, dict[str, Any]], None]  # kind, message, detail


@dataclass(frozen=True)
class HookResult:
    command: str
    budget: timedelta
    exit_status: int | None = None
    killed: bool = False  # still running at the end of its budget
    seconds: float = 0.0
    error: str | None = None  # could not run, or no time was left to run it

    @property
    def ok(self) -> bool:
        return self.error is None and not self.killed and self.exit_status == 0

    def describe(self) -> str:
        if self.error is not None:
            return f"the hook `{self.command}` did not run: {self.error}"
        if self.killed:
            return (
                f"the hook `{self.command}` was still running at the end of its {self.budget.total_seconds():g}s "
                "and was killed"
            )
        return f"the hook `{self.command}` ended with status {self.exit_status} after {self.seconds:.1f}s"

    def as_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "budget_seconds": self.budget.total_seconds(),
            "exit_status": self.exit_status,
            "killed": self.killed,
            "seconds": round(self.seconds, 3),
            "error": self.error,
            "ok": self.ok,
        }


def check_hook_flags(spot_watch: bool, on_interrupt: str | None) -> None:
    """The hook needs the watch, and something to run (shared by run and agent)."""
    if on_interrupt is not None and not on_interrupt.strip():
        raise InputError("--on-interrupt is empty; give the checkpoint command, for example 'python save.py'")
    if on_interrupt is not None and not spot_watch:
        raise InputError(
            "--on-interrupt runs on a spot notice, which --no-spot-watch does not watch for; drop one"
        )


def event_json(kind: str, message: str, detail: Mapping[str, Any], at: datetime) -> dict[str, Any]:
    """One watch event as the commands print it with ``--output json``."""
    return {"event": kind, "at": at.isoformat(), "message": message, **detail}


def run_hook(command: str, budget: timedelta, environment: Mapping[str, str]) -> HookResult:
    """``command`` through ``/bin/sh`` in a process group of its own, killed (the group) past ``budget``."""
    if budget <= timedelta(0):
        return HookResult(command, budget, error="the notice left no time before the action")
    started = time.monotonic()
    try:
        # Its output goes to stderr: the job (and the agent's events) keep stdout.
        process = subprocess.Popen(
            ["/bin/sh", "-c", command],
            env={**os.environ, **environment},
            stdin=subprocess.DEVNULL,
            stdout=2,
            start_new_session=True,
        )
    except OSError as error:
        return HookResult(command, budget, error=f"cannot run /bin/sh: {error.strerror or error}")
    try:
        status = process.wait(timeout=budget.total_seconds())
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return HookResult(command, budget, killed=True, seconds=time.monotonic() - started)
    return HookResult(command, budget, exit_status=status, seconds=time.monotonic() - started)


@dataclass(frozen=True)
class SpotSettings:
    """What the host does on a notice: the flags of ``run`` and ``agent``."""

    interrupt_signal: signal.Signals | None = signal.SIGTERM  # None: no job to signal (the agent)
    on_interrupt: str | None = None  # the checkpoint hook
    on_rebalance: OnRebalance = OnRebalance.HOOK
    poll: timedelta = DEFAULT_POLL
    margin: timedelta = HOOK_MARGIN


@dataclass
class SpotWatcher:
    """Polls the metadata service on a thread of its own until stopped, an interruption, or no service."""

    settings: SpotSettings
    emit: Emit
    metadata: InstanceMetadata = field(default_factory=InstanceMetadata.from_environment)
    clock: Clock = field(default_factory=SystemClock)
    send_signal: Callable[[int], None] | None = None  # to the job's process group; set once it runs
    interrupted: InterruptionNotice | None = None
    rebalances: list[RebalanceRecommendation] = field(default_factory=list)
    hooks: list[HookResult] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _failing: str | None = None  # the error being reported, so a failing service is logged once
    _answered: bool = False  # the service has answered once: this is an EC2 host

    def start(self, *, first_poll_here: bool = False) -> None:
        """Watch on a thread; ``first_poll_here`` makes the first poll before returning (the agent)."""
        if os.environ.get(METADATA_DISABLED_VARIABLE, "").strip().lower() == "true":
            self.emit(
                "spot-watch-off", f"spot notices are not watched: {METADATA_DISABLED_VARIABLE} is true", {}
            )
            return
        if first_poll_here and not self.poll_once():
            return
        self._thread = threading.Thread(target=self._run, name="parkbrake-spot-watch", daemon=True)
        self._thread.start()

    def watch_job(self, send_signal: Callable[[int], None]) -> None:
        """Watch from the job's start, with the way to signal it (its process group)."""
        self.send_signal = send_signal
        self.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self) -> dict[str, Any]:
        """What the watch saw and did, for the command's summary."""
        return {
            "interruption": None if self.interrupted is None else self.interrupted.as_json(),
            "rebalances": [recommendation.as_json() for recommendation in self.rebalances],
            "hooks": [hook.as_json() for hook in self.hooks],
        }

    def _run(self) -> None:
        while not self._stop.is_set() and self.poll_once():
            self._stop.wait(self.settings.poll.total_seconds())

    def poll_once(self) -> bool:
        """One look at both documents; False once there is nothing more to watch."""
        try:
            action = self.metadata.read(INSTANCE_ACTION_PATH)
            rebalance = None if action is not None else self.metadata.read(REBALANCE_PATH)
        except (MetadataUnreachable, NoSessionToken) as error:
            if not self._answered:
                reason = (
                    "no instance metadata service answered"
                    if isinstance(error, MetadataUnreachable)
                    else "no IMDSv2"
                )
                self.emit(
                    "spot-watch-off",
                    f"spot notices are not watched: {reason} ({error})",
                    {"endpoint": self.metadata.endpoint},
                )
                return False
            return self._failed(f"the metadata service fails: {error}")
        except MetadataError as error:
            return self._failed(str(error))
        self._answered = True
        try:
            notice = None if action is None else parse_instance_action(action)
            recommendation = None if rebalance is None else parse_rebalance(rebalance)
        except NoticeError as error:
            return self._failed(str(error))
        if self._failing is not None:
            self.emit("spot-watch", "the metadata service answers again; spot notices are watched", {})
            self._failing = None
        if notice is not None:
            self.interrupt(notice)
            return False
        if recommendation is not None:
            self.recommend(recommendation)
        return self.interrupted is None  # --on-rebalance interrupt: treated as the notice

    def _failed(self, reason: str) -> bool:
        if self._failing != reason:
            self.emit("spot-watch-error", f"{reason}; still watching", {"error": reason})
            self._failing = reason
        return True

    def interrupt(self, notice: InterruptionNotice, *, why: str = "spot interruption notice") -> None:
        """The job's signal, then the hook, bounded by the notice."""
        self.interrupted = notice
        now = self.clock.now()
        lead = notice.time - now
        self.emit(
            "spot-interruption",
            f"{why}: EC2 will {notice.action} this host at {notice.time.isoformat()} "
            f"(in {max(lead.total_seconds(), 0):.0f}s)",
            notice.as_json(),
        )
        chosen = self.settings.interrupt_signal
        if chosen is not None:
            if self.send_signal is None:
                self.emit(
                    "spot-signal", f"no job is running to send {chosen.name} to", {"signal": chosen.name}
                )
            else:
                self.send_signal(chosen)
                self.emit("spot-signal", f"sent {chosen.name} to the job", {"signal": chosen.name})
        self._hook(
            notice.time,
            {"PARKBRAKE_SPOT_ACTION": notice.action, "PARKBRAKE_SPOT_TIME": notice.time.isoformat()},
        )

    def recommend(self, recommendation: RebalanceRecommendation) -> None:
        if recommendation in self.rebalances:
            return  # the same recommendation, read again
        self.rebalances.append(recommendation)
        message = (
            f"rebalance recommendation at {recommendation.notice_time.isoformat()}: interruption risk is up"
        )
        policy = self.settings.on_rebalance
        if policy is OnRebalance.INTERRUPT:
            self.emit(
                "spot-rebalance",
                f"{message}; treated as an interruption (--on-rebalance interrupt)",
                recommendation.as_json(),
            )
            now = self.clock.now()
            self.interrupt(InterruptionNotice("rebalance", now + NOTICE_LEAD), why="rebalance recommendation")
            return
        if policy is OnRebalance.LOG or self.settings.on_interrupt is None:
            self.emit("spot-rebalance", f"{message}; the job keeps running", recommendation.as_json())
            return
        self.emit(
            "spot-rebalance",
            f"{message}; running the checkpoint hook, the job keeps running",
            recommendation.as_json(),
        )
        self._hook(
            self.clock.now() + NOTICE_LEAD,
            {
                "PARKBRAKE_SPOT_ACTION": "rebalance",
                "PARKBRAKE_SPOT_TIME": recommendation.notice_time.isoformat(),
            },
        )

    def _hook(self, deadline: datetime, environment: dict[str, str]) -> None:
        command = self.settings.on_interrupt
        if command is None:
            return
        budget = hook_budget(deadline, self.clock.now(), self.settings.margin)
        self.emit(
            "spot-hook",
            f"running the hook `{command}` (killed if still running in {budget.total_seconds():.0f}s)",
            {"command": command, "budget_seconds": budget.total_seconds()},
        )
        result = run_hook(command, budget, environment)
        self.hooks.append(result)
        self.emit("spot-hook-done" if result.ok else "spot-hook-failed", result.describe(), result.as_json())
