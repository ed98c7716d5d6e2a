"""When a GPU host has been idle long enough to shut itself down: the agent's decision, clock passed in.

Each GPU in a sample is judged into one :class:`GpuState` (the decision table, in order):

- ``unknown``: the reading cannot be believed. Implausible: a GPU lists compute processes yet reads
  0 % utilisation and 0 bytes of memory in use (a context always holds memory: the counters are
  broken, as a profiling metric that reads 0 for weeks). Stale: NVML's utilisation counter carries a
  timestamp that did not advance since the previous sample.
- ``active``: utilisation, or memory-copy utilisation, over the threshold, or memory in use changed
  since the previous sample while a compute process holds the GPU (a job at work off the SMs).
- ``held``: quiet, with a compute process (a CUDA context): a paused notebook, a job between phases.
- ``hung``: held, and quiet for the whole hang window (``hang_after``): a stuck job or a forgotten
  notebook; it counts as idle from then, and its idle window starts at that sample.
- ``empty``: quiet and no compute process at all: idle beyond doubt.

The host is unknown when a sample failed, reported no GPU, or any GPU is unknown; busy when any GPU
is active or held; idle when every GPU is hung or empty. Unknown is never idle: it closes the window
like a busy sample, and ``unknown_for`` says how long it has lasted so the agent can report a reading
that stays unknown (``report_unknown_after``) instead of a host that never goes idle in silence.

The window is judged on samples only: it opens at the first idle sample and the host shuts down at
the first later sample, still idle, that is ``idle_after`` past it; or, while every GPU is empty,
``idle_after_empty`` past the first all-empty sample. A silence longer than ``max_gap`` (or time
going backwards) restarts the windows: the agent never shuts a host down on what it did not see.
``quiet_for`` (every GPU quiet, whatever holds it) is what ``parkbrake run --hang-after`` judges a
job by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

# Memory in use moving by more than this between two samples is activity (allocator blocks are 2 MiB).
MEMORY_ACTIVITY_BYTES = 2**20
# A GPU at or under this utilisation (percent) is quiet: the agent's --threshold and run's, one default.
QUIET_PERCENT = 5.0


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant, as NVML reports it (the optional readings are absent where unsupported)."""

    index: int
    uuid: str
    utilization_percent: float
    memory_used_bytes: int
    temperature_celsius: float | None = None
    power_watts: float | None = None
    compute_pids: tuple[int, ...] = ()
    memory_utilization_percent: float | None = None  # memory-copy (device memory read/write) activity
    counter_timestamp_us: int | None = None  # when NVML last sampled the utilisation counter


@dataclass(frozen=True)
class SampleFailure:
    """A sample that could not be taken (NVML error, GPU lost): no evidence either way."""

    reason: str


Observation = Sequence[GpuSample] | SampleFailure


class GpuState(StrEnum):
    UNKNOWN = "unknown"
    ACTIVE = "active"
    HELD = "held"
    HUNG = "hung"
    EMPTY = "empty"


IDLE_STATES = frozenset({GpuState.HUNG, GpuState.EMPTY})


@dataclass(frozen=True)
class GpuJudgement:
    gpu: GpuSample
    state: GpuState
    reason: str  # why, in words, for the log


def _pids(gpu: GpuSample) -> str:
    return ", ".join(str(pid) for pid in gpu.compute_pids)


@dataclass(frozen=True)
class IdlePolicy:
    idle_after: timedelta
    threshold_percent: float
    # A longer silence between two samples restarts the window: what happened in between is unknown.
    max_gap: timedelta | None = None
    # A GPU holding a context but quiet this long is hung, and counts as idle.
    hang_after: timedelta | None = None
    # Every GPU empty (no compute process) and quiet this long: shut down without the full window.
    idle_after_empty: timedelta | None = None
    # A reading unknown this long is reported (it never counts as idle, whatever its length).
    report_unknown_after: timedelta | None = None

    def unsettled(self, gpu: GpuSample, previous: GpuSample | None) -> GpuJudgement | None:
        """The judgement of a GPU that is unknown or active; None when it is quiet."""
        if gpu.compute_pids and gpu.utilization_percent == 0 and gpu.memory_used_bytes == 0:
            return GpuJudgement(
                gpu,
                GpuState.UNKNOWN,
                f"GPU {gpu.index} reads 0% and 0 bytes in use while process {_pids(gpu)} holds it: "
                "implausible counters",
            )
        if (
            previous is not None
            and gpu.counter_timestamp_us is not None
            and previous.counter_timestamp_us is not None
            and gpu.counter_timestamp_us <= previous.counter_timestamp_us
        ):
            return GpuJudgement(
                gpu, GpuState.UNKNOWN, f"GPU {gpu.index}'s utilisation counter did not advance: stale reading"
            )
        if gpu.utilization_percent > self.threshold_percent:
            return GpuJudgement(
                gpu,
                GpuState.ACTIVE,
                f"GPU {gpu.index} at {gpu.utilization_percent:g}% utilisation (over {self.threshold_percent:g}%)",
            )
        copies = gpu.memory_utilization_percent
        if copies is not None and copies > self.threshold_percent:
            return GpuJudgement(
                gpu,
                GpuState.ACTIVE,
                f"GPU {gpu.index} copying memory at {copies:g}% (over {self.threshold_percent:g}%)",
            )
        # Only a process moves memory; without one, a change is the driver tearing a context down.
        if (
            previous is not None
            and gpu.compute_pids
            and abs(gpu.memory_used_bytes - previous.memory_used_bytes) > MEMORY_ACTIVITY_BYTES
        ):
            moved = (gpu.memory_used_bytes - previous.memory_used_bytes) / 2**20
            return GpuJudgement(
                gpu, GpuState.ACTIVE, f"GPU {gpu.index} memory in use changed by {moved:+.0f} MiB"
            )
        return None

    def judge(self, gpu: GpuSample, previous: GpuSample | None, quiet_for: timedelta | None) -> GpuJudgement:
        """One GPU's state; ``quiet_for`` is how long it has been quiet (None: it is not)."""
        unsettled = self.unsettled(gpu, previous)
        if unsettled is not None:
            return unsettled
        if not gpu.compute_pids:
            return GpuJudgement(gpu, GpuState.EMPTY, f"GPU {gpu.index} has no compute process")
        if self.hang_after is not None and quiet_for is not None and quiet_for >= self.hang_after:
            return GpuJudgement(gpu, GpuState.HUNG, f"GPU {gpu.index} held by process {_pids(gpu)} but quiet")
        return GpuJudgement(gpu, GpuState.HELD, f"GPU {gpu.index} has compute process {_pids(gpu)}")


