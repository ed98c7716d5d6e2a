"""The watchdog of ``parkbrake run``: the job's cap and the host's shutdown survive a killed wrapper.

A wrapper that is SIGKILLed (the OOM killer, ``kill -9``, a runaway cleanup script) can neither
stop the job at its cap nor shut the host down afterwards. So before starting the job the wrapper
starts this watchdog, in a session of its own, and tells it over a pipe which process group the job
is and when it started. A SIGKILL reaches one process, and a terminal's Ctrl-C reaches only the
foreground group, so the watchdog lives on. When the wrapper is done it writes ``released``; the
pipe closing without it (the kernel closes a killed process's descriptors) means the wrapper died,
and the watchdog does what the wrapper would have done: SIGTERM the job's group at the cap, SIGKILL
after the grace, and once the group is empty, shut the host down, with the EC2 API as the fallback.

Why not ``PR_SET_PDEATHSIG``: it would kill the job the moment the wrapper dies — early, not at its
cap — reach only the job's first process and not its children, and leave nobody to shut the host
down. The watchdog does not judge the hang window (it reads no GPU); ``parkbrake agent`` still does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from cli.host.api_stop import ApiFallback
from cli.host.supervision import (
    JobProcess,
    Log,
    ShutdownCommand,
    SupervisedJob,
    host_left_running,
    shut_down_host,
    supervise,
)
from guardrails.clock import Clock, SystemClock
from guardrails.job_policy import CapPolicy, OnExit

RELEASED = "released"
# How often an orphaned group is looked at: it is not our child, so there is no exit to wait for.
POLL_SECONDS = 0.2


def group_alive(pgid: int, proc: Path = Path("/proc")) -> bool:
    """Whether any process of group ``pgid`` still runs; a zombie nobody reaped does not count."""
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone while we looked
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            return True
    return False


class OrphanedGroup:
    """The job's process group once its wrapper is gone: signalled as a group, watched through /proc."""

    def __init__(self, pgid: int, clock: Clock) -> None:
        self.pid = pgid
        self._clock = clock

    def wait(self, seconds: float) -> int | None:
        """0 once the group is empty: its exit status went to whoever reaped it, not to us."""
        if not group_alive(self.pid):
            return 0
        self._clock.sleep(min(seconds, POLL_SECONDS))
        return None if group_alive(self.pid) else 0

    def signal_group(self, signum: int) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.pid, signum)


@dataclass
class Watchdog:
    """The wrapper's end of the pipe to its watchdog."""

    process: subprocess.Popen[str]

    @classmethod
    def spawn(cls, charge: Charge) -> Watchdog:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli.host.watchdog", charge.as_json()],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        return cls(process)

    def guard(self, job: JobProcess) -> None:
        """Hand the job over: its group, and when it started on the system-wide monotonic clock."""
        self._say(f"job {job.pid} {time.monotonic()}")

    def release(self) -> None:
        """The wrapper supervised the job to its end: the watchdog has nothing left to do."""
        self._say(RELEASED)
        with suppress(OSError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)

    def _say(self, line: str) -> None:
        assert self.process.stdin is not None
        with suppress(OSError):  # a watchdog that died cannot be helped here; the wrapper carries on
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()


def say(message: str) -> None:
    print(f"parkbrake run (watchdog): {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Charge:
    """What the wrapper hands its watchdog at spawn: the cap, and how to shut the host down."""

    policy: CapPolicy
    on_exit: OnExit
    shutdown_command: ShutdownCommand
    fallback: ApiFallback

    def as_json(self) -> str:
        return json.dumps(
            {
                "max_runtime_seconds": None
                if self.policy.max_runtime is None
                else self.policy.max_runtime.total_seconds(),
                "grace_seconds": self.policy.grace.total_seconds(),
                "on_exit": self.on_exit.value,
                "shutdown_argv": list(self.shutdown_command.argv),
                "release_from_group": self.shutdown_command.release_from_group,
                "api_stop_after_seconds": None
                if self.fallback.after is None
                else self.fallback.after.total_seconds(),
                "terminate": self.fallback.terminate,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Charge:
        settings = json.loads(text)
        max_runtime, after = settings["max_runtime_seconds"], settings["api_stop_after_seconds"]
        return cls(
            CapPolicy(
                max_runtime=None if max_runtime is None else timedelta(seconds=max_runtime),
                grace=timedelta(seconds=settings["grace_seconds"]),
            ),
            OnExit(settings["on_exit"]),
            ShutdownCommand(tuple(settings["shutdown_argv"]), settings["release_from_group"]),
            ApiFallback(
                after=None if after is None else timedelta(seconds=after), terminate=settings["terminate"]
            ),
        )


def take_over(charge: Charge, job: JobProcess, started: datetime, clock: Clock, *, log: Log = say) -> int:
    """The wrapper is gone: cap the job, then shut the host down as the wrapper would have."""
    log(f"the wrapper died; enforcing the job's cap on process group {job.pid} and shutting down after it")
    supervised = SupervisedJob(clock)
    supervised.started(job)
    outcome = supervise(supervised, charge.policy, started=started, log=log, recheck=None)
    if not charge.on_exit.shuts_down:
        return 0
    ending = "cap-reached" if outcome.cap_reached else "job-ended"
    shutdown, api_stop = shut_down_host(
        charge.shutdown_command,
        {"PARKBRAKE_ON_EXIT": charge.on_exit.value, "PARKBRAKE_SHUTDOWN_REASON": f"wrapper-killed-{ending}"},
        fallback=charge.fallback,
        clock=clock,
        log=log,
    )
    return 1 if host_left_running(shutdown, api_stop) else 0


def main(argv: list[str]) -> int:
    charge = Charge.from_json(argv[0])
    handed: tuple[int, float] | None = None
    for line in sys.stdin:
        words = line.split()
        if words == [RELEASED]:
            return 0
        if len(words) == 3 and words[0] == "job":
            handed = (int(words[1]), float(words[2]))
    if handed is None:
        return 0  # the wrapper died before starting the job: nothing runs
    pgid, started_monotonic = handed
    clock = SystemClock()
    started = clock.now() - timedelta(seconds=time.monotonic() - started_monotonic)
    return take_over(charge, OrphanedGroup(pgid, clock), started, clock)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
