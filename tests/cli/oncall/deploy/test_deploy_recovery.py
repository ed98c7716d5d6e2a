"""``parkbrake deploy`` stopped half-way: a rerun after Ctrl-C at any AWS call, ``deploy --abort`` and
``parkbrake rollback``, against moto's server with ECS's scheduler simulated."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from cli.oncall.deploy.runtime import AwsClients
from lambdas.clients import RETRIES
from tests.cli.oncall.deploy.deploy_steps import (
    TIMEOUT,
    assert_no_surge,
    assert_serving,
    deployer,
    interrupted,
    invoke,
    live_colour,
)
from tests.cli.oncall.deploy.inference_fleet import (
    NEW_REVISION,
    OLD_REVISION,
    OTHER_REVISION,
    STACK,
    InferenceFleet,
    SimulatedScheduler,
    VirtualClock,
    build_fleet,
    runtime,
)


@pytest.fixture
def fleet(aws: str, tmp_path: Path) -> InferenceFleet:
    return build_fleet(tmp_path / "project")


# -- interrupted at any AWS call ---------------------------------------------------------------------------

# The calls that change something; an interrupt between two reads leaves the same state as one after the
# change before them, so stopping after each of these reaches every state an interrupt can leave.
CHANGING_CALL = re.compile(r"(Register|Create|Set|Update|Modify|Terminate|Delete|Tag|Untag|Put)[A-Z]")


class InterruptAfter:
    """A botocore ``after-call`` handler: Ctrl-C right after the ``point``-th changing call returns."""

    def __init__(self, point: int | None) -> None:
        self.point = point
        self.calls: list[str] = []

    def __call__(self, model: Any, **_: Any) -> None:
        if not CHANGING_CALL.match(model.name):
            return
        self.calls.append(model.name)
        if len(self.calls) == self.point:
            raise KeyboardInterrupt


def watched_clients(fleet: InferenceFleet, handler: InterruptAfter) -> AwsClients:
    """Fresh clients on the same endpoint, each reporting its calls to ``handler`` (botocore's own events)."""
    made = [boto3.client(service, config=RETRIES) for service in ("ecs", "elbv2", "autoscaling")]
    for client in made:
        client.meta.events.register("after-call", handler)
    return AwsClients(*made, fleet.clients.ecr_in)


def reset_aws(endpoint: str) -> None:
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    urllib.request.urlopen(request, timeout=10).close()


def test_a_rerun_after_an_interrupt_at_any_call_finishes_without_waiting_out_the_timeout(
    aws: str, tmp_path: Path
) -> None:
    recorder = InterruptAfter(None)
    fleet = build_fleet(tmp_path / "recorded")
    scheduler = SimulatedScheduler(fleet)
    clean = deployer(fleet, scheduler, VirtualClock(scheduler), clients=watched_clients(fleet, recorder))
    assert clean.run().outcome == "deployed"
    calls = recorder.calls
    # Includes the known stall: stopped after marking the pool (CreateOrUpdateTags), before raising it.
    assert calls[:4] == [
        "RegisterTaskDefinition", "CreateOrUpdateTags", "SetDesiredCapacity", "UpdateService",
    ]  # fmt: skip
    changes = {"ModifyListener", "TerminateInstanceInAutoScalingGroup", "DeleteTags", "TagResource"}
    assert changes <= set(calls)

    for point in range(1, len(calls) + 1):
        reset_aws(aws)
        fleet = build_fleet(tmp_path / f"point-{point}")
        scheduler = SimulatedScheduler(fleet)
        interrupted_run = deployer(
            fleet, scheduler, VirtualClock(scheduler), clients=watched_clients(fleet, InterruptAfter(point))
        )
        with pytest.raises(KeyboardInterrupt):
            interrupted_run.run()
        clock = VirtualClock(scheduler)

        result = deployer(fleet, scheduler, clock).run()

        where = f"interrupted after call {point} ({calls[point - 1]})"
        assert result.outcome in ("deployed", "already-serving"), (where, result.reason)
        assert clock.elapsed < TIMEOUT, where  # finished within its bake and drain
        assert_serving(fleet, "green", NEW_REVISION)
        assert_no_surge(fleet)
        assert live_colour(fleet) == "green", where


# -- deploy --abort and rollback ---------------------------------------------------------------------------


def test_abort_returns_an_interrupted_canary_to_the_live_colour(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    interrupted(fleet, scheduler)

    code, output = invoke(fleet, scheduler, VirtualClock(scheduler), "--abort", "--yes", "--output", "json")

    assert code == 0, output
    document = json.loads(output)
    assert document["outcome"] == "aborted"
    assert (document["live_colour"], document["aborted_colour"]) == ("blue", "green")
    assert len(document["steps"]) == 3
    assert_serving(fleet, "blue", OLD_REVISION)
    assert_no_surge(fleet)
    # Once more: nothing is left to abort.
    code, output = invoke(fleet, scheduler, VirtualClock(scheduler), "--abort", "--yes")
    assert code == 0, output
    assert "nothing to abort" in output


def test_abort_of_a_fully_shifted_deploy_returns_to_the_colour_registered_first(
    fleet: InferenceFleet,
) -> None:
    """All traffic on green already, blue still up: blue runs the older task definition, so it is live."""
    scheduler = SimulatedScheduler(fleet)
    stop_when_shifted = lambda clock: _raise_if(clock.scheduler.fleet.weights()["green"] == 100)  # noqa: E731
    with pytest.raises(KeyboardInterrupt):
        deployer(fleet, scheduler, VirtualClock(scheduler, stop_when_shifted)).run()
    assert fleet.weights() == {"blue": 0, "green": 100}

    code, output = invoke(fleet, scheduler, VirtualClock(scheduler), "--abort", "--dry-run")
    assert code == 0, output
    assert "Dry run: an abort would" in output
    assert fleet.weights() == {"blue": 0, "green": 100}  # the dry run changed nothing

    code, output = invoke(fleet, scheduler, VirtualClock(scheduler), "--abort", "--yes")
    assert code == 0, output
    assert "blue serves inference alone again" in output
    assert_serving(fleet, "blue", OLD_REVISION)
    assert_no_surge(fleet)


def _raise_if(condition: bool) -> None:
    if condition:
        raise KeyboardInterrupt


def test_abort_takes_no_image_or_revision(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    code, output = invoke(fleet, scheduler, VirtualClock(scheduler), "--abort", "--revision", NEW_REVISION)
    assert code == 2
    assert "--abort takes no --image or --revision" in output
    code, output = invoke(fleet, scheduler, VirtualClock(scheduler), "--yes")
    assert code == 2
    assert "missing --image and --revision (or pass --abort)" in output


def rollback_cli(fleet: InferenceFleet, scheduler: SimulatedScheduler, *args: str) -> tuple[int, str]:
    arguments = ["rollback", "inference", "--stack", STACK, "--project-dir", str(fleet.stack_file.parent)]
    outcome = CliRunner().invoke(
        parkbrake, [*arguments, *args], obj=runtime(fleet, scheduler, VirtualClock(scheduler))
    )
    assert "Traceback" not in outcome.output
    return outcome.exit_code, outcome.output


def test_rollback_deploys_the_previous_verified_revision(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    code, output = rollback_cli(fleet, scheduler, "--yes")
    assert code == 1  # the fixture's first revision was never verified by a deploy
    assert f"no verified revision other than {OLD_REVISION}" in output

    assert deployer(fleet, scheduler, VirtualClock(scheduler)).run().outcome == "deployed"
    other = deployer(fleet, scheduler, VirtualClock(scheduler), revision=OTHER_REVISION, tag="v2")
    assert other.run().outcome == "deployed"
    assert_serving(fleet, "blue", OTHER_REVISION)

    code, output = rollback_cli(fleet, scheduler, "--yes", "--bake", "1m", "--output", "json")

    assert code == 0, output
    document = json.loads(output)
    assert (document["outcome"], document["revision"]) == ("deployed", NEW_REVISION)
    assert document["image"] == f"{fleet.repository}@{fleet.digests['v1']}"
    assert_serving(fleet, "green", NEW_REVISION)
    assert_no_surge(fleet)