@dataclass(frozen=True)
class IdleState:
    idle_since: datetime | None = None
    last_observed_at: datetime | None = None
    # Since when each GPU (by UUID) has been quiet, whatever its processes.
    quiet_since: Mapping[str, datetime] = field(default_factory=dict)
    empty_since: datetime | None = None  # every GPU empty since then
    unknown_since: datetime | None = None  # the reading unknown since then
    previous: Mapping[str, GpuSample] = field(default_factory=dict)  # the last sample of each GPU


@dataclass(frozen=True)
class IdleVerdict:
    state: IdleState
    busy: tuple[str, ...]  # why the host is busy
    idle_for: timedelta
    shut_down: bool
    hung: tuple[GpuSample, ...] = ()  # GPUs counted idle only because their context has been quiet so long
    quiet_for: timedelta = timedelta(0)  # how long every GPU has been quiet
    unknown: tuple[str, ...] = ()  # why the reading cannot be believed
    gpus: tuple[GpuJudgement, ...] = ()
    empty_for: timedelta = timedelta(0)  # how long every GPU has been empty (0 unless all are)
    unknown_for: timedelta = timedelta(0)
    unknown_overdue: bool = False  # unknown for longer than report_unknown_after

    @property
    def idle(self) -> bool:
        return not self.busy and not self.unknown

    @property
    def empty(self) -> bool:
        return self.idle and all(judged.state is GpuState.EMPTY for judged in self.gpus)


def _since(previous: datetime | None, holds: bool, now: datetime) -> datetime | None:
    if not holds:
        return None
    return previous if previous is not None else now


def observe(policy: IdlePolicy, state: IdleState, observation: Observation, now: datetime) -> IdleVerdict:
    """Fold one observation taken at ``now`` into the idle window; ``shut_down`` once it is complete."""
    last = state.last_observed_at
    unseen_gap = last is not None and (
        now < last or (policy.max_gap is not None and now - last > policy.max_gap)
    )
    carried = IdleState() if unseen_gap else state
    gpus = [] if isinstance(observation, SampleFailure) else list(observation)
    unknown: list[str] = []
    if isinstance(observation, SampleFailure):
        unknown.append(f"sampling failed: {observation.reason}")
    elif not gpus:
        unknown.append("no GPU reported")
    quiet_since: dict[str, datetime] = {}
    judged = []
    for gpu in gpus:
        previous = carried.previous.get(gpu.uuid)
        if policy.unsettled(gpu, previous) is None:
            quiet_since[gpu.uuid] = carried.quiet_since.get(gpu.uuid, now)
        since = quiet_since.get(gpu.uuid)
        judged.append(policy.judge(gpu, previous, None if since is None else now - since))
    unknown += [j.reason for j in judged if j.state is GpuState.UNKNOWN]
    busy = tuple(j.reason for j in judged if j.state in (GpuState.ACTIVE, GpuState.HELD))
    idle = not busy and not unknown
    empty = idle and all(j.state is GpuState.EMPTY for j in judged)
    idle_since = _since(carried.idle_since, idle, now)
    empty_since = _since(carried.empty_since, empty, now)
    unknown_since = _since(state.unknown_since, bool(unknown), now)  # a silence does not make it known
    idle_for = now - idle_since if idle_since is not None else timedelta(0)
    empty_for = now - empty_since if empty_since is not None else timedelta(0)
    unknown_for = now - unknown_since if unknown_since is not None else timedelta(0)
    all_quiet = bool(gpus) and len(quiet_since) == len(gpus)
    return IdleVerdict(
        state=IdleState(
            idle_since=idle_since,
            last_observed_at=now,
            quiet_since=quiet_since,
            empty_since=empty_since,
            unknown_since=unknown_since,
            previous={gpu.uuid: gpu for gpu in gpus},
        ),
        busy=busy,
        idle_for=idle_for,
        shut_down=(idle_since is not None and idle_for >= policy.idle_after)
        or (
            empty_since is not None
            and policy.idle_after_empty is not None
            and empty_for >= policy.idle_after_empty
        ),
        hung=tuple(j.gpu for j in judged if j.state is GpuState.HUNG),
        quiet_for=min(now - since for since in quiet_since.values()) if all_quiet else timedelta(0),
        unknown=tuple(unknown),
        gpus=tuple(judged),
        empty_for=empty_for,
        unknown_for=unknown_for,
        unknown_overdue=policy.report_unknown_after is not None
        and unknown_since is not None
        and unknown_for >= policy.report_unknown_after,
    )
