"""Spot notices on the host: IMDSv2 on 127.0.0.1 serves them, real processes receive them.

The metadata service is the conftest's :class:`FakeImds`, strict as IMDSv2 is (a read without a
valid token gets 401; the token TTL header is required). The job is a real child process that
records the signal it gets; the checkpoint hook is a real ``/bin/sh`` command.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cli.host.group_release import InstanceMetadata
from cli.host.spot import SpotSettings, SpotWatcher, run_hook
from cli.host.watchdog import group_alive
from guardrails.spot import (
    NoticeError,
    OnRebalance,
    hook_budget,
    parse_instance_action,
    parse_rebalance,
)
from tests.cli.host.conftest import FakeImds, ShutdownRecorder
from tests.conftest import REPO_ROOT

PARKBRAKE = [sys.executable, "-c", "from cli.main import main; main()"]
S = timedelta(seconds=1)
# A job that records the first signal it gets, says when it is ready for one, and gives up after 60 s.
JOB = """
import pathlib, signal, sys, time
got, ready = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
def record(signum, frame):
    got.write_text(signal.Signals(signum).name)
    sys.exit(0)
for name in ("SIGTERM", "SIGUSR1"):
    signal.signal(getattr(signal, name), record)
ready.write_text("ready")
for _ in range(600):
    time.sleep(0.1)
