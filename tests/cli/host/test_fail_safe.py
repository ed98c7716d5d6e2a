"""The fail-safe idle decision, on recordings that show each case (the table in docs/host-guardrails.md).

Each recording samples two H200s every 10 s and is replayed through the real agent loop with the
command's defaults: 15-minute idle window, 10-minute hang window, 2-minute window for GPUs with no
process, an unknown reading reported after 10 minutes. A failed, stale or implausible reading is
unknown: it never shuts the host down, however long it lasts, and it is reported.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.host.nvml_agent import AgentEvent, GpuMetrics, ReplaySampler, load_recording, run_agent
from cli.host.supervision import ShutdownCommand
from guardrails.idle import GpuSample, GpuState, IdlePolicy, IdleState, Observation, SampleFailure, observe
from tests.cli.host.conftest import RECORDINGS, ShutdownRecorder
from tests.cli.host.test_agent import agent_command

START = datetime(2025, 3, 1, 2, 0, tzinfo=UTC)
S = timedelta(seconds=1)
M = 60 * S
AGENT_DEFAULTS = IdlePolicy(
    idle_after=15 * M,
    threshold_percent=5,
    max_gap=30 * S,
    hang_after=10 * M,
    idle_after_empty=2 * M,
    report_unknown_after=10 * M,
)
UUIDS = ("GPU-5f0c1e2a-8d4b-4b7e-9a31-2c6d0e7f4a10", "GPU-a93b7c44-1e02-4f6d-b8a5-71c9d2e3f6b8")


def replay(name: str, recorder: ShutdownRecorder) -> tuple[list[AgentEvent], GpuMetrics]:
    events: list[AgentEvent] = []
    metrics = GpuMetrics()
    sampler = ReplaySampler(load_recording(RECORDINGS / f"{name}.jsonl"), START)
    run_agent(
        sampler,
        sampler,
        AGENT_DEFAULTS,
        interval=10 * S,
        metrics=metrics,
        shutdown_command=ShutdownCommand.parse(recorder.command()),
        emit=events.append,
    )
    return events, metrics


@pytest.mark.parametrize(
    ("recording", "timeline"),
    [
        ("busy", [("busy", 0), ("replay-ended", 1810)]),
        ("copying", [("busy", 0), ("replay-ended", 1510)]),
        ("idle", [("busy", 0), ("idle", 300), ("shutdown", 420)]),
        ("flapping", [("idle", 0), ("shutdown", 120)]),
        ("lingering", [("busy", 0), ("idle", 600), ("shutdown", 720)]),
        ("hung", [("busy", 0), ("hung", 910), ("shutdown", 1810)]),
        ("stale", [("busy", 0), ("unknown", 300), ("unknown-too-long", 900), ("replay-ended", 1510)]),
        ("erroring", [("busy", 0), ("unknown", 300), ("unknown-too-long", 900), ("replay-ended", 1510)]),
        ("implausible", [("busy", 0), ("unknown", 300), ("unknown-too-long", 900), ("replay-ended", 1510)]),
    ],
)
def test_each_recording_gets_its_documented_decision(
    recorder: ShutdownRecorder, recording: str, timeline: list[tuple[str, int]]
) -> None:
    events, _ = replay(recording, recorder)
    assert [(event.kind, event.elapsed.total_seconds()) for event in events] == timeline
    assert len(recorder.calls()) == (1 if timeline[-1][0] == "shutdown" else 0)


@pytest.mark.parametrize(
    ("recording", "reason"),
    [
        ("stale", "GPU 0's utilisation counter did not advance: stale reading"),
        ("erroring", "sampling failed: NVML: Unknown Error"),
        (
            "implausible",
            "GPU 0 reads 0% and 0 bytes in use while process 4242 holds it: implausible counters",
        ),
    ],
)
def test_an_unknown_reading_names_its_reason_and_is_reported_once_overdue(
    recorder: ShutdownRecorder, recording: str, reason: str
) -> None:
    events, metrics = replay(recording, recorder)
    unknown, overdue = (event for event in events if event.kind.startswith("unknown"))
    assert reason in unknown.detail["reasons"]
    assert unknown.message.startswith("reading unknown, never counted as idle: ")
    assert "unknown for 10m" in overdue.message
    # The replay ended at t=1510 (its last sample at t=1500), unknown since t=300.
    assert (
        metrics.registry.get_sample_value("parkbrake_agent_reading_unknown_seconds") == 1200
    )  # as of t=1500
    assert metrics.registry.get_sample_value("parkbrake_agent_idle_seconds") == 0


def test_the_reading_state_is_exported_per_gpu(recorder: ShutdownRecorder) -> None:
    _, metrics = replay("implausible", recorder)

    def state(gpu: int, name: str) -> float | None:
        labels = {"gpu": str(gpu), "uuid": UUIDS[gpu], "state": name}
        return metrics.registry.get_sample_value("parkbrake_gpu_reading_state", labels)

    assert [state(0, name.value) for name in GpuState] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert state(1, "unknown") == 1.0


def test_the_copying_recording_is_busy_on_memory_copies_alone(recorder: ShutdownRecorder) -> None:
    events, _ = replay("copying", recorder)
    [busy] = [event for event in events if event.kind == "busy"]
    assert busy.detail["gpus"] == [{"gpu": 0, "state": "active"}, {"gpu": 1, "state": "active"}]
    last = load_recording(RECORDINGS / "copying.jsonl")[-1].observation
    assert isinstance(last, list)
    assert last[0].utilization_percent == 0  # the SMs alone would say idle (then hung after 10 minutes)


def gpu(memory: int, pids: tuple[int, ...] = (4242,), stamp: int | None = None) -> GpuSample:
    return GpuSample(0, "GPU-0", 0, memory, compute_pids=pids, counter_timestamp_us=stamp)


def test_memory_moving_under_a_process_is_activity_and_without_one_is_not() -> None:
    state = observe(AGENT_DEFAULTS, IdleState(), [gpu(20 * 2**30)], START).state
    moved = observe(AGENT_DEFAULTS, state, [gpu(22 * 2**30)], START + 10 * S)
    assert moved.busy == ("GPU 0 memory in use changed by +2048 MiB",)
    assert moved.quiet_for == timedelta(0)  # the hang window starts again
    released = observe(AGENT_DEFAULTS, state, [gpu(2**29, pids=())], START + 10 * S)
    assert released.empty  # the context torn down: nothing is working
    assert released.idle


def test_a_counter_that_advances_again_is_believed_again() -> None:
    state = IdleState()
    verdicts = []
    for t, stamp in [(0, 100), (10, 100), (20, 200)]:
        verdict = observe(AGENT_DEFAULTS, state, [gpu(2**29, pids=(), stamp=stamp)], START + t * S)
        state = verdict.state
        verdicts.append(verdict)
    assert [bool(verdict.unknown) for verdict in verdicts] == [False, True, False]
    assert verdicts[2].idle_for == timedelta(0)  # the window reopens after the stale reading


def test_the_command_reports_a_stale_reading_and_keeps_the_host(recorder: ShutdownRecorder) -> None:
    completed = agent_command("--replay", str(RECORDINGS / "stale.jsonl"), "-o", "json")
    assert completed.returncode == 0, completed.stderr
    events = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [event["event"] for event in events] == [
        "started",
        "spot-watch-off",
        "busy",
        "unknown",
        "unknown-too-long",
        "replay-ended",
    ]
    assert recorder.calls() == []


# --- property: whatever came before, a sample that cannot be believed never shuts the host down

KINDS = ("empty", "hung-context", "stale", "implausible", "failed")
# Short windows, so that a few samples can complete any of them.
SHORT = IdlePolicy(
    idle_after=2 * M, threshold_percent=5, max_gap=30 * S, hang_after=1 * M, idle_after_empty=1 * M
)


def _sample(kind: str, stamp: int) -> Observation:
    if kind == "failed":
        return SampleFailure("NVML: Unknown Error")
    if kind == "implausible":
        return [GpuSample(0, "GPU-0", 0, 0, compute_pids=(4242,), counter_timestamp_us=stamp)]
    pids = (4242,) if kind == "hung-context" else ()
    return [GpuSample(0, "GPU-0", 0, 2**30, compute_pids=pids, counter_timestamp_us=stamp)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=35), st.sampled_from(KINDS)), min_size=1, max_size=60
    )
)
def test_an_unknown_sample_never_shuts_the_host_down(steps: list[tuple[int, str]]) -> None:
    state = IdleState()
    t, stamp = 0, 1
    for step, kind in steps:
        t += step
        if kind != "stale":  # a stale reading repeats the counter's last timestamp
            stamp += step * 1_000_000
        verdict = observe(SHORT, state, _sample(kind, stamp), START + t * S)
        state = verdict.state
        if kind in ("implausible", "failed"):
            assert verdict.unknown
        if verdict.unknown:
            assert not verdict.shut_down
            assert not verdict.idle
