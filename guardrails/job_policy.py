"""What ``parkbrake run`` does with a job, decided without touching a process.

The wrapper asks :func:`next_step` what to do next given how long the job has run and what it has
already been sent; it turns the job's return code into a shell-style exit status with
:func:`exit_status`, and its own exit status with :func:`wrapper_exit_status`.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum, StrEnum


class OnExit(StrEnum):
    """What the host should do once the job has ended.

    ``stop`` and ``terminate`` both run the OS shutdown command; which one AWS performs is decided by
    the launch template's ``instance_initiated_shutdown_behavior``. The choice is handed to the
    shutdown command (``PARKBRAKE_ON_EXIT``) so a custom command can act on it.
    """

    STOP = "stop"
    TERMINATE = "terminate"
    NONE = "none"

    @property
    def shuts_down(self) -> bool:
        return self is not OnExit.NONE


class Action(Enum):
    WAIT = "wait"
    TERMINATE = "terminate"
    KILL = "kill"


@dataclass(frozen=True)
class CapPolicy:
    """The job's cap (``None``: no cap) and how long it has between SIGTERM and SIGKILL."""

    max_runtime: timedelta | None
    grace: timedelta


@dataclass(frozen=True)
class Step:
    """The next thing to do; for ``WAIT``, how long until the next decision (``None``: until the job exits)."""

    action: Action
    wait: timedelta | None = None


def next_step(
    policy: CapPolicy,
    *,
    elapsed: timedelta,
    terminating_for: timedelta | None,
    killed: bool,
    hung: bool = False,
) -> Step:
    """Escalate a job that outlives its cap or hangs: SIGTERM, then SIGKILL once the grace has passed.

    ``terminating_for`` is the time since the job was first sent SIGTERM, by the cap, the hang
    window or forwarded from the wrapper's own SIGTERM: either way the job has the grace to finish,
    then it is killed. ``hung``: its GPUs have been quiet for the whole hang window.
    """
    if killed:
        return Step(Action.WAIT)
    if terminating_for is not None:
        if terminating_for >= policy.grace:
            return Step(Action.KILL)
        return Step(Action.WAIT, policy.grace - terminating_for)
    if hung:
        return Step(Action.TERMINATE)
    if policy.max_runtime is None:
        return Step(Action.WAIT)
    if elapsed >= policy.max_runtime:
        return Step(Action.TERMINATE)
    return Step(Action.WAIT, policy.max_runtime - elapsed)


# As shells report them: a command that was not found, or found but could not be executed.
NOT_FOUND_STATUS = 127
NOT_EXECUTABLE_STATUS = 126


def exit_status(returncode: int) -> int:
    """A process's return code as a shell reports it: a job killed by signal N exits 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_name(returncode: int) -> str | None:
    """``SIGKILL`` for a job that a signal ended, ``None`` for one that exited."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def wrapper_exit_status(job_status: int, *, shutdown_failed: bool) -> int:
    """The job's status, except that a failed self-stop never reads as success.

    A job that succeeded on a host that could not shut itself down leaves a GPU running: exit 1,
    so whoever launched the wrapper (cloud-init, a scheduler) sees the failure.
    """
    if shutdown_failed and job_status == 0:
        return 1
    return job_status
