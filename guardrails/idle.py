"""When a GPU host has been idle long enough to shut itself down: the agent's decision, clock passed in.

A host is idle when every GPU is at or under the utilisation threshold and runs no compute process.
The window is judged on samples only: it opens at the first idle sample and the host shuts down at
the first later sample, still idle, that is ``idle_after`` past it. Anything that is not evidence of
idleness (a busy GPU, a failed sample, no GPU at all, a silence longer than ``max_gap``) closes or
restarts the window: the agent never shuts a host down on what it did not see.

A compute process keeps an idle GPU busy, except a process that has held it at or under the
threshold for the whole hang window (``hang_after``): that is a stuck job or a forgotten notebook,
and the GPU counts as idle from then on; its idle window starts at that sample. ``quiet_for`` (every
GPU at or under the threshold, whatever holds it) is what ``parkbrake run --hang-after`` judges a
job by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
    # A GPU holding a context but at or under the threshold this long is hung, and counts as idle.
    hang_after: timedelta | None = None

    def busy_reasons(
        self, observation: Observation, quiet_for: Mapping[str, timedelta] | None = None
    ) -> tuple[str, ...]:
        """Why the host is not idle now; empty when every GPU is idle.

        ``quiet_for`` is how long each GPU (by UUID) has been at or under the threshold; a GPU whose
        compute process has been quiet for the whole hang window is not a reason.
        """
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
            elif gpu.compute_pids and not self.is_hung(gpu, quiet_for or {}):
                pids = ", ".join(str(pid) for pid in gpu.compute_pids)
                reasons.append(f"GPU {gpu.index} has compute process {pids}")
        return tuple(reasons)

    def is_hung(self, gpu: GpuSample, quiet_for: Mapping[str, timedelta]) -> bool:
        """A context held at or under the threshold for the whole hang window: a stuck job, not work."""
        quiet = quiet_for.get(gpu.uuid)
        return bool(gpu.compute_pids) and (
            self.hang_after is not None and quiet is not None and quiet >= self.hang_after
        )


@dataclass(frozen=True)
class IdleState:
    idle_since: datetime | None = None
    last_observed_at: datetime | None = None
    # Since when each GPU (by UUID) has been at or under the threshold, whatever its processes.
    quiet_since: Mapping[str, datetime] = field(default_factory=dict)


@dataclass(frozen=True)
class IdleVerdict:
    state: IdleState
    busy: tuple[str, ...]
    idle_for: timedelta
    shut_down: bool
    hung: tuple[GpuSample, ...] = ()  # GPUs counted idle only because their context has been quiet so long
    quiet_for: timedelta = timedelta(0)  # how long every GPU has been at or under the threshold

    @property
    def idle(self) -> bool:
        return not self.busy


def _quiet_since(
    policy: IdlePolicy, previous: Mapping[str, datetime], observation: Observation, now: datetime
) -> dict[str, datetime]:
    """Each quiet GPU's quiet spell: carried on from ``previous``, or starting now."""
    if isinstance(observation, SampleFailure):
        return {}
    return {
        gpu.uuid: previous.get(gpu.uuid, now)
        for gpu in observation
        if gpu.utilization_percent <= policy.threshold_percent
    }


def observe(policy: IdlePolicy, state: IdleState, observation: Observation, now: datetime) -> IdleVerdict:
    """Fold one observation taken at ``now`` into the idle window; ``shut_down`` once it is complete."""
    last = state.last_observed_at
    unseen_gap = last is not None and (
        now < last or (policy.max_gap is not None and now - last > policy.max_gap)
    )
    quiet_since = _quiet_since(policy, {} if unseen_gap else state.quiet_since, observation, now)
    quiet_for = {uuid: now - since for uuid, since in quiet_since.items()}
    busy = policy.busy_reasons(observation, quiet_for)
    idle_since: datetime | None
    if busy:
        idle_since = None
    elif state.idle_since is None or unseen_gap:
        idle_since = now
    else:
        idle_since = state.idle_since
    idle_for = now - idle_since if idle_since is not None else timedelta(0)
    gpus = [] if isinstance(observation, SampleFailure) else list(observation)
    all_quiet = bool(gpus) and len(quiet_since) == len(gpus)
    return IdleVerdict(
        state=IdleState(idle_since=idle_since, last_observed_at=now, quiet_since=quiet_since),
        busy=busy,
        idle_for=idle_for,
        shut_down=idle_since is not None and idle_for >= policy.idle_after,
        hung=tuple(gpu for gpu in gpus if policy.is_hung(gpu, quiet_for)),
        quiet_for=min(quiet_for.values()) if all_quiet else timedelta(0),
    )
