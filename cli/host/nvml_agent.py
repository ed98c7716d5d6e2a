"""The GPU side of ``parkbrake agent``: reading GPUs, exporting them, and the idle self-stop loop.

Every reading goes through one interface, :class:`GpuSampler`. :class:`NvmlSampler` reads the
real GPUs through NVML; :class:`ReplaySampler` plays back a recorded sequence (JSON Lines, the
format ``--record`` writes) and is its own clock, so tests and demos run the same loop in virtual
time. The decision to shut down is :func:`guardrails.idle.observe`'s.
"""

from __future__ import annotations

import bisect
import importlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, TextIO

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from cli.host.api_stop import ApiFallback, ApiStopResult
from cli.host.supervision import ShutdownCommand, ShutdownResult, host_left_running
from guardrails.clock import Clock
from guardrails.durations import format_duration
from guardrails.errors import ParkbrakeError
from guardrails.idle import (
    GpuSample,
    GpuState,
    IdlePolicy,
    IdleState,
    IdleVerdict,
    Observation,
    SampleFailure,
    observe,
)
from stacks.validation import Problems, Section


class SamplingError(Exception):
    """One sample could not be taken; the agent counts it and carries on."""


class ReplayFinished(Exception):
    """The recording has no more samples."""


class GpuSampler(Protocol):
    def sample(self) -> list[GpuSample]:
        """Every GPU now, by index; raises :class:`SamplingError` when the reading fails."""
        ...


class NvmlSampler:
    """Every GPU on the host through NVML (the ``pynvml`` module of nvidia-ml-py)."""

    def __init__(self, nvml: Any = None) -> None:
        """``nvml`` is the ``pynvml`` module, or a stand-in with its functions (tests)."""
        self._nvml = pynvml = nvml if nvml is not None else importlib.import_module("pynvml")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise ParkbrakeError(
                f"NVML is not available: {error}; the agent needs an NVIDIA driver "
                "(use --replay FILE to run it on a recorded sequence)"
            ) from None
        try:
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
            self._uuids = [_text(pynvml.nvmlDeviceGetUUID(handle)) for handle in self._handles]
        except pynvml.NVMLError as error:
            pynvml.nvmlShutdown()
            raise ParkbrakeError(f"NVML cannot list the GPUs: {error}") from None
        if not self._handles:
            pynvml.nvmlShutdown()
            raise ParkbrakeError("NVML sees no GPU on this host; there is nothing for the agent to watch")

    def sample(self) -> list[GpuSample]:
        try:
            return [self._read(index, handle) for index, handle in enumerate(self._handles)]
        except self._nvml.NVMLError as error:
            raise SamplingError(f"NVML: {error}") from None

    def _read(self, index: int, handle: Any) -> GpuSample:
        nvml = self._nvml
        rates = nvml.nvmlDeviceGetUtilizationRates(handle)
        return GpuSample(
            index=index,
            uuid=self._uuids[index],
            utilization_percent=float(rates.gpu),
            memory_used_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).used),
            memory_utilization_percent=float(rates.memory),
            counter_timestamp_us=self._counter_timestamp(handle),
            temperature_celsius=self._optional(
                lambda: float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
            ),
            power_watts=self._optional(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000),
            compute_pids=tuple(process.pid for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle)),
        )

    def _counter_timestamp(self, handle: Any) -> int | None:
        """When the driver last sampled the utilisation counter (microseconds); None where it keeps no samples."""
        nvml = self._nvml
        try:
            _kind, samples = nvml.nvmlDeviceGetSamples(handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_NotFound):
            return None
        return max((int(sample.timeStamp) for sample in samples), default=None)

    def _optional(self, read: Callable[[], float]) -> float | None:
        """Temperature and power are not reported by every GPU; their absence is not an error."""
        try:
            return read()
        except self._nvml.NVMLError_NotSupported:
            return None

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


# --- recordings (JSON Lines): {"t": seconds since the start, "gpus": [...]} or {"t": ..., "error": "..."}

GPU_KEYS = {
    "index",
    "uuid",
    "utilization_percent",
    "memory_used_bytes",
    "temperature_celsius",
    "power_watts",
    "compute_pids",
    "memory_utilization_percent",
    "counter_timestamp_us",
}


