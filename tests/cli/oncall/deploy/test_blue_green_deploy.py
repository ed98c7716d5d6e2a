"""``parkbrake deploy`` against moto's server, with ECS's scheduler simulated (moto runs no tasks).

Every assertion reads AWS back through the real API: listener weights, desired counts, the GPU
pool's desired capacity and surge mark, task definitions; and the stack file on disk.
"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from cli.oncall.deploy.phases import DeployResult
from cli.oncall.deploy.runtime import AwsClients
from cli.oncall.deploy.surge_host import SURGE_TAG
from guardrails import names, tags
from lambdas.clients import RETRIES
from stacks.config import load_stack_config
from tests.aws_fault_proxy import FaultProxy
from tests.cli.oncall.deploy.deploy_steps import (
    BAKE,
    TIMEOUT,
    CtrlCDuringBake,
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
    RecordedProgress,
    SimulatedScheduler,
    VirtualClock,
    build_fleet,
    runtime,
)


@pytest.fixture
def fleet(aws: str, tmp_path: Path) -> InferenceFleet:
    return build_fleet(tmp_path / "project")


def test_a_deploy_moves_traffic_to_the_new_colour_and_cleans_up(fleet: InferenceFleet) -> None:
    original = fleet.stack_file.read_text()
    scheduler = SimulatedScheduler(fleet)
    clock = VirtualClock(scheduler)
    progress = RecordedProgress()
    surged: list[int] = []
    clock.hooks.append(lambda _: surged.append(fleet.group()["DesiredCapacity"]))

    result = deployer(fleet, scheduler, clock, progress=progress).run()

    assert result.outcome == "deployed", result.reason
    assert (result.phase, result.old_colour, result.new_colour) == ("ready", "blue", "green")
    assert_serving(fleet, "green", NEW_REVISION)
    assert_no_surge(fleet)
    assert max(surged) == 2  # the extra host was there while the new colour started
    # The host removed was an idle one: the one left runs green's task.
    green_hosts = [target["Id"] for target in scheduler.runs[fleet.services["green"]].targets.values()]
    assert [item["InstanceId"] for item in fleet.group()["Instances"]] == green_hosts
    # The new task definition is pinned to v1's digest and labelled with the revision.
    green = fleet.service("green")["taskDefinition"]
    definition = fleet.clients.ecs.describe_task_definition(taskDefinition=green, include=["TAGS"])
    container = definition["taskDefinition"]["containerDefinitions"][0]
    assert container["image"] == f"{fleet.repository}@{fleet.digests['v1']}"
    assert container["dockerLabels"][names.CONTAINER_REVISION_LABEL] == NEW_REVISION
    assert {"name": "PARKBRAKE_REVISION", "value": NEW_REVISION} in container["environment"]
    assert tags.as_dict([{"Key": t["key"], "Value": t["value"]} for t in definition["tags"]])[
        tags.REVISION
    ] == (NEW_REVISION)
    # The canary came before all traffic, and the bake took its (virtual) time.
    canary = progress.steps.index("Canary: 10% of traffic to green")
    assert progress.steps.index("All traffic to green") > canary
    assert clock.elapsed >= BAKE
    assert result.deployment_after not in (None, result.deployment_before)
    assert result.verification is not None
    assert result.verification.passed
    # Only live_colour changed in the stack file: one line added after "parkbrake:inference:".
    assert live_colour(fleet) == "green"
    added = [line for line in fleet.stack_file.read_text().splitlines() if line not in original.splitlines()]
    assert added == ["    live_colour: green"]
    inference = load_stack_config(STACK, fleet.stack_file.parent).inference
    assert inference is not None
    assert inference.live_colour == "green"
    assert result.config_edit is not None
    assert result.config_edit.changed


def test_deploying_the_serving_revision_again_changes_nothing(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    assert deployer(fleet, scheduler, VirtualClock(scheduler)).run().outcome == "deployed"
    count = fleet.task_definition_count()

    again = deployer(fleet, scheduler, VirtualClock(scheduler)).run()

    assert again.outcome == "already-serving"
    assert again.phase == "done"
    assert fleet.task_definition_count() == count
    assert_serving(fleet, "green", NEW_REVISION)


def test_a_new_colour_that_never_becomes_healthy_is_rolled_back(fleet: InferenceFleet) -> None:
    original = fleet.stack_file.read_bytes()
    scheduler = SimulatedScheduler(fleet, failing={NEW_REVISION})
    clock = VirtualClock(scheduler)

    result = deployer(fleet, scheduler, clock).run()

    assert result.outcome == "rolled-back"
    assert "green was not healthy within 10m" in result.reason
    assert result.rollback_errors == []
    assert clock.elapsed >= TIMEOUT
    assert_serving(fleet, "blue", OLD_REVISION)
    assert fleet.healthy_targets("green") == 0
    assert_no_surge(fleet)
    assert fleet.stack_file.read_bytes() == original


def test_a_circuit_breaker_rollback_is_a_failure_not_a_success(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet, failing={NEW_REVISION}, circuit_breaker=True)
    clock = VirtualClock(scheduler)

    result = deployer(fleet, scheduler, clock).run()

    assert result.outcome == "rolled-back"
    assert "ECS rolled inference-green back" in result.reason
    assert "circuit breaker" in result.reason
    assert clock.elapsed < TIMEOUT  # judged by the deployment id, not by waiting out the timeout
    assert_serving(fleet, "blue", OLD_REVISION)
    assert_no_surge(fleet)


def test_an_interrupted_deploy_is_resumed_by_the_next_one(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    interrupted(fleet, scheduler)

    clock = VirtualClock(scheduler)
    result = deployer(fleet, scheduler, clock).run()

    assert result.outcome == "deployed", result.reason
    assert result.phase == "canary"
    assert clock.elapsed >= BAKE  # the bake starts again: how long it ran before is not known
    assert_serving(fleet, "green", NEW_REVISION)
    assert_no_surge(fleet)  # one host added, one removed, across the two runs
    assert live_colour(fleet) == "green"


def test_a_resumed_deploy_rolls_back_a_canary_that_lost_health(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    interrupted(fleet, scheduler)
    scheduler.failing.add(NEW_REVISION)  # while nobody watched, the new tasks started crashing

    result = deployer(fleet, scheduler, VirtualClock(scheduler)).run()

    assert result.outcome == "rolled-back"
    assert "green became unhealthy while baking" in result.reason
    assert_serving(fleet, "blue", OLD_REVISION)
    assert_no_surge(fleet)
    assert live_colour(fleet) is None


def test_a_deploy_of_another_revision_rolls_the_interrupted_one_back_first(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    interrupted(fleet, scheduler)
    progress = RecordedProgress()

    result = deployer(
        fleet, scheduler, VirtualClock(scheduler), revision=OTHER_REVISION, tag="v2", progress=progress
    ).run()

    assert result.outcome == "deployed", result.reason
    assert result.phase == "foreign"
    assert progress.steps[0] == f"Rolling back the half-done deploy of {NEW_REVISION} on green"
    assert_serving(fleet, "green", OTHER_REVISION)
    assert_no_surge(fleet)


def test_a_refused_permission_mid_deploy_rolls_back(fleet: InferenceFleet, aws: str) -> None:
    scheduler = SimulatedScheduler(fleet)
    with FaultProxy(aws) as proxy:
        proxy.fail("ModifyListener", "AccessDenied", "not authorized to perform ModifyListener", status=403)
        clients = AwsClients(
            fleet.clients.ecs,
            boto3.client("elbv2", endpoint_url=proxy.url, config=RETRIES),
            fleet.clients.autoscaling,
            fleet.clients.ecr_in,
        )
        result = deployer(fleet, scheduler, VirtualClock(scheduler), clients=clients).run()

    assert result.outcome == "rolled-back"
    assert "AccessDenied" in result.reason
    assert result.rollback_errors == []  # the weights never moved, so putting them back needs no call
    assert proxy.failed["ModifyListener"] == 1
    assert_serving(fleet, "blue", OLD_REVISION)
    assert_no_surge(fleet)


def test_throttled_calls_are_retried_and_the_deploy_succeeds(fleet: InferenceFleet, aws: str) -> None:
    scheduler = SimulatedScheduler(fleet)
    with FaultProxy(aws) as proxy:
        proxy.fail("DescribeTargetHealth", "Throttling", "Rate exceeded", status=400, times=1)
        proxy.fail("SetDesiredCapacity", "Throttling", "Rate exceeded", status=400, times=1)
        clients = AwsClients(
            fleet.clients.ecs,
            boto3.client("elbv2", endpoint_url=proxy.url, config=RETRIES),
            boto3.client("autoscaling", endpoint_url=proxy.url, config=RETRIES),
            fleet.clients.ecr_in,
        )
        result = deployer(fleet, scheduler, VirtualClock(scheduler), clients=clients).run()

    assert result.outcome == "deployed", result.reason
    assert proxy.failed["DescribeTargetHealth"] == 1
    assert proxy.failed["SetDesiredCapacity"] == 1
    assert_serving(fleet, "green", NEW_REVISION)
    assert_no_surge(fleet)


def test_a_pool_at_its_max_is_refused_before_anything_changes(fleet: InferenceFleet) -> None:
    fleet.clients.autoscaling.update_auto_scaling_group(
        AutoScalingGroupName=fleet.autoscaling_group, MaxSize=1
    )
    scheduler = SimulatedScheduler(fleet)
    count = fleet.task_definition_count()

    result = deployer(fleet, scheduler, VirtualClock(scheduler)).run()

    assert result.outcome == "rolled-back"
    assert "is at its max (1)" in result.reason
    assert fleet.task_definition_count() == count
    assert_serving(fleet, "blue", OLD_REVISION)
    assert fleet.surge_mark() is None


# -- through the CLI -----------------------------------------------------------------------------------


def test_the_cli_deploys_and_reports_json(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    code, output = invoke(
        fleet, scheduler, VirtualClock(scheduler), "--image", fleet.image("v1"), "--revision", NEW_REVISION,
        "--bake", "2m", "--yes", "--output", "json",
    )  # fmt: skip

    assert code == 0, output
    document = json.loads(output)
    assert document["outcome"] == "deployed"
    assert document["image"] == f"{fleet.repository}@{fleet.digests['v1']}"
    assert document["verification"]["passed"] is True
    assert {check["name"] for check in document["verification"]["checks"]} == {
        "primary-deployment", "revision-label", "image-digest", "other-deployments", "running-tasks",
        "listener-routes",
    }  # fmt: skip
    assert document["config_edit"]["changed"] is True
    assert_serving(fleet, "green", NEW_REVISION)


def test_the_cli_exits_non_zero_after_a_rollback(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet, failing={NEW_REVISION})
    code, output = invoke(
        fleet, scheduler, VirtualClock(scheduler), "--image", fleet.image("v1"), "--revision", NEW_REVISION,
        "--timeout", "5m", "--yes",
    )  # fmt: skip

    assert code == 1
    assert "Rolled back" in output
    assert "green was not healthy within 5m" in output
    assert "blue still serves the previous revision" in output
    assert_serving(fleet, "blue", OLD_REVISION)


def test_ctrl_c_exits_130_and_leaves_the_service_serving(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    code, output = invoke(
        fleet, scheduler, VirtualClock(scheduler, CtrlCDuringBake()), "--image", fleet.image("v1"),
        "--revision", NEW_REVISION, "--yes",
    )  # fmt: skip

    assert code == 130
    assert "still serving" in output
    assert "run the same command again to resume" in output.lower()
    assert fleet.weights() == {"blue": 90, "green": 10}


def test_dry_run_lists_the_steps_and_changes_nothing(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    count = fleet.task_definition_count()
    code, output = invoke(
        fleet, scheduler, VirtualClock(scheduler), "--image", fleet.image("v1"), "--revision", NEW_REVISION,
        "--dry-run", "--output", "json",
    )  # fmt: skip

    assert code == 0, output
    document = json.loads(output)
    assert document["outcome"] == "dry-run"
    assert document["phase"] == "ready"
    assert document["steps"][0].startswith(f"register a task definition for {NEW_REVISION}")
    assert fleet.task_definition_count() == count
    assert_serving(fleet, "blue", OLD_REVISION)
    assert fleet.surge_mark() is None


def test_a_mutable_tag_is_refused_without_allow_tag(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    clock = VirtualClock(scheduler)
    code, output = invoke(
        fleet,
        scheduler,
        clock,
        "--image",
        "docker.io/acme/inference:latest",
        "--revision",
        NEW_REVISION,
        "--yes",
    )

    assert code == 2
    assert "mutable tag without a digest" in output
    assert "--allow-tag" in output
    assert_serving(fleet, "blue", OLD_REVISION)

    code, output = invoke(
        fleet, scheduler, clock, "--image", "docker.io/acme/inference:latest", "--revision", NEW_REVISION,
        "--allow-tag", "--dry-run",
    )  # fmt: skip
    assert code == 0, output
    assert "docker.io/acme/inference:latest" in output


def test_an_ecr_tag_that_does_not_exist_is_a_clear_error(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    code, output = invoke(
        fleet,
        scheduler,
        VirtualClock(scheduler),
        "--image",
        fleet.image("v9"),
        "--revision",
        NEW_REVISION,
        "--yes",
    )

    assert code == 2
    assert "v9" in output
    assert "does not exist" in output


def test_an_unknown_service_is_a_clear_error(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    code, output = invoke(
        fleet,
        scheduler,
        VirtualClock(scheduler),
        "--image",
        fleet.image("v1"),
        "--revision",
        NEW_REVISION,
        "--yes",
    )
    assert code == 0, output  # the real one deploys; now a name the stack does not have:
    arguments = ["deploy", "embeddings", "--stack", STACK, "--project-dir", str(fleet.stack_file.parent),
                 "--image", fleet.image("v1"), "--revision", NEW_REVISION, "--yes"]  # fmt: skip
    outcome = CliRunner().invoke(parkbrake, arguments, obj=runtime(fleet, scheduler, VirtualClock(scheduler)))

    assert outcome.exit_code == 2
    assert "has no parkbrake:embeddings.pool" in outcome.output
    assert "Traceback" not in outcome.output


def test_a_bad_revision_or_duration_is_refused(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    clock = VirtualClock(scheduler)
    code, output = invoke(
        fleet, scheduler, clock, "--image", fleet.image("v1"), "--revision", "not a sha!", "--yes"
    )
    assert code == 2
    assert "is not a revision" in output
    code, output = invoke(
        fleet,
        scheduler,
        clock,
        "--image",
        fleet.image("v1"),
        "--revision",
        NEW_REVISION,
        "--bake",
        "5 minutes",
    )
    assert code == 2
    assert "--bake" in output
    assert_serving(fleet, "blue", OLD_REVISION)


def test_the_surge_mark_makes_host_removal_idempotent(fleet: InferenceFleet) -> None:
    """A run that died after lowering the desired capacity but before deleting the mark."""
    autoscaling = fleet.clients.autoscaling
    autoscaling.create_or_update_tags(
        Tags=[{"ResourceId": fleet.autoscaling_group, "ResourceType": "auto-scaling-group", "Key": SURGE_TAG,
               "Value": "2", "PropagateAtLaunch": False}]
    )  # fmt: skip
    scheduler = SimulatedScheduler(fleet)

    result: DeployResult = deployer(
        fleet, scheduler, VirtualClock(scheduler), revision=OLD_REVISION, tag="v0"
    ).run()

    assert result.outcome == "already-serving"  # only the cleanup and the config were left
    assert_no_surge(fleet)  # desired stays 1: the host had already gone
    assert_serving(fleet, "blue", OLD_REVISION)
    assert live_colour(fleet) == "blue"


def test_without_yes_and_without_a_terminal_nothing_changes(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    count = fleet.task_definition_count()
    code, output = invoke(
        fleet, scheduler, VirtualClock(scheduler), "--image", fleet.image("v1"), "--revision", NEW_REVISION
    )

    assert code == 2
    assert "Refusing without --yes" in output
    assert fleet.task_definition_count() == count
    assert_serving(fleet, "blue", OLD_REVISION)
    assert fleet.surge_mark() is None
