"""The host stops itself through the EC2 API when the OS shutdown did not take it down.

IMDSv2 is the fake on 127.0.0.1 (conftest), EC2 is moto's server behind the fault proxy, and the
OS shutdown is the recorder, which leaves this machine running exactly as a failed shutdown would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy
from guardrail_fleet import REGION, client_factory, create_pool, group_instances, launch, states

from cli.host.api_stop import ApiFallback, stop_through_api
from guardrails.clock import ManualClock
from tests.cli.host.conftest import RECORDINGS, FakeImds, ShutdownRecorder
from tests.conftest import REPO_ROOT

PARKBRAKE = [sys.executable, "-c", "from cli.main import main; main()"]
START = datetime(2025, 3, 1, 2, 0, tzinfo=UTC)


@pytest.fixture
def ec2(proxy: FaultProxy) -> Any:
    return client_factory(proxy.url)("ec2", REGION)


def parkbrake(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARKBRAKE, *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False
    )


def test_a_stand_alone_host_stops_its_own_instance(proxy: FaultProxy, ec2: Any, serve_imds: Any) -> None:
    (host,) = launch(ec2)
    (other,) = launch(ec2)
    serve_imds(FakeImds(host, group=None))

    result = stop_through_api()

    assert (result.action, result.instance_id, result.done, result.error) == ("stop", host, True, None)
    assert states(ec2, [host, other]) == {host: "stopped", other: "running"}
    assert proxy.calls["StopInstances"] == 1


def test_a_host_in_a_group_terminates_itself_as_the_group_would_replace_a_stopped_one(
    aws: str, proxy: FaultProxy, serve_imds: Any
) -> None:
    make = client_factory(aws)
    autoscaling, ec2 = make("autoscaling", REGION), make("ec2", REGION)
    group = create_pool(autoscaling, ec2, pool="training", desired=1)
    (host,) = group_instances(autoscaling, group)
    serve_imds(FakeImds(host, group=group))

    result = stop_through_api()

    assert (result.action, result.done) == ("terminate", True)
    assert states(ec2, [host])[host] == "terminated"


def test_a_denied_stop_is_reported_with_who_stops_the_host_instead(
    proxy: FaultProxy, ec2: Any, serve_imds: Any
) -> None:
    (host,) = launch(ec2)
    serve_imds(FakeImds(host, group=None))
    proxy.fail(
        "StopInstances", "UnauthorizedOperation", "not authorized to perform ec2:StopInstances", status=403
    )

    result = stop_through_api()

    assert not result.done
    assert result.ok is False
    assert result.error is not None
    assert result.error.startswith("UnauthorizedOperation")
    assert "the deadline schedule and the sweep stop this host" in result.describe()
    assert states(ec2, [host])[host] == "running"


def test_no_metadata_service_is_no_ec2_host_to_stop() -> None:
    result = stop_through_api()  # the conftest points IMDS at a closed port
    assert (result.on_ec2, result.done, result.action) == (False, False, None)


def test_the_fallback_waits_out_the_os_shutdown_then_stops(ec2: Any, serve_imds: Any) -> None:
    (host,) = launch(ec2)
    serve_imds(FakeImds(host, group=None))
    clock = ManualClock(START)

    result = ApiFallback(after=timedelta(seconds=120)).after_shutdown(True, clock)

    assert result is not None
    assert result.done
    assert clock.now() - START == timedelta(seconds=120)
    assert states(ec2, [host])[host] == "stopped"


def test_a_failed_os_shutdown_is_not_waited_for(ec2: Any, serve_imds: Any) -> None:
    (host,) = launch(ec2)
    serve_imds(FakeImds(host, group=None))
    clock = ManualClock(START)

    result = ApiFallback(after=timedelta(seconds=120)).after_shutdown(False, clock)

    assert result is not None
    assert result.done
    assert clock.now() == START


def test_parkbrake_run_stops_the_host_through_the_api_when_the_shutdown_did_not(
    proxy: FaultProxy, ec2: Any, serve_imds: Any, recorder: ShutdownRecorder
) -> None:
    (host,) = launch(ec2)
    serve_imds(FakeImds(host, group=None))

    completed = parkbrake(
        "run",
        "-o",
        "json",
        "--api-stop-after",
        "1s",
        "--no-release-from-group",
        "--",
        sys.executable,
        "-c",
        "pass",
    )

    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stderr.splitlines()[-1])
    assert report["shutdown"]["ok"] is True
    assert report["api_stop"] == {
        "action": "stop",
        "instance_id": host,
        "done": True,
        "error": None,
        "on_ec2": True,
    }
    assert len(recorder.calls()) == 1
    assert states(ec2, [host])[host] == "stopped"


def test_parkbrake_run_exits_1_when_neither_the_shutdown_nor_the_api_stopped_the_host(
    proxy: FaultProxy, ec2: Any, serve_imds: Any, recorder: ShutdownRecorder
) -> None:
    (host,) = launch(ec2)
    serve_imds(FakeImds(host, group=None))
    proxy.fail("StopInstances", "UnauthorizedOperation", "not authorized", status=403)

    completed = parkbrake(
        "run",
        "--api-stop-after",
        "1s",
        "--no-release-from-group",
        "--shutdown-command",
        recorder.command(exit_status=1),
        "--",
        sys.executable,
        "-c",
        "pass",
    )

    assert completed.returncode == 1
    assert "the host could not shut itself down" in completed.stderr
    assert "the EC2 stop failed: UnauthorizedOperation" in completed.stderr
    assert states(ec2, [host])[host] == "running"


def test_parkbrake_agent_stops_the_host_through_the_api_after_an_idle_shutdown(
    ec2: Any, serve_imds: Any, recorder: ShutdownRecorder
) -> None:
    (host,) = launch(ec2)
    serve_imds(FakeImds(host, group=None))

    completed = parkbrake(
        "agent",
        "--port",
        "0",
        "--address",
        "127.0.0.1",
        "-o",
        "json",
        "--no-release-from-group",
        "--api-stop-after",
        "2m",
        "--replay",
        str(RECORDINGS / "idle.jsonl"),
    )

    assert completed.returncode == 0, completed.stderr
    events = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [e["event"] for e in events[-2:]] == ["shutdown", "api-stop"]
    # In the recording's time: the shutdown at t=420 (no process left: the 2-minute empty window), the API
    # stop 2 minutes after it.
    assert (events[-2]["elapsed_seconds"], events[-1]["elapsed_seconds"]) == (420, 540)
    assert events[-1]["done"] is True
    assert states(ec2, [host])[host] == "stopped"
