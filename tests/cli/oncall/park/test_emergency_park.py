"""``parkbrake park --now`` / ``unpark --now``: the emergency path straight through the AWS API, against moto."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy
from click.testing import CliRunner, Result
from guardrail_fleet import client_factory

from cli.main import parkbrake
from cli.oncall.park.emergency import park_now
from guardrails import names, tags
from lambdas.aws.environment import ClientFactory
from tests.cli.oncall.ops_fleet import (
    REGION,
    STACK,
    aws_client,
    capacity,
    group_tag,
    parameter,
    project_copy,
    scaling_min,
    schedule,
    seed,
    service,
)
from tests.cli.oncall.terminal import WAIT_SECONDS, on_terminal, read_until

TRAINING = names.autoscaling_group(STACK, "training")
INFERENCE = names.autoscaling_group(STACK, "inference")
CONTROL_PLANE_ID = f"service/{names.ecs_cluster(STACK)}/{names.CONTROL_PLANE_SERVICE}"
BLUE = names.ecs_service(names.INFERENCE_SERVICE, "blue")
GROUP = names.schedule_group(STACK)
NIGHTLY = names.nightly_schedule(STACK, "training")
REAPER = names.reaper_schedule(STACK)


def invoke(*arguments: str) -> Result:
    return CliRunner().invoke(parkbrake, list(arguments), catch_exceptions=False)


def snapshot(endpoint: str) -> dict[str, Any]:
    """Everything park --now may touch, as AWS reports it."""
    return {
        "training": capacity(endpoint, TRAINING),
        "inference": capacity(endpoint, INFERENCE),
        "control-plane": service(endpoint, STACK, names.CONTROL_PLANE_SERVICE)["desiredCount"],
        "blue": service(endpoint, STACK, BLUE)["desiredCount"],
        "control-plane-min": scaling_min(endpoint, CONTROL_PLANE_ID),
        "nightly": schedule(endpoint, GROUP, NIGHTLY)["State"],
        "reaper": schedule(endpoint, GROUP, REAPER)["State"],
        "parked": parameter(endpoint, names.park_parameter(STACK)),
    }


UNPARKED = {
    "training": (0, 1, 2),
    "inference": (1, 2, 3),
    "control-plane": 2,
    "blue": 1,
    "control-plane-min": 1,
    "nightly": "ENABLED",
    "reaper": "ENABLED",
    "parked": "false",
}
PARKED = {
    "training": (0, 0, 2),
    "inference": (0, 0, 3),
    "control-plane": 0,
    "blue": 0,
    "control-plane-min": 0,
    "nightly": "DISABLED",
    "reaper": "ENABLED",
    "parked": "true",
}


MOTO_CALLER = "arn:aws:sts::123456789012:user/moto"  # what moto's STS answers GetCallerIdentity with


def capacities_recorded(endpoint: str, group: str) -> dict[str, Any]:
    """The capacities in a group's park record, without who parked and when."""
    record = json.loads(group_tag(endpoint, group, tags.PARKED_CAPACITY) or "")
    return {key: value for key, value in record.items() if key not in ("by", "at")}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return project_copy(tmp_path)


@pytest.fixture
def fleet(aws: str) -> Any:
    return seed(aws)


