"""The hang window: a GPU held by a process at 0% is a hung job, not work.

``recordings/hung.jsonl`` samples two H200s every 10 s: training until t=300, then both GPUs at 0%
with the job's CUDA contexts still held until the end (t=2400). The sample at t=300 still moves the
job's memory (its last step), so the GPUs are quiet from t=310. The agent (10-minute hang window,
15-minute idle window) counts the GPUs idle from t=910 and shuts down at t=1810; ``parkbrake run
--hang-after 10m`` ends the job at t=910. Everything runs in virtual time; the jobs are real processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from cli.host.job_wrapper import run_and_shut_down, run_job
from cli.host.nvml_agent import (
    AgentEvent,
    GpuMetrics,
    ReplaySampler,
    TimedReplay,
    load_recording,
    observation_from,
    run_agent,
)
from cli.host.supervision import HangWatch, ShutdownCommand
from guardrails.clock import ManualClock
from guardrails.idle import GpuSample, IdlePolicy, IdleState, IdleVerdict, Observation, SampleFailure, observe
from guardrails.job_policy import CapPolicy, OnExit
from tests.cli.host.conftest import RECORDINGS, ShutdownRecorder
from tests.conftest import REPO_ROOT

START = datetime(2025, 3, 1, 2, 0, tzinfo=UTC)
S = timedelta(seconds=1)
M = 60 * S
POLICY = IdlePolicy(idle_after=15 * M, threshold_percent=5, max_gap=30 * S, hang_after=10 * M)
PARKBRAKE = [sys.executable, "-c", "from cli.main import main; main()"]
SLEEPS = ["sleep", "600"]


def gpu(index: int = 0, utilization: float = 0, pids: tuple[int, ...] = ()) -> GpuSample:
    return GpuSample(index, f"GPU-{index}", utilization, 2**30, 30.0, 70.0, pids)  # a steady GiB in use


def play(policy: IdlePolicy, timeline: list[tuple[float, Observation]]) -> list[IdleVerdict]:
    state = IdleState()
    verdicts = []
    for seconds, observation in timeline:
        verdict = observe(policy, state, observation, START + seconds * S)
        state = verdict.state
        verdicts.append(verdict)
    return verdicts


def first(verdicts: list[IdleVerdict], timeline: list[tuple[float, Observation]], test: str) -> float | None:
    return next((t for (t, _), v in zip(timeline, verdicts, strict=True) if getattr(v, test)), None)


# --- the pure window


def test_a_context_quiet_for_the_hang_window_counts_as_idle_from_then() -> None:
    timeline: list[tuple[float, Observation]] = [
        (t, [gpu(0, 90 if t < 300 else 0, (4242,)), gpu(1, 0)]) for t in range(0, 2401, 10)
    ]
    verdicts = play(POLICY, timeline)
    assert verdicts[40].busy == ("GPU 0 has compute process 4242",)  # t=400: quiet for 100 s only
    assert first(verdicts, timeline, "hung") == 900  # quiet since t=300, plus the 10-minute hang window
    assert verdicts[90].idle
    assert [g.index for g in verdicts[90].hung] == [0]
    assert first(verdicts, timeline, "shut_down") == 1800  # the idle window starts when the GPU is hung


def test_a_context_that_computes_again_before_the_hang_window_is_never_hung() -> None:
    timeline: list[tuple[float, Observation]] = [
        (t, [gpu(0, 0 if (t // 590) % 2 == 0 else 80, (4242,))]) for t in range(0, 3600, 10)
    ]
    verdicts = play(POLICY, timeline)
    assert not any(v.hung or v.shut_down for v in verdicts)


def test_without_a_hang_window_a_context_always_keeps_the_gpu_busy() -> None:
    policy = IdlePolicy(idle_after=15 * M, threshold_percent=5, max_gap=30 * S)
    timeline: list[tuple[float, Observation]] = [(t, [gpu(0, 0, (4242,))]) for t in range(0, 7200, 10)]
    assert not any(v.idle for v in play(policy, timeline))


@pytest.mark.parametrize(
    "interruption",
    [SampleFailure("NVML: GPU is lost"), [gpu(0, 40, (4242,))]],
    ids=["failed-sample", "busy-sample"],
)
def test_anything_but_a_quiet_sample_restarts_the_hang_window(interruption: Observation) -> None:
    timeline: list[tuple[float, Observation]] = [
        (t, interruption if t == 500 else [gpu(0, 0, (4242,))]) for t in range(0, 1500, 10)
    ]
    # Quiet from t=0, interrupted at t=500, quiet again from t=510: hung at 510 + 600.
    assert first(play(POLICY, timeline), timeline, "hung") == 1110


def test_quiet_for_is_every_gpu_at_or_under_the_threshold_whatever_holds_it() -> None:
    timeline: list[tuple[float, Observation]] = [
        (0, [gpu(0, 0, (1,)), gpu(1, 0)]),
        (10, [gpu(0, 0, (1,)), gpu(1, 0)]),
        (20, [gpu(0, 0, (1,)), gpu(1, 60)]),
        (30, [gpu(0, 0, (1,)), gpu(1, 0)]),
    ]
    assert [v.quiet_for.total_seconds() for v in play(POLICY, timeline)] == [0, 10, 0, 0]


# --- the agent on the hung recording


def test_the_agent_shuts_a_hung_host_down_and_says_why() -> None:
    events: list[AgentEvent] = []
    metrics = GpuMetrics()
    sampler = ReplaySampler(load_recording(RECORDINGS / "hung.jsonl"), START)
    hung_values: list[float | None] = []

    def emit(event: AgentEvent) -> None:
        events.append(event)
        if event.kind == "hung":
            hung_values.extend(
                metrics.registry.get_sample_value("parkbrake_gpu_hung", {"gpu": str(n), "uuid": uuid})
                for n, uuid in enumerate(
                    ["GPU-5f0c1e2a-8d4b-4b7e-9a31-2c6d0e7f4a10", "GPU-a93b7c44-1e02-4f6d-b8a5-71c9d2e3f6b8"]
                )
            )

    result = run_agent(
        sampler,
        sampler,
        POLICY,
        interval=10 * S,
        metrics=metrics,
        shutdown_command=ShutdownCommand.parse(f"{sys.executable} -c pass"),
        emit=emit,
    )
    assert result.exit_status == 0
    assert [(e.kind, e.elapsed.total_seconds()) for e in events] == [
        ("busy", 0),
        ("hung", 910),
        ("shutdown", 1810),
    ]
    hung = events[1].message
    assert "GPU 0 held by process 4242" in hung
    assert "GPU 1 held by process 4243" in hung
    assert "hang window of 10m" in hung
    assert hung_values == [1.0, 1.0]


def agent_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARKBRAKE, "agent", "--port", "0", "--address", "127.0.0.1", "--output", "json", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )


def test_the_agent_command_has_a_10_minute_hang_window_by_default(recorder: ShutdownRecorder) -> None:
    completed = agent_command("--replay", str(RECORDINGS / "hung.jsonl"))
    assert completed.returncode == 0, completed.stderr
    events = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [(e["event"], e.get("elapsed_seconds")) for e in events[2:]] == [  # after started, spot-watch-off
        ("busy", 0),
        ("hung", 910),
        ("shutdown", 1810),
    ]
    assert [call["env"]["PARKBRAKE_SHUTDOWN_REASON"] for call in recorder.calls()] == ["idle"]


def test_the_agent_command_with_the_hang_window_off_keeps_a_hung_host(recorder: ShutdownRecorder) -> None:
    completed = agent_command("--replay", str(RECORDINGS / "hung.jsonl"), "--hang-after", "off")
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.splitlines()[-1])["event"] == "replay-ended"
    assert recorder.calls() == []


# --- parkbrake run --hang-after


def hang_watch(recording: str, clock: ManualClock) -> HangWatch:
    sampler = TimedReplay(load_recording(RECORDINGS / recording), clock, clock.now())
    return HangWatch(lambda: observation_from(sampler), 10 * M, 5.0, 10 * S)


def test_run_ends_a_hung_job_once_its_gpus_are_quiet_for_the_hang_window() -> None:
    clock = ManualClock(START)
    log: list[str] = []
    result = run_job(
        SLEEPS,
        CapPolicy(max_runtime=2 * 60 * M, grace=30 * S),
        clock=clock,
        hang=hang_watch("hung.jsonl", clock),
        log=log.append,
    )
    assert (result.ended_by, result.hung, result.cap_reached) == ("hung", True, False)
    # Quiet from t=310: hung at t=910, then ended within its grace (SIGTERM, or SIGKILL after 30 s).
    assert 910 <= result.runtime.total_seconds() <= 940
    assert result.signal in ("SIGTERM", "SIGKILL")
    assert any("the job is hung" in line and "hang window of 10m" in line for line in log)


def test_run_leaves_a_busy_job_to_its_cap() -> None:
    clock = ManualClock(START)
    result = run_job(
        SLEEPS, CapPolicy(max_runtime=20 * M, grace=30 * S), clock=clock, hang=hang_watch("busy.jsonl", clock)
    )
    assert (result.ended_by, result.hung, result.cap_reached) == ("cap-reached", False, True)
    assert 1200 <= result.runtime.total_seconds() <= 1230


def test_run_reports_the_hang_to_the_shutdown_command(recorder: ShutdownRecorder) -> None:
    clock = ManualClock(START)
    report = run_and_shut_down(
        SLEEPS,
        CapPolicy(max_runtime=None, grace=30 * S),
        on_exit=OnExit.STOP,
        shutdown_command=ShutdownCommand.parse(recorder.command()),
        hang=hang_watch("hung.jsonl", clock),
        clock=clock,
    )
    assert report.job.ended_by == "hung"
    assert [call["env"]["PARKBRAKE_SHUTDOWN_REASON"] for call in recorder.calls()] == ["job-hung"]


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARKBRAKE, "run", *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False
    )


def test_the_run_command_ends_a_hung_job_from_a_replayed_recording(recorder: ShutdownRecorder) -> None:
    completed = run_command(
        "-o",
        "json",
        "--hang-after",
        "10m",
        "--grace",
        "30s",
        "--replay",
        str(RECORDINGS / "hung.jsonl"),
        "--",
        *SLEEPS,
    )
    report = json.loads(completed.stderr.splitlines()[-1])
    assert report["job"]["ended_by"] == "hung"
    assert 910 <= report["job"]["runtime_seconds"] <= 940
    assert completed.returncode == report["job"]["exit_status"] in (137, 143)
    assert [call["env"]["PARKBRAKE_SHUTDOWN_REASON"] for call in recorder.calls()] == ["job-hung"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replay", str(RECORDINGS / "hung.jsonl")], "--replay plays GPU samples for --hang-after"),
        (
            ["--hang-after", "ten minutes"],
            "Error: invalid value for --hang-after: 'ten minutes' is not a duration — ",
        ),
        (["--hang-after", "10m", "--interval", "0s"], "Error: invalid value for --interval: '0s' is zero"),
    ],
)
def test_run_refuses_bad_hang_flags_without_a_traceback(
    args: list[str], message: str, recorder: ShutdownRecorder
) -> None:
    completed = run_command(*args, "--", "true")
    assert completed.returncode == 2, completed.stderr
    assert message in completed.stderr
    assert "Traceback" not in completed.stderr
    assert recorder.calls() == []
