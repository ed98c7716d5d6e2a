"""Self-stop inside an Auto Scaling group: the host leaves its group, then shuts down whatever happened.

The instance metadata service is a real HTTP server on 127.0.0.1 playing IMDSv2 (a session token from
PUT /latest/api/token, required on every read); AWS is moto's server holding a real group with
instances; the shutdown command is the recorder. Permission and throttling errors come from the
fault proxy in front of moto.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy
from guardrail_fleet import REGION, client_factory, create_pool, group_instances, group_of, launch, states

from cli.host.group_release import InstanceMetadata, ReleaseResult, release_from_group
from cli.host.supervision import ShutdownCommand
from tests.cli.host.conftest import RECORDINGS, TAGS_PREFIX, FakeImds, ShutdownRecorder
from tests.conftest import REPO_ROOT

PARKBRAKE = [sys.executable, "-c", "from cli.main import main; main()"]


@dataclass(frozen=True)
class Pool:
    name: str
    instances: list[str]
    autoscaling: Any
    ec2: Any

    def desired(self) -> int:
        return int(group_of(self.autoscaling, self.name)["DesiredCapacity"])

    def members(self) -> list[str]:
        return group_instances(self.autoscaling, self.name)


@pytest.fixture
def pool(aws: str) -> Pool:
    """A GPU pool in moto: a real Auto Scaling group running two hosts."""
    make = client_factory(aws)
    autoscaling, ec2 = make("autoscaling", REGION), make("ec2", REGION)
    name = create_pool(autoscaling, ec2, pool="training", desired=2)
    return Pool(name, group_instances(autoscaling, name), autoscaling, ec2)


def shut_down(recorder: ShutdownRecorder) -> Any:
    return ShutdownCommand.parse(recorder.command(), release_from_group=True).run(
        {"PARKBRAKE_SHUTDOWN_REASON": "test"}
    )


# --- leaving the group


def test_a_host_in_a_group_leaves_it_and_the_group_launches_no_replacement(
    pool: Pool, serve_imds: Any, recorder: ShutdownRecorder
) -> None:
    leaving, staying = pool.instances
    serve_imds(FakeImds(leaving, pool.name))
    messages: list[str] = []

    result = ShutdownCommand.parse(recorder.command(), release_from_group=True).run({}, log=messages.append)

    assert result.release == ReleaseResult(in_group=True, group=pool.name, released=True, instance_id=leaving)
    assert result.ok
    assert len(recorder.calls()) == 1, "the OS shutdown runs after leaving the group"
    assert pool.desired() == 1
    assert pool.members() == [staying], "no replacement was launched"
    assert states(pool.ec2, [leaving])[leaving] in ("shutting-down", "terminated")
    assert messages == [result.release.describe()]
    assert "left Auto Scaling group parkbrake-test-training" in messages[0]


def test_control_the_same_group_replaces_a_host_that_leaves_without_the_decrement(pool: Pool) -> None:
    """What the host's bare shutdown amounts to: the group keeps its capacity and launches a replacement."""
    leaving, staying = pool.instances

    pool.autoscaling.terminate_instance_in_auto_scaling_group(
        InstanceId=leaving, ShouldDecrementDesiredCapacity=False
    )

    members = pool.members()
    assert pool.desired() == 2
    assert leaving not in members
    assert staying in members
    assert len(members) == 2, "a replacement took the leaving host's place"


def test_every_metadata_read_presents_the_imdsv2_token(pool: Pool, serve_imds: Any) -> None:
    imds = serve_imds(FakeImds(pool.instances[0], pool.name))

    release_from_group()

    assert imds.requests[0] == ("PUT", "/latest/api/token", False)
    assert all(presented for _, _, presented in imds.requests[1:])
    assert {path for _, path, _ in imds.requests[1:]} == {
        "/latest/meta-data/instance-id",
        "/latest/meta-data/placement/region",
        f"{TAGS_PREFIX}aws:autoscaling:groupName",
    }