def unpark_in_fresh_process(project: Path) -> subprocess.CompletedProcess[str]:
    """Another engineer's machine: a new process that knows only AWS (and the environment pointing at it)."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from cli.main import main; main()",
            "unpark",
            "--now",
            "--yes",
            "--stack",
            STACK,
            "--project-dir",
            str(project),
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )


def test_park_now_then_another_engineers_unpark_now_restores_exact_capacities(
    aws: str, fleet: Any, project: Path
) -> None:
    reaper_before = schedule(aws, GROUP, REAPER)
    assert snapshot(aws) == UNPARKED

    parked = invoke("park", "--now", "--yes", "--stack", STACK, "--project-dir", str(project))

    assert parked.exit_code == 0, parked.output
    assert snapshot(aws) == PARKED
    assert capacities_recorded(aws, TRAINING) == {
        "min": 0,
        "desired": 1,
        "max": 2,
    }
    assert capacities_recorded(aws, INFERENCE) == {
        "min": 1,
        "desired": 2,
        "max": 3,
    }
    control_plane_tags = {
        t["key"]: t["value"] for t in service(aws, STACK, names.CONTROL_PLANE_SERVICE)["tags"]
    }
    service_record = json.loads(control_plane_tags[tags.PARKED_CAPACITY])
    assert service_record == {"desired": 2, "scaling_min": 1, "by": MOTO_CALLER, "at": service_record["at"]}
    group_record = json.loads(group_tag(aws, TRAINING, tags.PARKED_CAPACITY) or "")
    assert group_record["by"] == MOTO_CALLER  # who parked: the caller, as STS names it
    assert datetime.fromisoformat(group_record["at"]) > datetime.now(UTC) - timedelta(minutes=5)
    assert "Pulumi.dev.yaml still says parked: false" in parked.output
    shown = json.loads(CliRunner().invoke(parkbrake, ["status", "--stack", STACK, "-o", "json"]).stdout)
    groups = {group["name"]: group for group in shown["groups"]}
    assert groups[TRAINING]["park_record"]["by"] == MOTO_CALLER
    assert groups[TRAINING]["park_record"]["capacities"] == {"min": 0, "desired": 1, "max": 2}

    restored = unpark_in_fresh_process(project)

    assert restored.returncode == 0, restored.stderr
    assert snapshot(aws) == UNPARKED
    assert group_tag(aws, TRAINING, tags.PARKED_CAPACITY) is None
    assert group_tag(aws, INFERENCE, tags.PARKED_CAPACITY) is None
    control_plane_tags = {
        t["key"]: t["value"] for t in service(aws, STACK, names.CONTROL_PLANE_SERVICE)["tags"]
    }
    assert tags.PARKED_CAPACITY not in control_plane_tags
    assert schedule(aws, GROUP, REAPER) | {"LastModificationDate": None} == reaper_before | {
        "LastModificationDate": None
    }
    report = json.loads(restored.stdout)
    assert report["failed"] == 0
    assert {action["name"] for action in report["actions"] if action["status"] == "done"} >= {
        TRAINING,
        INFERENCE,
        names.CONTROL_PLANE_SERVICE,
        BLUE,
        NIGHTLY,
        names.park_parameter(STACK),
    }


def test_park_now_twice_keeps_the_first_record_and_changes_nothing(
    aws: str, fleet: Any, project: Path
) -> None:
    assert invoke("park", "--now", "--yes", "--stack", STACK, "--project-dir", str(project)).exit_code == 0
    records = {name: group_tag(aws, name, tags.PARKED_CAPACITY) for name in (TRAINING, INFERENCE)}

    again = invoke(
        "park", "--now", "--yes", "--stack", STACK, "--project-dir", str(project), "--output", "json"
    )

    assert again.exit_code == 0
    report = json.loads(again.stdout)
    assert {action["status"] for action in report["actions"]} == {"unchanged"}
    assert {name: group_tag(aws, name, tags.PARKED_CAPACITY) for name in (TRAINING, INFERENCE)} == records
    assert invoke("unpark", "--now", "--yes", "--stack", STACK, "--project-dir", str(project)).exit_code == 0
    assert snapshot(aws) == UNPARKED
    second_unpark = invoke(
        "unpark", "--now", "--yes", "--stack", STACK, "--project-dir", str(project), "-o", "json"
    )
    assert second_unpark.exit_code == 0
    assert {a["status"] for a in json.loads(second_unpark.stdout)["actions"]} <= {"unchanged", "skipped"}
    assert snapshot(aws) == UNPARKED


def test_capacity_raised_after_parking_is_parked_again_without_losing_the_record(
    aws: str, fleet: Any, project: Path
) -> None:
    assert invoke("park", "--now", "--yes", "--stack", STACK, "--project-dir", str(project)).exit_code == 0
    aws_client(aws, "autoscaling").update_auto_scaling_group(
        AutoScalingGroupName=INFERENCE, MinSize=1, DesiredCapacity=1
    )

    assert invoke("park", "--now", "--yes", "--stack", STACK, "--project-dir", str(project)).exit_code == 0
    assert capacity(aws, INFERENCE) == (0, 0, 3)
    assert invoke("unpark", "--now", "--yes", "--stack", STACK, "--project-dir", str(project)).exit_code == 0
    assert capacity(aws, INFERENCE) == (1, 2, 3)  # what it was before the first park, not the zeros


def test_dry_run_changes_nothing_and_lists_the_plan(aws: str, fleet: Any, project: Path) -> None:
    result = invoke(
        "park", "--now", "--dry-run", "--stack", STACK, "--project-dir", str(project), "-o", "json"
    )

    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["dry_run"] is True
    planned = {action["name"] for action in report["actions"] if action["status"] == "planned"}
    green = names.ecs_service(names.INFERENCE_SERVICE, "green")  # already at 0: only its record is planned
    assert planned == {
        names.park_parameter(STACK),
        GROUP,
        NIGHTLY,
        TRAINING,
        INFERENCE,
        names.CONTROL_PLANE_SERVICE,
        BLUE,
        green,
    }
    assert REAPER not in {action["name"] for action in report["actions"]}
    assert snapshot(aws) == UNPARKED
    assert group_tag(aws, TRAINING, tags.PARKED_CAPACITY) is None


def test_one_groups_api_error_is_reported_and_the_rest_still_park(
    aws: str, fleet: Any, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FaultProxy(aws) as proxy:
        proxy.fail(
            "UpdateAutoScalingGroup",
            "AccessDenied",
            "not authorized to update this group",
            status=403,
            matches=lambda request: f"AutoScalingGroupName={TRAINING}" in request.text,
        )
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)

        result = invoke(
            "park", "--now", "--yes", "--stack", STACK, "--project-dir", str(project), "-o", "json"
        )

    assert result.exit_code == 1
    report = json.loads(result.stdout)
    failed = [action for action in report["actions"] if action["status"] == "failed"]
    assert [(action["name"], "AccessDenied" in action["error"]) for action in failed] == [(TRAINING, True)]
    assert capacity(aws, TRAINING) == (0, 1, 2)
    # The record went in before the failed scale-down, so a later park or unpark still knows the truth.
    assert capacities_recorded(aws, TRAINING) == {
        "min": 0,
        "desired": 1,
        "max": 2,
    }
    assert snapshot(aws) | {"training": None} == PARKED | {"training": None}


def test_a_record_that_cannot_be_written_does_not_stop_the_scale_down(
    aws: str, fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FaultProxy(aws) as proxy:
        proxy.fail("CreateOrUpdateTags", "AccessDenied", "no tagging for you", status=403)
        clients = _clients_through(proxy.url)

        result = park_now(STACK, region=REGION, clients=clients, dry_run=False, config_parked=False)

    failed = {action.name: action.error or "" for action in result.failed}
    assert set(failed) == {TRAINING, INFERENCE}
    assert "could not record" in failed[INFERENCE]
    assert '"desired":2' in failed[INFERENCE]
    assert capacity(aws, INFERENCE) == (0, 0, 3)


def test_two_engineers_parking_at_once_never_record_zeros(aws: str, fleet: Any) -> None:
    clients = _clients_through(aws)
    barrier = threading.Barrier(2)
    results: list[Any] = []

    def park() -> None:
        barrier.wait()
        results.append(park_now(STACK, region=REGION, clients=clients, dry_run=False, config_parked=True))

    threads = [threading.Thread(target=park) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(results) == 2
    assert capacities_recorded(aws, INFERENCE) == {
        "min": 1,
        "desired": 2,
        "max": 3,
    }
    assert capacity(aws, INFERENCE) == (0, 0, 3)


def test_unpark_now_without_records_leaves_everything_and_says_so(
    aws: str, fleet: Any, project: Path
) -> None:
    result = invoke("unpark", "--now", "--yes", "--stack", STACK, "--project-dir", str(project), "-o", "json")

    assert result.exit_code == 0
    statuses = {action["name"]: action["status"] for action in json.loads(result.stdout)["actions"]}
    assert statuses[TRAINING] == statuses[INFERENCE] == statuses[NIGHTLY] == "skipped"
    assert statuses[names.park_parameter(STACK)] == "unchanged"
    assert snapshot(aws) == UNPARKED


def test_a_hand_edited_record_is_reported_not_guessed(aws: str, fleet: Any, project: Path) -> None:
    assert invoke("park", "--now", "--yes", "--stack", STACK, "--project-dir", str(project)).exit_code == 0
    aws_client(aws, "autoscaling").create_or_update_tags(
        Tags=[
            {
                "ResourceId": INFERENCE,
                "ResourceType": "auto-scaling-group",
                "Key": tags.PARKED_CAPACITY,
                "Value": "two please",
                "PropagateAtLaunch": False,
            }
        ]
    )

    result = invoke("unpark", "--now", "--yes", "--stack", STACK, "--project-dir", str(project), "-o", "json")

    assert result.exit_code == 1
    failed = [a for a in json.loads(result.stdout)["actions"] if a["status"] == "failed"]
    assert [(a["name"], "unreadable record" in a["error"]) for a in failed] == [(INFERENCE, True)]
    assert capacity(aws, INFERENCE) == (0, 0, 3)
    assert capacity(aws, TRAINING) == (0, 1, 2)
    # Not everything came back, so the stack stays parked where the launcher and the schedules look.
    assert parameter(aws, names.park_parameter(STACK)) == "true"
    assert schedule(aws, GROUP, NIGHTLY)["State"] == "DISABLED"
    held = {a["name"]: a for a in json.loads(result.stdout)["actions"] if a["status"] == "skipped"}
    assert "not restored" in held[names.park_parameter(STACK)]["error"]


def test_unpark_now_shows_capacities_changed_since_parking_and_restores_them_only_with_force(
    aws: str, fleet: Any, project: Path
) -> None:
    assert invoke("park", "--now", "--yes", "--stack", STACK, "--project-dir", str(project)).exit_code == 0
    # Someone raised the inference pool's max by hand while it was parked.
    aws_client(aws, "autoscaling").update_auto_scaling_group(AutoScalingGroupName=INFERENCE, MaxSize=8)

    held = invoke("unpark", "--now", "--yes", "--stack", STACK, "--project-dir", str(project), "-o", "json")

    assert held.exit_code == 1
    actions = {a["name"]: a for a in json.loads(held.stdout)["actions"]}
    assert actions[INFERENCE]["status"] == "drift"
    assert "max 3→8" in actions[INFERENCE]["error"]
    assert capacity(aws, INFERENCE) == (0, 0, 8)  # the hand-made change is kept
    assert capacity(aws, TRAINING) == (0, 1, 2)  # what did not drift came back
    assert parameter(aws, names.park_parameter(STACK)) == "true"
    assert schedule(aws, GROUP, NIGHTLY)["State"] == "DISABLED"

    forced = invoke(
        "unpark", "--now", "--yes", "--force", "--stack", STACK, "--project-dir", str(project), "-o", "json"
    )

    assert forced.exit_code == 0, forced.output
    assert snapshot(aws) == UNPARKED


def test_at_a_terminal_unpark_now_shows_the_drift_and_asks_before_restoring_over_it(
    aws: str, fleet: Any, project: Path
) -> None:
    assert invoke("park", "--now", "--yes", "--stack", STACK, "--project-dir", str(project)).exit_code == 0
    aws_client(aws, "autoscaling").update_auto_scaling_group(AutoScalingGroupName=INFERENCE, MaxSize=8)
    process, controller = on_terminal(["unpark", "--now", "--stack", STACK, "--project-dir", str(project)])

    asked = read_until(controller, b"Restore the recorded capacities over them? [y/N]")
    assert b"drift" in asked
    assert b"max 3\xe2\x86\x928" in asked  # max 3→8, as the table shows it
    os.write(controller, b"y\n")
    confirmed = read_until(controller, b"now, as listed? [y/N]")
    assert b"as listed?" in confirmed, confirmed.decode(errors="replace")
    os.write(controller, b"y\n")
    process.wait(timeout=WAIT_SECONDS)
    os.close(controller)

    assert process.returncode == 0
    assert snapshot(aws) == UNPARKED


def test_force_goes_only_with_unpark_now(aws: str, fleet: Any, project: Path) -> None:
    result = invoke("park", "--now", "--force", "--yes", "--stack", STACK, "--project-dir", str(project))
    assert result.exit_code == 2
    assert "--force goes with unpark --now" in result.output


def test_unknown_stack_is_a_clear_error(aws: str, fleet: Any, project: Path) -> None:
    result = CliRunner().invoke(
        parkbrake, ["park", "--now", "--yes", "--stack", "nosuch", "--region", REGION]
    )

    assert result.exit_code == 2
    assert "found nothing of stack 'nosuch'" in result.output
    assert "Traceback" not in result.output


def test_no_credentials_is_a_clear_error_without_traceback(
    aws: str, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # The same server by another name: clients are cached per endpoint, and this one must be new.
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws.replace("127.0.0.1", "localhost"))

    result = CliRunner().invoke(
        parkbrake, ["park", "--now", "--yes", "--stack", STACK, "--project-dir", str(project)]
    )

    assert result.exit_code == 1
    assert "no AWS credentials found" in result.output
    assert isinstance(result.exception, SystemExit)


def test_an_endpoint_that_does_not_answer_is_a_clear_error(
    aws: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed_port = unused.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port}")

    result = CliRunner().invoke(
        parkbrake, ["park", "--now", "--yes", "--stack", STACK, "--project-dir", str(project)]
    )

    assert result.exit_code == 1
    assert (
        f"cannot reach the AWS endpoint http://127.0.0.1:{closed_port} (connection refused) — "
        in result.output
    )
    assert isinstance(result.exception, SystemExit)


def test_now_refuses_to_act_without_a_terminal_or_yes(aws: str, fleet: Any, project: Path) -> None:
    result = CliRunner().invoke(parkbrake, ["park", "--now", "--stack", STACK, "--project-dir", str(project)])

    assert result.exit_code == 2
    assert "Refusing without --yes" in result.output
    assert snapshot(aws) == UNPARKED


def _clients_through(endpoint_url: str) -> ClientFactory:
    return client_factory(endpoint_url)