sys.exit(3)
"""


def notice(action: str = "terminate", in_seconds: float = 120) -> str:
    at = datetime.now(UTC) + timedelta(seconds=in_seconds)
    return json.dumps({"action": action, "time": at.strftime("%Y-%m-%dT%H:%M:%SZ")})


def wait_for(path: Path, seconds: float = 30) -> None:
    for _ in range(int(seconds * 20)):
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


@pytest.fixture
def job(tmp_path: Path) -> tuple[list[str], Path, Path]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    got, ready = tmp_path / "got-signal", tmp_path / "ready"
    return [sys.executable, str(script), str(got), str(ready)], got, ready


def events_of(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith('{"event"')]


# --- parkbrake run, as a real process


def test_a_notice_reaches_the_job_as_its_signal_and_the_hook_runs_within_the_notice(
    serve_imds: Any, recorder: ShutdownRecorder, job: tuple[list[str], Path, Path], tmp_path: Path
) -> None:
    imds = serve_imds(FakeImds("i-0spot", group=None))
    argv, got, ready = job
    checkpoint = tmp_path / "checkpoint"
    wrapper = subprocess.Popen(
        [
            *PARKBRAKE,
            "run",
            "-o",
            "json",
            "--no-release-from-group",
            "--spot-poll",
            "1s",
            "--on-interrupt",
            f'echo "$PARKBRAKE_SPOT_ACTION at $PARKBRAKE_SPOT_TIME" > {checkpoint}',
            "--",
            *argv,
        ],
        cwd=REPO_ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(ready)
    imds.instance_action = notice("terminate", 120)
    _, stderr = wrapper.communicate(timeout=60)

    assert got.read_text() == "SIGTERM"
    assert checkpoint.read_text().startswith("terminate at ")
    events = events_of(stderr)
    assert [event["event"] for event in events] == [
        "spot-interruption",
        "spot-signal",
        "spot-hook",
        "spot-hook-done",
    ]
    assert events[0]["action"] == "terminate"
    # Two minutes of notice less the 15 s margin, less the moment it took to see the notice.
    assert 90 <= events[2]["budget_seconds"] <= 105
    assert events[3]["ok"] is True
    report = json.loads(stderr.splitlines()[-1])
    assert report["job"]["exit_status"] == 0  # the job checkpointed on SIGTERM and exited on its own
    assert report["spot"]["interruption"]["action"] == "terminate"
    assert [hook["ok"] for hook in report["spot"]["hooks"]] == [True]
    assert wrapper.returncode == 0
    assert len(recorder.calls()) == 1  # then the host shut down, as after any job


def test_the_shutdown_waits_for_a_hook_still_running_when_the_job_has_ended(
    serve_imds: Any, recorder: ShutdownRecorder, job: tuple[list[str], Path, Path], tmp_path: Path
) -> None:
    imds = serve_imds(FakeImds("i-0spot", group=None))
    argv, got, ready = job
    uploaded = tmp_path / "uploaded"
    wrapper = subprocess.Popen(
        [
            *PARKBRAKE,
            "run",
            "--no-release-from-group",
            "--spot-poll",
            "1s",
            "--on-interrupt",
            f"sleep 2; echo done > {uploaded}",  # an upload that outlasts the job's own exit
            "--",
            *argv,
        ],
        cwd=REPO_ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(ready)
    imds.instance_action = notice("terminate", 120)
    wrapper.communicate(timeout=60)
    assert got.read_text() == "SIGTERM"  # the job exited at once
    assert len(recorder.calls()) == 1
    assert uploaded.stat().st_mtime_ns <= recorder.calls_file.stat().st_mtime_ns  # the hook first


def test_the_interrupt_signal_is_configurable(
    serve_imds: Any, recorder: ShutdownRecorder, job: tuple[list[str], Path, Path]
) -> None:
    imds = serve_imds(FakeImds("i-0spot", group=None))
    argv, got, ready = job
    wrapper = subprocess.Popen(
        [
            *PARKBRAKE,
            "run",
            "--on-exit",
            "none",
            "--spot-poll",
            "1s",
            "--interrupt-signal",
            "usr1",
            "--",
            *argv,
        ],
        cwd=REPO_ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(ready)
    imds.instance_action = notice("stop", 120)
    _, stderr = wrapper.communicate(timeout=60)
    assert got.read_text() == "SIGUSR1"
    assert "EC2 will stop this host at " in stderr
    assert "sent SIGUSR1 to the job" in stderr


def test_off_ec2_the_watch_turns_itself_off_with_one_line_and_the_job_runs(
    recorder: ShutdownRecorder,
) -> None:
    completed = subprocess.run(
        [*PARKBRAKE, "run", "--on-exit", "none", "--", sys.executable, "-c", "import time; time.sleep(1)"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    off = [line for line in completed.stderr.splitlines() if "spot notices are not watched" in line]
    assert len(off) == 1
    assert "no instance metadata service answered" in off[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interrupt-signal", "SIGFOO"], "'SIGFOO' is not a signal"),
        (["--no-spot-watch", "--on-interrupt", "true"], "--no-spot-watch does not watch for"),
        (["--on-interrupt", " "], "--on-interrupt is empty"),
        (
            ["--on-rebalance", "panic"],
            "invalid value for --on-rebalance: 'panic' — use one of log, hook, interrupt",
        ),
    ],
)
def test_bad_spot_flags_exit_2_without_a_traceback(args: list[str], message: str) -> None:
    completed = subprocess.run(
        [*PARKBRAKE, "run", *args, "--", "true"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    assert message in completed.stderr
    assert "Traceback" not in completed.stderr


# --- parkbrake agent


def test_the_agent_runs_the_hook_on_a_notice(
    serve_imds: Any, recorder: ShutdownRecorder, tmp_path: Path
) -> None:
    from tests.cli.host.conftest import RECORDINGS

    imds = serve_imds(FakeImds("i-0spot", group=None))
    imds.instance_action = notice("terminate", 120)
    checkpoint = tmp_path / "checkpoint"
    completed = subprocess.run(
        [
            *PARKBRAKE,
            "agent",
            "--port",
            "0",
            "--address",
            "127.0.0.1",
            "-o",
            "json",
            "--replay",
            str(RECORDINGS / "busy.jsonl"),
            "--on-interrupt",
            f"echo saved > {checkpoint}",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    kinds = [json.loads(line)["event"] for line in completed.stdout.splitlines()]
    # The agent has no job to signal: the hook is what it does.
    assert kinds[:4] == ["started", "spot-interruption", "spot-hook", "spot-hook-done"]
    assert checkpoint.read_text() == "saved\n"


# --- the watcher and the hook, in process


@pytest.fixture
def child() -> Any:
    """A real process in a group of its own, as the wrapper starts the job."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield process
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def watcher_for(
    settings: SpotSettings, events: list[tuple[str, str, dict[str, Any]]], sent: list[int] | None = None
) -> SpotWatcher:
    watcher = SpotWatcher(
        settings, lambda *event: events.append(event), metadata=InstanceMetadata.from_environment()
    )
    if sent is not None:
        watcher.send_signal = sent.append
    return watcher