@dataclass(frozen=True)
class Recorded:
    t: float
    observation: Observation


def sample_as_json(gpu: GpuSample) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "utilization_percent": gpu.utilization_percent,
        "memory_used_bytes": gpu.memory_used_bytes,
        "temperature_celsius": gpu.temperature_celsius,
        "power_watts": gpu.power_watts,
        "compute_pids": list(gpu.compute_pids),
        **(
            {}
            if gpu.memory_utilization_percent is None
            else {"memory_utilization_percent": gpu.memory_utilization_percent}
        ),
        **({} if gpu.counter_timestamp_us is None else {"counter_timestamp_us": gpu.counter_timestamp_us}),
    }


def recorded_as_json(record: Recorded) -> str:
    body: dict[str, Any] = {"t": record.t}
    if isinstance(record.observation, SampleFailure):
        body["error"] = record.observation.reason
    else:
        body["gpus"] = [sample_as_json(gpu) for gpu in record.observation]
    return json.dumps(body)


def _gpu_from_json(raw: object, path: str, problems: Problems) -> GpuSample:
    gpu = Section(raw, path, problems, GPU_KEYS)

    def optional_number(key: str) -> float | None:
        return gpu.number(key, minimum=-273.0) if gpu.has(key) else None

    pids: tuple[int, ...] = ()
    if gpu.has("compute_pids"):
        value = gpu.raw["compute_pids"]
        if isinstance(value, list) and all(type(pid) is int and pid > 0 for pid in value):
            pids = tuple(value)
        else:
            problems.add(gpu.at("compute_pids"), "is not a list of process ids")
    return GpuSample(
        index=gpu.integer("index"),
        uuid=gpu.string("uuid", hint="a GPU UUID"),
        utilization_percent=gpu.number("utilization_percent", maximum=100.0),
        memory_used_bytes=gpu.integer("memory_used_bytes"),
        temperature_celsius=optional_number("temperature_celsius"),
        power_watts=optional_number("power_watts"),
        compute_pids=pids,
        memory_utilization_percent=gpu.number("memory_utilization_percent", maximum=100.0)
        if gpu.has("memory_utilization_percent")
        else None,
        counter_timestamp_us=gpu.integer("counter_timestamp_us") if gpu.has("counter_timestamp_us") else None,
    )


def _recorded_from_json(raw: object, path: str, problems: Problems) -> Recorded:
    line = Section(raw, path, problems, {"t", "gpus", "error"})
    t = line.number("t")
    if line.has("error") == line.has("gpus"):
        problems.add(path, 'needs exactly one of "gpus" (a sample) or "error" (a failed sample)')
        return Recorded(t, [])
    if line.has("error"):
        return Recorded(t, SampleFailure(line.string("error", hint="a message")))
    raw_gpus = line.raw["gpus"]
    if not isinstance(raw_gpus, list):
        problems.add(line.at("gpus"), "is not a list of GPU samples")
        return Recorded(t, [])
    gpus = [_gpu_from_json(gpu, f"{line.at('gpus')}[{n}]", problems) for n, gpu in enumerate(raw_gpus)]
    indexes = [gpu.index for gpu in gpus]
    if len(set(indexes)) != len(indexes):
        problems.add(line.at("gpus"), f"lists a GPU index twice: {indexes}")
    return Recorded(t, gpus)


def load_recording(path: Path) -> list[Recorded]:
    """Every record of a recording, or one error listing every problem by line and key."""
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise ParkbrakeError(f"cannot read the recording {path}: {error.strerror or error}") from None
    problems = Problems()
    records: list[Recorded] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"line {number}"
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as error:
            problems.add(where, f"is not JSON: {error.msg}")
            continue
        record = _recorded_from_json(raw, where, problems)
        if records and record.t < records[-1].t:
            problems.add(f"{where}.t", f"goes back in time ({record.t:g} after {records[-1].t:g})")
        records.append(record)
    if not records and not problems.items:
        problems.add("file", "holds no samples")
    problems.raise_if_any(str(path))
    return records


