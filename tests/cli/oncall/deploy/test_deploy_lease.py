"""Two deploys cannot collide: ``deploy``, ``rollback`` and ``deploy --abort`` hold the service's lease
in the stack's guardrails table (moto's DynamoDB), against the inference fleet of the deploy tests."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import boto3
import pytest

from cli.oncall.deploy.lease import DeployLease, DeployLocked
from lambdas.clients import RETRIES
from tests.aws_fault_proxy import FaultProxy
from tests.cli.oncall.deploy.deploy_steps import (
    assert_serving,
    invoke,
    lease_holder,
    lease_item,
    run_as_another,
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
)


@pytest.fixture
def fleet(aws: str, tmp_path: Path) -> InferenceFleet:
    return build_fleet(tmp_path / "project")


def test_a_second_deploy_rollback_or_abort_at_every_phase_boundary_exits_1_and_changes_nothing(
    fleet: InferenceFleet,
) -> None:
    scheduler = SimulatedScheduler(fleet)
    attempts: list[tuple[dict[str, int], int, int]] = []

    def second_deploys(clock: VirtualClock) -> None:
        weights = fleet.weights()
        if attempts and attempts[-1][0] == weights:
            return  # one set of attempts per traffic split: every phase boundary, not every poll
        before = (weights, fleet.desired("blue"), fleet.desired("green"))
        for command in (
            ["deploy", "inference", "--image", fleet.image("v2"), "--revision", OTHER_REVISION],
            ["rollback", "inference"],
            ["deploy", "inference", "--abort"],
        ):
            code, output = run_as_another(fleet, scheduler, clock, *command)
            assert code == 1, output
            assert f"holds it for deploy of {NEW_REVISION}" in output, output
            assert "Traceback" not in output
        # The second runs changed nothing, and the service always had a serving task.
        assert (fleet.weights(), fleet.desired("blue"), fleet.desired("green")) == before
        serving = [colour for colour, weight in weights.items() if weight > 0]
        assert all(fleet.desired(colour) >= 1 for colour in serving), (weights, before)
        attempts.append(before)

    clock = VirtualClock(scheduler, second_deploys)
    code, output = invoke(
        fleet,
        scheduler,
        clock,
        "--image",
        fleet.image("v1"),
        "--revision",
        NEW_REVISION,
        "--bake",
        "2m",
        "--yes",
    )

    assert code == 0, output
    assert_serving(fleet, "green", NEW_REVISION)
    splits = [weights for weights, _blue, _green in attempts]
    # Before the canary, during it and after the switch: each boundary saw the second runs refused.
    assert {"blue": 100, "green": 0} in splits
    assert {"blue": 90, "green": 10} in splits
    assert {"blue": 0, "green": 100} in splits
    assert lease_holder(fleet) is None  # released at the end


def test_an_expired_lease_is_named_and_taken_over_with_steal_lock(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    clock = VirtualClock(scheduler)
    gone = DeployLease(
        fleet.clients.dynamodb, stack=STACK, service="inference", operation="deploy", revision="deadbee",
        now=lambda: clock.now() - timedelta(hours=1), holder="bob@laptop (pid 7)",
    )  # fmt: skip
    gone.acquire()  # and then the laptop closed: never renewed, never released

    code, output = invoke(
        fleet, scheduler, clock, "--image", fleet.image("v1"), "--revision", NEW_REVISION, "--yes"
    )
    assert code == 1
    assert "bob@laptop (pid 7) holds it for deploy of deadbee" in output
    assert "--steal-lock" in output
    assert_serving(fleet, "blue", OLD_REVISION)

    code, output = invoke(
        fleet, scheduler, clock, "--image", fleet.image("v1"), "--revision", NEW_REVISION, "--bake", "2m",
        "--steal-lock", "--yes",
    )  # fmt: skip
    assert code == 0, output
    assert_serving(fleet, "green", NEW_REVISION)
    assert lease_holder(fleet) is None


def test_steal_lock_never_takes_a_lease_that_is_still_renewed(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    clock = VirtualClock(scheduler)
    live = DeployLease(
        fleet.clients.dynamodb, stack=STACK, service="inference", operation="rollback", revision=OLD_REVISION,
        now=clock.now, holder="ana@desk (pid 9)",
    )  # fmt: skip
    live.acquire()

    code, output = invoke(fleet, scheduler, clock, "--abort", "--steal-lock", "--yes")

    assert code == 1
    assert "ana@desk (pid 9) holds it for rollback" in output
    assert "will not take it" in output
    assert lease_holder(fleet) == "ana@desk (pid 9)"


def test_without_yes_taking_over_asks_and_refuses_with_no_terminal(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    clock = VirtualClock(scheduler)
    DeployLease(
        fleet.clients.dynamodb, stack=STACK, service="inference", operation="deploy", revision="deadbee",
        now=lambda: clock.now() - timedelta(hours=1), holder="bob@laptop (pid 7)",
    ).acquire()  # fmt: skip
    lease = DeployLease(fleet.clients.dynamodb, stack=STACK, service="inference", operation="deploy",
                        revision=NEW_REVISION, now=clock.now)  # fmt: skip
    asked: list[str] = []

    def refuse(question: str) -> None:
        asked.append(question)
        raise DeployLocked("refused")

    with pytest.raises(DeployLocked, match="refused"):
        lease.acquire(steal=True, confirm=refuse)
    assert "Take over the expired lease on inference?" in asked[0]
    assert lease_holder(fleet) == "bob@laptop (pid 7)"


def test_a_ctrl_c_releases_the_lease_so_the_same_command_resumes(fleet: InferenceFleet) -> None:
    from tests.cli.oncall.deploy.deploy_steps import CtrlCDuringBake

    scheduler = SimulatedScheduler(fleet)
    code, _output = invoke(
        fleet, scheduler, VirtualClock(scheduler, CtrlCDuringBake()), "--image", fleet.image("v1"),
        "--revision", NEW_REVISION, "--yes",
    )  # fmt: skip
    assert code == 130
    assert lease_holder(fleet) is None


@pytest.mark.parametrize("lapsed_holder", [False, True], ids=["free", "stealing-a-lapsed-one"])
def test_many_takers_at_once_exactly_one_wins(aws: str, fleet: InferenceFleet, lapsed_holder: bool) -> None:
    """Threads racing for the lease through the real API: the conditional write lets exactly one in, and
    the fence goes up by one. DynamoDB applies a conditional write to an item atomically ("Condition
    expressions", DynamoDB Developer Guide); moto's backend takes no lock, so the racers' requests reach it
    through a proxy that hands it one at a time (tests/aws_fault_proxy.py), while they still overlap."""
    clock = VirtualClock(SimulatedScheduler(fleet))
    if lapsed_holder:
        DeployLease(
            fleet.clients.dynamodb, stack=STACK, service="inference", operation="deploy", revision="deadbee",
            now=lambda: clock.now() - timedelta(hours=1), holder="bob@laptop (pid 7)",
        ).acquire()  # fmt: skip
    start = threading.Barrier(6)
    won: list[str] = []
    refused: list[str] = []

    def take(name: str, dynamodb: object) -> None:
        lease = DeployLease(dynamodb, stack=STACK, service="inference", operation="deploy",
                            revision=name, now=clock.now, holder=name)  # fmt: skip
        start.wait()
        try:
            lease.acquire(steal=lapsed_holder)
        except DeployLocked as error:
            refused.append(str(error))
        else:
            won.append(name)

    with FaultProxy(aws, serial_upstream=True) as proxy:
        dynamodb = boto3.client("dynamodb", endpoint_url=proxy.url, config=RETRIES)
        threads = [threading.Thread(target=take, args=(f"run-{n}", dynamodb)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert len(won) == 1
    assert len(refused) == 5
    assert all(f"{won[0]} holds it" in message for message in refused)
    assert lease_item(fleet)["fence"] == {"N": "2" if lapsed_holder else "1"}