def test_a_hook_that_hangs_is_killed_at_the_end_of_its_budget_with_its_children(tmp_path: Path) -> None:
    group_file = tmp_path / "pgid"
    result = run_hook(f"echo $$ > {group_file}; sleep 30 & wait", 1 * S, {})
    assert result.killed
    assert not result.ok
    assert "was still running at the end of its 1s and was killed" in result.describe()
    assert result.seconds < 20
    assert not still_running(int(group_file.read_text()))  # the hook's own child went with it


def still_running(group: int) -> bool:
    """Whether a process of ``group`` still runs (zombies aside), after a moment for the kill to land."""
    for _ in range(100):
        if not group_alive(group):
            return False
        time.sleep(0.05)
    return True


def test_the_watcher_reports_a_hook_killed_within_a_short_notice(serve_imds: Any, child: Any) -> None:
    imds = serve_imds(FakeImds("i-0spot", group=None))
    imds.instance_action = notice("terminate", 3)  # what is left of a notice seen late
    events: list[tuple[str, str, dict[str, Any]]] = []
    watcher = watcher_for(SpotSettings(on_interrupt="sleep 60", margin=1 * S), events)
    watcher.send_signal = lambda signum: os.killpg(child.pid, signum)
    assert watcher.poll_once() is False  # interrupted: nothing more to watch
    assert child.wait(timeout=10) == -signal.SIGTERM
    kinds = [kind for kind, _, _ in events]
    assert kinds == ["spot-interruption", "spot-signal", "spot-hook", "spot-hook-failed"]
    failed = events[-1][2]
    assert failed["killed"] is True
    assert failed["budget_seconds"] <= 2


def test_no_time_left_skips_the_hook_and_says_so(serve_imds: Any) -> None:
    imds = serve_imds(FakeImds("i-0spot", group=None))
    imds.instance_action = notice("hibernate", 0)  # hibernation starts at once
    events: list[tuple[str, str, dict[str, Any]]] = []
    watcher_for(SpotSettings(on_interrupt="true"), events, sent=[]).poll_once()
    assert events[-1][0] == "spot-hook-failed"
    assert "did not run: the notice left no time before the action" in events[-1][1]


def test_an_expired_token_is_renewed_and_the_notice_still_read(serve_imds: Any) -> None:
    imds = serve_imds(FakeImds("i-0spot", group=None))
    events: list[tuple[str, str, dict[str, Any]]] = []
    sent: list[int] = []
    watcher = watcher_for(SpotSettings(), events, sent)
    assert watcher.poll_once() is True  # no notice yet
    imds.revoke_tokens()
    imds.instance_action = notice()
    assert watcher.poll_once() is False
    assert sent == [signal.SIGTERM]
    action_reads = [
        (method, path) for method, path, _ in imds.requests if "instance-action" in path or "token" in path
    ]
    assert action_reads == [
        ("PUT", "/latest/api/token"),
        ("GET", "/latest/meta-data/spot/instance-action"),  # 404: no notice
        ("GET", "/latest/meta-data/spot/instance-action"),  # 401: the token was revoked
        ("PUT", "/latest/api/token"),
        ("GET", "/latest/meta-data/spot/instance-action"),  # the notice
    ]
    assert all(presented for method, _, presented in imds.requests if method == "GET")