class ReplaySampler:
    """A recording played back; each record's ``t`` is also the time, so it is the agent's clock too."""

    def __init__(self, records: list[Recorded], start: datetime) -> None:
        self._pending: Iterator[Recorded] = iter(records)
        self._start = start
        self._t = records[0].t if records else 0.0

    def sample(self) -> list[GpuSample]:
        record = next(self._pending, None)
        if record is None:
            raise ReplayFinished
        self._t = record.t
        if isinstance(record.observation, SampleFailure):
            raise SamplingError(record.observation.reason)
        return list(record.observation)

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._t)

    def sleep(self, seconds: float) -> None:
        """Time passes without waiting; the next sample sets it to the recording's own time."""
        self._t += seconds


class TimedReplay:
    """A recording read at a clock's time: each sample is the record in force at that instant.

    ``parkbrake run --replay`` and the fleet-day benchmark use it, where the clock moves on its own
    (the job's waits) rather than with the samples.
    """

    def __init__(self, records: list[Recorded], clock: Clock, start: datetime) -> None:
        self._records = records
        self._times = [record.t for record in records]
        self._clock = clock
        self._start = start

    def sample(self) -> list[GpuSample]:
        t = (self._clock.now() - self._start).total_seconds()
        if not self._records or t > self._times[-1]:
            raise ReplayFinished
        record = self._records[max(bisect.bisect_right(self._times, t) - 1, 0)]
        if isinstance(record.observation, SampleFailure):
            raise SamplingError(record.observation.reason)
        return list(record.observation)


def observation_from(sampler: GpuSampler) -> Observation | None:
    """One sample as the idle logic takes it; None once a replay has no more samples."""
    try:
        return sampler.sample()
    except SamplingError as error:
        return SampleFailure(str(error))
    except ReplayFinished:
        return None


# --- metrics