def test_the_fake_metadata_service_refuses_a_read_without_a_token(serve_imds: Any) -> None:
    """The stand-in is strict as IMDSv2 is: a client that skipped the token would fail here too."""
    serve_imds(FakeImds("i-0123456789abcdef0", None))
    endpoint = InstanceMetadata.from_environment().endpoint
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{endpoint}/latest/meta-data/instance-id", timeout=5)
    assert refused.value.code == 401


def test_a_host_in_no_group_just_shuts_down(
    proxy: FaultProxy, pool: Pool, serve_imds: Any, recorder: ShutdownRecorder
) -> None:
    (alone,) = launch(pool.ec2)
    serve_imds(FakeImds(alone, group=None))

    result = shut_down(recorder)

    assert result.release == ReleaseResult(in_group=False, instance_id=alone)
    assert result.release.describe() == f"{alone} is in no Auto Scaling group"
    assert len(recorder.calls()) == 1
    assert "TerminateInstanceInAutoScalingGroup" not in proxy.calls
    assert (pool.desired(), pool.members()) == (2, pool.instances)


def test_no_metadata_service_means_not_on_ec2_and_the_shutdown_runs(recorder: ShutdownRecorder) -> None:
    """The host conftest points $PARKBRAKE_IMDS_ENDPOINT at a closed port: connection refused."""
    result = shut_down(recorder)

    assert result.release == ReleaseResult(in_group=False, on_ec2=False)
    assert "not an EC2 host" in result.release.describe()
    assert len(recorder.calls()) == 1


def test_a_metadata_service_that_never_answers_is_given_up_on() -> None:
    # A listening socket nobody accepts from: the connection is made, no answer ever comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        metadata = InstanceMetadata(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.2)
        assert release_from_group(metadata) == ReleaseResult(in_group=False, on_ec2=False)


def test_a_metadata_service_without_imdsv2_tokens_is_reported_and_the_shutdown_runs(
    serve_imds: Any, recorder: ShutdownRecorder
) -> None:
    serve_imds(FakeImds("i-0123456789abcdef0", "parkbrake-test-training", issues_tokens=False))

    result = shut_down(recorder)

    assert result.release is not None
    assert (result.release.in_group, result.release.released) == (False, False)
    assert result.release.error == "PUT /latest/api/token answered HTTP 403 Forbidden"
    assert "could not read the instance metadata" in result.release.describe()
    assert len(recorder.calls()) == 1


# --- when the group cannot be left


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str
    status: int


@pytest.mark.parametrize(
    "refusal",
    [
        Refusal(
            "AccessDenied",
            "User: arn:aws:sts::123456789012:assumed-role/host/i-0 is not authorized to perform: "
            "autoscaling:TerminateInstanceInAutoScalingGroup",
            403,
        ),
        # AWS refuses to go below MinSize; moto does not enforce it, so the proxy answers as AWS does.
        Refusal(
            "ValidationError",
            "Currently, desiredSize equals minSize (2). Terminating instance without replacement will "
            "violate group's min size constraint.",
            400,
        ),
    ],
    ids=["denied", "at-min-size"],
)
def test_a_refused_release_is_reported_and_the_host_still_shuts_down(
    proxy: FaultProxy, pool: Pool, serve_imds: Any, recorder: ShutdownRecorder, refusal: Refusal
) -> None:
    host = pool.instances[0]
    serve_imds(FakeImds(host, pool.name))
    proxy.fail("TerminateInstanceInAutoScalingGroup", refusal.code, refusal.message, status=refusal.status)

    result = shut_down(recorder)

    assert result.release is not None
    assert (result.release.in_group, result.release.released) == (True, False)
    assert result.release.error == f"{refusal.code}: {refusal.message}"
    assert "shutting down anyway" in result.release.describe()
    assert result.ok, "the OS shutdown itself succeeded"
    assert len(recorder.calls()) == 1
    assert (pool.desired(), pool.members()) == (2, pool.instances)


