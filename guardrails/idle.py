"""When a GPU host has been idle long enough to shut itself down: the agent's decision, clock passed in.

A host is idle when every GPU is at or under the utilisation threshold and runs no compute process.
The window is judged on samples only: it opens at the first idle sample and the host shuts down at
the first later sample, still idle, that is ``idle_after`` past it. Anything that is not evidence of
idleness (a busy GPU, a failed sample, no GPU at all, a silence longer than ``max_gap``) closes or
restarts the window: the agent never shuts a host down on what it did not see.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant, as NVML reports it (temperature and power are absent where unsupported)."""

    index: int
    uuid: str
    utilization_percent: float
    memory_used_bytes: int
    temperature_celsius: float | None = None
    power_watts: float | None = None
    compute_pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class SampleFailure:
    """A sample that could not be taken (NVML error, GPU lost): no evidence either way."""

    reason: str


Observation = Sequence[GpuSample] | SampleFailure


@dataclass(frozen=True)
class IdlePolicy:
    idle_after: timedelta
    threshold_percent: float
    # A longer silence between two samples restarts the window: what happened in between is unknown.
    max_gap: timedelta | None = None

    def busy_reasons(self, observation: Observation) -> tuple[str, ...]:
        """Why the host is not idle now; empty when every GPU is idle."""
        if isinstance(observation, SampleFailure):
            return (f"sampling failed: {observation.reason}",)
        if not observation:
            return ("no GPU reported",)
        reasons = []
        for gpu in observation:
            if gpu.utilization_percent > self.threshold_percent:
                reasons.append(
                    f"GPU {gpu.index} at {gpu.utilization_percent:g}% utilisation "
                    f"(over {self.threshold_percent:g}%)"
                )
            if gpu.compute_pids:
                pids = ", ".join(str(pid) for pid in gpu.compute_pids)
                reasons.append(f"GPU {gpu.index} has compute process {pids}")
        return tuple(reasons)


@dataclass(frozen=True)
class IdleState:
    idle_since: datetime | None = None
    last_observed_at: datetime | None = None


@dataclass(frozen=True)
class IdleVerdict:
    state: IdleState
    busy: tuple[str, ...]
    idle_for: timedelta
    shut_down: bool

    @property
    def idle(self) -> bool:
        return not self.busy


def observe(policy: IdlePolicy, state: IdleState, observation: Observation, now: datetime) -> IdleVerdict:
    """Fold one observation taken at ``now`` into the idle window; ``shut_down`` once it is complete."""
    busy = policy.busy_reasons(observation)
    last = state.last_observed_at
    unseen_gap = last is not None and (
        now < last or (policy.max_gap is not None and now - last > policy.max_gap)
    )
    idle_since: datetime | None
    if busy:
        idle_since = None
    elif state.idle_since is None or unseen_gap:
        idle_since = now
    else:
        idle_since = state.idle_since
    idle_for = now - idle_since if idle_since is not None else timedelta(0)
    return IdleVerdict(
        state=IdleState(idle_since=idle_since, last_observed_at=now),
        busy=busy,
        idle_for=idle_for,
        shut_down=idle_since is not None and idle_for >= policy.idle_after,
    )