def test_the_fixture_refuses_a_read_without_a_token(serve_imds: Any) -> None:
    serve_imds(FakeImds("i-0spot", group=None))
    endpoint = os.environ["PARKBRAKE_IMDS_ENDPOINT"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{endpoint}/latest/meta-data/spot/instance-action", timeout=5)
    assert refused.value.code == 401


@pytest.mark.parametrize(
    ("on_rebalance", "hook_runs", "signalled"),
    [(OnRebalance.HOOK, True, False), (OnRebalance.LOG, False, False), (OnRebalance.INTERRUPT, True, True)],
)
def test_a_rebalance_recommendation_does_what_on_rebalance_says_once(
    serve_imds: Any, tmp_path: Path, on_rebalance: OnRebalance, hook_runs: bool, signalled: bool
) -> None:
    imds = serve_imds(FakeImds("i-0spot", group=None))
    imds.rebalance = json.dumps({"noticeTime": "2026-11-30T21:40:00Z"})
    runs = tmp_path / "runs"
    events: list[tuple[str, str, dict[str, Any]]] = []
    sent: list[int] = []
    watcher = watcher_for(
        SpotSettings(on_interrupt=f"echo run >> {runs}", on_rebalance=on_rebalance), events, sent
    )
    watcher.poll_once()
    watcher.poll_once()  # the same recommendation, read again
    assert (runs.read_text() if runs.exists() else "") == ("run\n" if hook_runs else "")
    assert sent == ([signal.SIGTERM] if signalled else [])
    assert [kind for kind, _, _ in events].count("spot-rebalance") == 1
    assert len(watcher.summary()["rebalances"]) == 1


def test_a_malformed_notice_is_reported_once_and_the_watch_goes_on(serve_imds: Any) -> None:
    imds = serve_imds(FakeImds("i-0spot", group=None))
    imds.instance_action = json.dumps({"action": "explode", "time": "2026-11-30T21:42:00Z"})
    events: list[tuple[str, str, dict[str, Any]]] = []
    watcher = watcher_for(SpotSettings(), events, sent=[])
    assert watcher.poll_once() is True
    assert watcher.poll_once() is True
    assert [kind for kind, _, _ in events] == ["spot-watch-error"]
    assert "action 'explode' is not one of terminate, stop, hibernate" in events[0][1]


def test_a_metadata_service_without_tokens_turns_the_watch_off(serve_imds: Any) -> None:
    serve_imds(FakeImds("i-0spot", group=None, issues_tokens=False))
    events: list[tuple[str, str, dict[str, Any]]] = []
    assert watcher_for(SpotSettings(), events, sent=[]).poll_once() is False
    assert events[0][0] == "spot-watch-off"
    assert "no IMDSv2" in events[0][1]


def test_the_aws_sdk_variables_are_honoured(serve_imds: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    imds = serve_imds(FakeImds("i-0spot", group=None))
    endpoint = os.environ["PARKBRAKE_IMDS_ENDPOINT"]
    monkeypatch.delenv("PARKBRAKE_IMDS_ENDPOINT")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint)
    assert InstanceMetadata.from_environment().endpoint == endpoint
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    events: list[tuple[str, str, dict[str, Any]]] = []
    watcher_for(SpotSettings(), events, sent=[]).start()
    assert [kind for kind, _, _ in events] == ["spot-watch-off"]
    assert imds.requests == []


# --- the notices themselves


def test_notices_read_as_aws_documents_them() -> None:
    parsed = parse_instance_action('{"action": "terminate", "time": "2017-09-18T08:22:00Z"}')
    assert (parsed.action, parsed.time) == ("terminate", datetime(2017, 9, 18, 8, 22, tzinfo=UTC))
    assert parse_rebalance('{"noticeTime": "2020-10-27T08:22:00Z"}').notice_time == datetime(
        2020, 10, 27, 8, 22, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("terminate", "is not JSON"),
        ('["terminate"]', "is not a JSON object"),
        ('{"action": "terminate", "time": "soon"}', "time 'soon' is not an ISO 8601 time"),
        ('{"time": "2017-09-18T08:22:00Z"}', "action None is not one of"),
    ],
)
def test_a_malformed_notice_names_what_is_wrong(body: str, message: str) -> None:
    with pytest.raises(NoticeError, match=message):
        parse_instance_action(body)


def test_the_hook_budget_ends_the_margin_before_the_action_and_is_never_negative() -> None:
    now = datetime(2026, 11, 30, 21, 40, tzinfo=UTC)
    assert hook_budget(now + 120 * S, now) == 105 * S
    assert hook_budget(now + 10 * S, now) == timedelta(0)