class GpuMetrics:
    """The agent's Prometheus metrics, in a registry of their own (one per agent, and per test)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["gpu", "uuid"]
        self.utilization = Gauge(
            "parkbrake_gpu_utilization_ratio", "GPU utilisation, 0 to 1.", labels, registry=self.registry
        )
        self.memory_used = Gauge(
            "parkbrake_gpu_memory_used_bytes", "GPU memory in use.", labels, registry=self.registry
        )
        self.temperature = Gauge(
            "parkbrake_gpu_temperature_celsius", "GPU core temperature.", labels, registry=self.registry
        )
        self.power = Gauge("parkbrake_gpu_power_watts", "GPU power draw.", labels, registry=self.registry)
        self.compute_processes = Gauge(
            "parkbrake_gpu_compute_processes", "Compute processes on the GPU.", labels, registry=self.registry
        )
        self.hung = Gauge(
            "parkbrake_gpu_hung",
            "1 when a process holds the GPU at or under the threshold for the whole hang window "
            "(the GPU counts as idle).",
            labels,
            registry=self.registry,
        )
        self.idle_seconds = Gauge(
            "parkbrake_agent_idle_seconds",
            "How long every GPU has been idle (0 while any is busy).",
            registry=self.registry,
        )
        self.reading_state = Gauge(
            "parkbrake_gpu_reading_state",
            "1 for the state the GPU's reading was judged in (active, held, hung, empty, unknown), 0 for the others.",
            [*labels, "state"],
            registry=self.registry,
        )
        self.unknown_seconds = Gauge(
            "parkbrake_agent_reading_unknown_seconds",
            "How long the reading has been unknown (a failed, stale or implausible sample; 0 while it is not). "
            "Unknown is never idle.",
            registry=self.registry,
        )
        self.sample_errors = Counter(
            "parkbrake_agent_sample_errors", "Samples that could not be taken.", registry=self.registry
        )
        self._per_gpu = [
            self.utilization,
            self.memory_used,
            self.temperature,
            self.power,
            self.compute_processes,
            self.hung,
        ]
        self._exported: set[tuple[str, str]] = set()

    def update(self, observation: Observation, verdict: IdleVerdict) -> None:
        """Export one observation; a GPU that is gone, or a failed sample, stops exporting its last values."""
        self.idle_seconds.set(verdict.idle_for.total_seconds())
        self.unknown_seconds.set(verdict.unknown_for.total_seconds())
        if isinstance(observation, SampleFailure):
            self.sample_errors.inc()
            observation = []
        exported: dict[tuple[str, str], dict[Gauge, float | None]] = {}
        hung_uuids = {gpu.uuid for gpu in verdict.hung}
        states = {judged.gpu.uuid: judged.state for judged in verdict.gpus}
        for gpu in observation:
            labels = (str(gpu.index), gpu.uuid)
            exported[labels] = {
                self.utilization: gpu.utilization_percent / 100,
                self.memory_used: gpu.memory_used_bytes,
                self.compute_processes: len(gpu.compute_pids),
                self.temperature: gpu.temperature_celsius,
                self.power: gpu.power_watts,
                self.hung: 1.0 if gpu.uuid in hung_uuids else 0.0,
            }
        for labels in self._exported - exported.keys():
            for gauge in self._per_gpu:
                _remove(gauge, labels)
            for state in GpuState:
                _remove(self.reading_state, (*labels, state.value))
        for gpu in observation:
            for state in GpuState:
                self.reading_state.labels(str(gpu.index), gpu.uuid, state.value).set(
                    1.0 if states.get(gpu.uuid) is state else 0.0
                )
        for labels, values in exported.items():
            for gauge, value in values.items():
                if value is None:
                    _remove(gauge, labels)
                else:
                    gauge.labels(*labels).set(value)
        self._exported = set(exported)


def _remove(gauge: Gauge, labels: tuple[str, ...]) -> None:
    with suppress(KeyError):  # never exported under these labels
        gauge.remove(*labels)


@contextmanager
def serve_metrics(metrics: GpuMetrics, address: str, port: int) -> Iterator[int]:
    """``/metrics`` over HTTP for as long as the block runs; yields the port (useful with port 0)."""
    try:
        server, thread = start_http_server(port, addr=address, registry=metrics.registry)
    except OSError as error:
        raise ParkbrakeError(
            f"cannot serve metrics on {address}:{port}: {error.strerror or error}; choose another --port"
        ) from None
    try:
        yield int(server.server_port)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# --- the loop


@dataclass(frozen=True)
class AgentEvent:
    kind: str  # idle, busy, hung, unknown, unknown-too-long, shutdown, api-stop, replay-ended
    at: datetime
    elapsed: timedelta  # since the first sample
    message: str
    detail: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "event": self.kind,
            "at": self.at.isoformat(),
            "elapsed_seconds": self.elapsed.total_seconds(),
            "message": self.message,
            **self.detail,
        }


@dataclass(frozen=True)
class AgentResult:
    shutdown: ShutdownResult | None  # None: a replay ended before the window completed
    api_stop: ApiStopResult | None = None  # None: the host went down, or no fallback was asked for

    @property
    def exit_status(self) -> int:
        return 1 if host_left_running(self.shutdown, self.api_stop) else 0


def _state_of(verdict: IdleVerdict) -> str:
    if verdict.unknown:
        return "unknown"
    if verdict.hung and verdict.idle:
        return "hung"
    return "idle" if verdict.idle else "busy"


def _state_message(state: str, verdict: IdleVerdict, policy: IdlePolicy) -> str:
    if state == "hung":
        return _hung_message(verdict, policy)
    if state == "unknown":
        return "reading unknown, never counted as idle: " + "; ".join(verdict.unknown)
    if state == "busy":
        return "; ".join(verdict.busy)
    if verdict.empty and policy.idle_after_empty is not None:
        return (
            "every GPU idle with no compute process; the host shuts down if this lasts "
            f"{format_duration(policy.idle_after_empty)}"
        )
    return f"every GPU idle; the host shuts down if this lasts {format_duration(policy.idle_after)}"


def _hung_message(verdict: IdleVerdict, policy: IdlePolicy) -> str:
    held = "; ".join(
        f"GPU {gpu.index} held by process {', '.join(str(pid) for pid in gpu.compute_pids)}"
        for gpu in verdict.hung
    )
    return (
        f"every GPU idle ({held}, but at or under {policy.threshold_percent:g}% for the hang window of "
        f"{format_duration(policy.hang_after or timedelta(0))}: counted as idle); the host shuts down if "
        f"this lasts {format_duration(policy.idle_after)}"
    )


# What the agent says of a reading that stays unknown.
NEVER_IDLE = "the host is never shut down as idle on it; check the driver (nvidia-smi) and the agent's log"


def _detail(verdict: IdleVerdict) -> dict[str, object]:
    """What an event says of the sample: why the host is not idle, and each GPU's state."""
    return {
        "reasons": list(verdict.unknown or verdict.busy),
        "gpus": [{"gpu": judged.gpu.index, "state": judged.state.value} for judged in verdict.gpus],
    }