def test_throttling_is_retried_by_botocore_and_the_host_leaves(
    proxy: FaultProxy, pool: Pool, serve_imds: Any, recorder: ShutdownRecorder
) -> None:
    host = pool.instances[0]
    serve_imds(FakeImds(host, pool.name))
    proxy.fail("TerminateInstanceInAutoScalingGroup", "Throttling", "Rate exceeded", times=2)

    result = shut_down(recorder)

    assert result.release is not None
    assert result.release.released
    assert proxy.failed["TerminateInstanceInAutoScalingGroup"] == 2
    assert pool.desired() == 1
    assert host not in pool.members()


# --- the commands, as real processes


def parkbrake(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARKBRAKE, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_parkbrake_run_leaves_the_group_and_reports_it_in_json(
    pool: Pool, serve_imds: Any, recorder: ShutdownRecorder
) -> None:
    leaving, staying = pool.instances
    serve_imds(FakeImds(leaving, pool.name))

    completed = parkbrake("run", "-o", "json", "--", sys.executable, "-c", "import sys; sys.exit(3)")

    assert completed.returncode == 3, completed.stderr
    report = json.loads(completed.stderr.strip().splitlines()[-1])
    assert report["shutdown"]["ok"] is True
    assert report["shutdown"]["release_from_group"] == {
        "in_group": True,
        "group": pool.name,
        "released": True,
        "error": None,
        "instance_id": leaving,
        "on_ec2": True,
    }
    assert [call["env"]["PARKBRAKE_SHUTDOWN_REASON"] for call in recorder.calls()] == ["job-exited"]
    assert (pool.desired(), pool.members()) == (1, [staying])


def test_parkbrake_run_reports_a_denied_release_in_text_and_still_shuts_down(
    proxy: FaultProxy, pool: Pool, serve_imds: Any, recorder: ShutdownRecorder
) -> None:
    serve_imds(FakeImds(pool.instances[0], pool.name))
    proxy.fail("TerminateInstanceInAutoScalingGroup", "AccessDenied", "not authorized", status=403)

    completed = parkbrake("run", "--", "true")

    assert completed.returncode == 0, "the job's status: leaving the group is not the job"
    assert (
        f"could not leave Auto Scaling group {pool.name}: AccessDenied: not authorized; shutting down anyway"
        in completed.stderr
    )
    assert len(recorder.calls()) == 1
    assert pool.desired() == 2


@pytest.mark.parametrize(
    ("args", "shuts_down"),
    [(["--no-release-from-group"], True), (["--on-exit", "none"], False)],
    ids=["no-release-from-group", "on-exit-none"],
)
def test_parkbrake_run_can_leave_the_group_alone(
    pool: Pool, serve_imds: Any, recorder: ShutdownRecorder, args: list[str], shuts_down: bool
) -> None:
    imds = serve_imds(FakeImds(pool.instances[0], pool.name))

    # The spot watch reads the metadata too; without it, nothing else may.
    completed = parkbrake("run", "-o", "json", "--no-spot-watch", *args, "--", "true")

    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stderr.strip().splitlines()[-1])
    if shuts_down:
        assert report["shutdown"]["release_from_group"] is None
    else:
        assert report["shutdown"] is None
    assert len(recorder.calls()) == int(shuts_down)
    assert imds.requests == [], "the metadata service was not even asked"
    assert (pool.desired(), pool.members()) == (2, pool.instances)


def test_parkbrake_agent_leaves_the_group_when_idle(
    pool: Pool, serve_imds: Any, recorder: ShutdownRecorder
) -> None:
    leaving, staying = pool.instances
    serve_imds(FakeImds(leaving, pool.name))

    completed = parkbrake(
        "agent",
        "--port",
        "0",
        "--address",
        "127.0.0.1",
        "--replay",
        str(RECORDINGS / "idle.jsonl"),
        "-o",
        "json",
    )

    assert completed.returncode == 0, completed.stderr
    shutdown = json.loads(completed.stdout.splitlines()[-1])
    assert shutdown["event"] == "shutdown"
    assert shutdown["shutdown"]["release_from_group"]["released"] is True
    assert f"{leaving} left Auto Scaling group {pool.name}" in shutdown["message"]
    assert len(recorder.calls()) == 1
    assert (pool.desired(), pool.members()) == (1, [staying])
