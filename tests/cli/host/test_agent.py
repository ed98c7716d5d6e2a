"""`parkbrake agent` on recorded NVML sequences, in the recordings' own (virtual) time.

The recordings in ``recordings/`` sample two H200s every 10 s; with a 15-minute window:
busy never shuts down; idle (training ends at t=300) shuts down at t=1200; lingering (a CUDA
context held on GPU 1 until t=600) at t=1500; flapping (6% blips over a 5% threshold until
t=1000) at t=1910.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cli.host.nvml_agent import (
    AgentEvent,
    GpuMetrics,
    NvmlSampler,
    Recorded,
    ReplaySampler,
    load_recording,
    run_agent,
    serve_metrics,
)
from cli.host.supervision import ShutdownCommand
from guardrails.errors import InputError, ParkbrakeError
from guardrails.idle import GpuSample, IdlePolicy, SampleFailure
from tests.cli.host.conftest import RECORDINGS, ShutdownRecorder
from tests.conftest import REPO_ROOT

START = datetime(2025, 3, 1, 2, 0, tzinfo=UTC)
S = timedelta(seconds=1)
POLICY = IdlePolicy(idle_after=15 * 60 * S, threshold_percent=5, max_gap=30 * S)
PARKBRAKE = [sys.executable, "-c", "from cli.main import main; main()"]


def nvml_available() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def replay(
    records: list[Recorded], recorder: ShutdownRecorder, *, metrics: GpuMetrics | None = None
) -> tuple[list[AgentEvent], int]:
    events: list[AgentEvent] = []
    sampler = ReplaySampler(records, START)
    result = run_agent(
        sampler,
        sampler,
        POLICY,
        interval=10 * S,
        metrics=metrics or GpuMetrics(),
        shutdown_command=ShutdownCommand.parse(recorder.command()),
        emit=events.append,
    )
    return events, result.exit_status


@pytest.mark.parametrize(
    ("recording", "shutdown_at", "states"),
    [
        ("busy", None, ["busy", "replay-ended"]),
        ("idle", 1200, ["busy", "idle", "shutdown"]),
        ("lingering", 1500, ["busy", "idle", "shutdown"]),
        ("flapping", 1910, ["idle", "busy", "idle", "busy", "idle", "busy", "idle", "shutdown"]),
    ],
)
def test_recorded_sequences_shut_down_exactly_when_the_window_completes(
    recorder: ShutdownRecorder, recording: str, shutdown_at: int | None, states: list[str]
) -> None:
    events, status = replay(load_recording(RECORDINGS / f"{recording}.jsonl"), recorder)
    assert status == 0
    assert [event.kind for event in events] == states
    calls = recorder.calls()
    if shutdown_at is None:
        assert calls == []
        return
    shutdown = events[-1]
    assert shutdown.elapsed == shutdown_at * S
    assert shutdown.at == START + shutdown_at * S
    [call] = calls
    assert call["argv"] == ["-h", "now"]
    assert call["env"] == {
        "PARKBRAKE_SHUTDOWN_REASON": "idle",
        "PARKBRAKE_IDLE_SINCE": (START + (shutdown_at - 900) * S).isoformat(),
        "PARKBRAKE_IDLE_SECONDS": "900",
    }


def test_a_lingering_compute_process_is_named_while_it_keeps_the_host(recorder: ShutdownRecorder) -> None:
    records = [record for record in load_recording(RECORDINGS / "lingering.jsonl") if 300 <= record.t < 600]
    events, _ = replay(records, recorder)
    assert [event.kind for event in events] == ["busy", "replay-ended"]
    assert events[0].message == "GPU 1 has compute process 5150"
    assert recorder.calls() == []


def test_failed_samples_are_reported_and_restart_the_window(recorder: ShutdownRecorder) -> None:
    idle = [GpuSample(0, "GPU-0", 0, 0)]
    records = [
        Recorded(t, SampleFailure("NVML: GPU is lost") if t == 500 else idle) for t in range(0, 1501, 10)
    ]
    events, _ = replay(records, recorder)
    assert [(event.kind, event.elapsed.total_seconds()) for event in events] == [
        ("idle", 0),
        ("unknown", 500),
        ("idle", 510),
        ("shutdown", 1410),
    ]
    assert events[1].message == "reading unknown, never counted as idle: sampling failed: NVML: GPU is lost"


def test_a_failing_shutdown_command_makes_the_agent_exit_1(recorder: ShutdownRecorder) -> None:
    events: list[AgentEvent] = []
    sampler = ReplaySampler(load_recording(RECORDINGS / "idle.jsonl"), START)
    result = run_agent(
        sampler,
        sampler,
        POLICY,
        interval=10 * S,
        metrics=GpuMetrics(),
        shutdown_command=ShutdownCommand.parse(recorder.command(exit_status=1)),
        emit=events.append,
    )
    assert result.exit_status == 1
    assert events[-1].message.startswith("the host could not shut itself down")


# --- /metrics over real HTTP


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class ScrapingReplay(ReplaySampler):
    """A replay whose pause between samples scrapes /metrics, so each scrape sees exactly one sample."""

    def __init__(self, records: list[Recorded], port: int) -> None:
        super().__init__(records, START)
        self.port = port
        self.scrapes: list[dict[tuple[str, tuple[tuple[str, str], ...]], float]] = []

    def sleep(self, seconds: float) -> None:
        self.scrapes.append(scrape(self.port))


def test_metrics_are_served_per_gpu_over_http(recorder: ShutdownRecorder) -> None:
    busy = [
        GpuSample(0, "GPU-aaa", 97, 120 * 2**30, 63.0, 655.5, (4242,)),
        GpuSample(1, "GPU-bbb", 0, 512 * 2**20, 31.0, 75.0),
    ]
    records = [
        Recorded(0, busy),
        Recorded(10, SampleFailure("NVML: Unknown Error")),
        Recorded(20, [GpuSample(0, "GPU-aaa", 1, 0, 40.0, None)]),  # GPU 1 gone, power unsupported
    ]
    metrics = GpuMetrics()
    with serve_metrics(metrics, "127.0.0.1", 0) as port:
        sampler = ScrapingReplay(records, port)
        run_agent(
            sampler,
            sampler,
            POLICY,
            interval=10 * S,
            metrics=metrics,
            shutdown_command=ShutdownCommand.parse(recorder.command()),
            emit=lambda _: None,
        )
    first, failed, last = sampler.scrapes
    gpu0 = (("gpu", "0"), ("uuid", "GPU-aaa"))
    gpu1 = (("gpu", "1"), ("uuid", "GPU-bbb"))
    assert first[("parkbrake_gpu_utilization_ratio", gpu0)] == 0.97
    assert first[("parkbrake_gpu_memory_used_bytes", gpu0)] == 120 * 2**30
    assert first[("parkbrake_gpu_temperature_celsius", gpu0)] == 63.0
    assert first[("parkbrake_gpu_power_watts", gpu0)] == 655.5
    assert first[("parkbrake_gpu_compute_processes", gpu0)] == 1
    assert first[("parkbrake_gpu_utilization_ratio", gpu1)] == 0.0
    assert first[("parkbrake_gpu_power_watts", gpu1)] == 75.0
    assert first[("parkbrake_agent_sample_errors_total", ())] == 0
    # A failed sample exports no stale per-GPU values, and is counted.
    assert not [key for key in failed if key[0].startswith("parkbrake_gpu_")]
    assert failed[("parkbrake_agent_sample_errors_total", ())] == 1
    # A GPU that is no longer reported, and a reading that is not supported, are absent.
    assert last[("parkbrake_gpu_utilization_ratio", gpu0)] == 0.01
    assert ("parkbrake_gpu_power_watts", gpu0) not in last
    assert not [key for key in last if ("gpu", "1") in key[1]]


def test_idle_seconds_are_exported(recorder: ShutdownRecorder) -> None:
    idle = [GpuSample(0, "GPU-0", 0, 0)]
    metrics = GpuMetrics()
    with serve_metrics(metrics, "127.0.0.1", 0) as port:
        # 35 s of silence before the last sample (more than the 30 s max gap) restarts the window.
        sampler = ScrapingReplay([Recorded(t, idle) for t in (0, 10, 45)], port)
        run_agent(
            sampler,
            sampler,
            POLICY,
            interval=10 * S,
            metrics=metrics,
            shutdown_command=ShutdownCommand.parse(recorder.command()),
            emit=lambda _: None,
        )
    assert [scrape_[("parkbrake_agent_idle_seconds", ())] for scrape_ in sampler.scrapes] == [0, 10, 0]


def test_a_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ParkbrakeError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            serve_metrics(GpuMetrics(), "127.0.0.1", port).__enter__()


# --- recordings


def test_a_recording_round_trips(tmp_path: Path, recorder: ShutdownRecorder) -> None:
    recorded = tmp_path / "recorded.jsonl"
    completed = agent_command("--replay", str(RECORDINGS / "lingering.jsonl"), "--record", str(recorded))
    assert completed.returncode == 0
    original = load_recording(RECORDINGS / "lingering.jsonl")
    again = load_recording(recorded)
    assert again == original[: len(again)]
    # It recorded up to the shutdown: GPU 1's context went at t=600, so no GPU holds any process
    # and the command's --idle-after-empty of 2 minutes applies.
    assert again[-1].t == 720


def test_a_bad_recording_lists_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"t": 0, "gpus": [{"index": 0, "uuid": "GPU-0", "utilization_percent": 0, "memory_used_bytes": 0}]}\n'
        "not json\n"
        '{"t": 20, "gpus": [{"index": 0, "uuid": "GPU-0", "utilization_percent": 140, "memory_used_bytes": -1,'
        ' "compute_pids": ["x"], "fan": 3}]}\n'
        '{"t": 10, "error": "NVML: lost"}\n'
        '{"t": 30}\n'
        '{"t": 40, "gpus": [{"index": 0, "uuid": "a", "utilization_percent": 1, "memory_used_bytes": 0},'
        ' {"index": 0, "uuid": "b", "utilization_percent": 1, "memory_used_bytes": 0}]}\n'
    )
    with pytest.raises(InputError) as raised:
        load_recording(bad)
    message = str(raised.value)
    for expected in (
        "line 2: is not JSON",
        "line 3.gpus[0].fan: unknown key",
        "line 3.gpus[0].compute_pids: is not a list of process ids",
        "line 3.gpus[0].utilization_percent: 140 is out of range",
        "line 3.gpus[0].memory_used_bytes: -1 is out of range",
        "line 4.t: goes back in time (10 after 20)",
        'line 5: needs exactly one of "gpus" (a sample) or "error" (a failed sample)',
        "line 6.gpus: lists a GPU index twice: [0, 0]",
    ):
        assert expected in message
    assert "has 8 problems" in message


def test_an_empty_recording_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match="holds no samples"):
        load_recording(empty)


# --- the command, as a real process


def agent_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARKBRAKE, "agent", "--port", "0", "--address", "127.0.0.1", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_command_replays_a_recording_and_shuts_down(recorder: ShutdownRecorder) -> None:
    completed = agent_command("--replay", str(RECORDINGS / "idle.jsonl"), "-o", "json")
    assert completed.returncode == 0, completed.stderr
    events = [json.loads(line) for line in completed.stdout.splitlines()]
    # No metadata service here: the spot watch says so once, and the agent goes on.
    assert [event["event"] for event in events] == ["started", "spot-watch-off", "busy", "idle", "shutdown"]
    assert events[0]["source"] == "replay"
    assert events[0]["port"] > 0
    # Training ends at t=300 and takes its processes with it: empty GPUs, so 2 minutes, not 15.
    assert events[-1]["elapsed_seconds"] == 420
    assert events[-1]["shutdown"]["ok"] is True
    assert len(recorder.calls()) == 1


def test_the_command_without_the_empty_window_waits_the_whole_idle_window(recorder: ShutdownRecorder) -> None:
    completed = agent_command(
        "--replay", str(RECORDINGS / "idle.jsonl"), "--idle-after-empty", "off", "-o", "json"
    )
    assert completed.returncode == 0, completed.stderr
    events = [json.loads(line) for line in completed.stdout.splitlines()]
    assert events[-1]["event"] == "shutdown"
    assert events[-1]["elapsed_seconds"] == 1200


def test_the_command_in_text(recorder: ShutdownRecorder) -> None:
    completed = agent_command("--replay", str(RECORDINGS / "busy.jsonl"), "--idle-after", "1m")
    assert completed.returncode == 0, completed.stderr
    assert "/metrics on 127.0.0.1:" in completed.stdout
    assert "busy: GPU 0 at " in completed.stdout
    assert "replay-ended: the recording has no more samples" in completed.stdout
    assert recorder.calls() == []


def test_the_command_exits_1_when_the_host_cannot_shut_down(recorder: ShutdownRecorder) -> None:
    completed = agent_command(
        "--replay", str(RECORDINGS / "idle.jsonl"), "--shutdown-command", recorder.command(exit_status=1)
    )
    assert completed.returncode == 1
    assert "the host could not shut itself down" in completed.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--idle-after", "soon"],
            "Error: invalid value for --idle-after: 'soon' is not a duration — use 90m",
        ),
        (["--interval", "0s"], "Error: invalid value for --interval: '0s' is zero"),
        (["--threshold", "120"], "Error: invalid value for --threshold"),
        (["--replay", "/nonexistent/recording.jsonl"], "does not exist"),
    ],
)
def test_bad_input_exits_2_without_a_traceback(args: list[str], message: str) -> None:
    completed = agent_command(*args)
    assert completed.returncode == 2
    assert message in completed.stderr
    assert "Traceback" not in completed.stderr


@pytest.mark.skipif(nvml_available(), reason="this machine has an NVIDIA driver")
def test_without_nvml_the_agent_says_so_and_exits_1(recorder: ShutdownRecorder) -> None:
    with pytest.raises(ParkbrakeError, match=r"NVML is not available: .*; the agent needs an NVIDIA driver"):
        NvmlSampler()
    completed = agent_command()
    assert completed.returncode == 1
    assert completed.stderr.startswith("Error: NVML is not available: ")
    assert "the agent needs an NVIDIA driver" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert completed.stdout == ""
    assert recorder.calls() == []