def _record(recording: TextIO, observation: Observation, *, offset: timedelta) -> None:
    """One line of ``--record``: the observation, ``offset`` after the first sample."""
    recording.write(recorded_as_json(Recorded(round(offset.total_seconds(), 3), observation)))
    recording.write("\n")
    recording.flush()


def _shut_down(
    verdict: IdleVerdict,
    shutdown_command: ShutdownCommand,
    fallback: ApiFallback | None,
    clock: Clock,
    emit: Callable[[AgentEvent], None],
    *,
    first_at: datetime,
    now: datetime,
) -> AgentResult:
    """Run the shutdown command, say so, and stop through the EC2 API if the host is still up after."""
    elapsed = now - first_at
    idle_since = verdict.state.idle_since or now
    result = shutdown_command.run(
        {
            "PARKBRAKE_SHUTDOWN_REASON": "idle",
            "PARKBRAKE_IDLE_SINCE": idle_since.isoformat(),
            "PARKBRAKE_IDLE_SECONDS": f"{verdict.idle_for.total_seconds():g}",
        }
    )
    message = (
        f"every GPU idle for {verdict.idle_for.total_seconds():g}s: ran `{' '.join(result.command)}`"
        if result.ok
        else f"the host could not shut itself down: {result.error}"
    )
    if result.release is not None:
        message += f"; {result.release.describe()}"
    detail = {"idle_since": idle_since.isoformat(), "shutdown": result.as_json()}
    emit(AgentEvent("shutdown", now, elapsed, message, detail))
    # Announced before waiting: while the shutdown works, this process does not live to say more.
    api_stop = (fallback or ApiFallback(after=None)).after_shutdown(result.ok, clock)
    if api_stop is not None:
        at = clock.now()
        emit(AgentEvent("api-stop", at, at - first_at, api_stop.describe(), api_stop.as_json()))
    return AgentResult(result, api_stop)


def run_agent(
    sampler: GpuSampler,
    clock: Clock,
    policy: IdlePolicy,
    *,
    interval: timedelta,
    metrics: GpuMetrics,
    shutdown_command: ShutdownCommand,
    emit: Callable[[AgentEvent], None],
    recording: TextIO | None = None,
    fallback: ApiFallback | None = None,
) -> AgentResult:
    """Sample, export and judge every ``interval`` until the host has been idle for the whole window.

    Emits an event when the host changes between busy, idle, hung and failing to sample, not every
    sample. Returns once the shutdown command has run and, if the host is still up, the EC2 API was
    asked to stop it (``fallback``), or once a replay has ended.
    """
    state = IdleState()
    first_at: datetime | None = None
    previous_state = ""
    unknown_reported = False
    while True:
        observation: Observation
        try:
            observation = sampler.sample()
        except SamplingError as error:
            observation = SampleFailure(str(error))
        except ReplayFinished:
            now = clock.now()
            emit(
                AgentEvent("replay-ended", now, now - (first_at or now), "the recording has no more samples")
            )
            return AgentResult(None)
        now = clock.now()
        first_at = first_at or now
        if recording is not None:
            _record(recording, observation, offset=now - first_at)
        verdict = observe(policy, state, observation, now)
        state = verdict.state
        metrics.update(observation, verdict)
        elapsed = now - first_at
        current_state = _state_of(verdict)
        detail = _detail(verdict)
        if current_state != previous_state:
            message = _state_message(current_state, verdict, policy)
            emit(AgentEvent(current_state, now, elapsed, message, detail))
            previous_state = current_state
            unknown_reported = False
        if verdict.unknown_overdue and not unknown_reported:
            # Once per unknown spell: the host is kept running on a reading nobody can trust.
            message = (
                f"the GPU reading has been unknown for {format_duration(verdict.unknown_for)}: {NEVER_IDLE}"
            )
            emit(AgentEvent("unknown-too-long", now, elapsed, message, detail))
            unknown_reported = True
        if verdict.shut_down:
            return _shut_down(verdict, shutdown_command, fallback, clock, emit, first_at=first_at, now=now)
        clock.sleep(interval.total_seconds())
