"""What the deploy tests share: a deploy of the inference fleet on a virtual clock, the CLI invoked
against it, a Ctrl-C during the bake, and what "serving" means, read back from AWS."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from cli.oncall.deploy.blue_green import BlueGreenDeploy
from cli.oncall.deploy.lease import lease_key
from cli.oncall.deploy.phases import DeployRequest, DeployTarget
from cli.oncall.deploy.revisions import resolve_image
from cli.oncall.deploy.runtime import AwsClients, Runtime, ServiceAt
from guardrails import names
from tests.cli.oncall.deploy.inference_fleet import (
    NEW_REVISION,
    SERVICE,
    STACK,
    InferenceFleet,
    RecordedProgress,
    SimulatedScheduler,
    VirtualClock,
    runtime,
)

BAKE = timedelta(minutes=2)
TIMEOUT = timedelta(minutes=10)


def deployer(
    fleet: InferenceFleet,
    scheduler: SimulatedScheduler,
    clock: VirtualClock,
    *,
    revision: str = NEW_REVISION,
    tag: str = "v1",
    clients: AwsClients | None = None,
    progress: RecordedProgress | None = None,
) -> BlueGreenDeploy:
    clients = clients or fleet.clients
    request = DeployRequest(
        target=DeployTarget.from_stack_file(STACK, "inference", fleet.stack_file),
        image=resolve_image(fleet.image(tag), allow_tag=False, ecr_in=clients.ecr_in),
        revision=revision,
        canary_percent=10,
        bake=BAKE,
        timeout=TIMEOUT,
    )
    at = ServiceAt.find(request.target, Runtime(clients, scheduler, clock), progress or RecordedProgress())
    return BlueGreenDeploy(request, at)


def assert_serving(fleet: InferenceFleet, colour: str, revision: str) -> None:
    """All traffic on ``colour``, which runs ``revision`` with healthy targets; the other colour empty."""
    other = "green" if colour == "blue" else "blue"
    assert fleet.weights() == {colour: 100, other: 0}
    assert fleet.revision_of(colour) == revision
    assert fleet.desired(colour) == 1
    assert fleet.healthy_targets(colour) == 1
    assert fleet.desired(other) == 0


def assert_no_surge(fleet: InferenceFleet) -> None:
    group = fleet.group()
    assert group["DesiredCapacity"] == 1
    assert fleet.surge_mark() is None


def live_colour(fleet: InferenceFleet) -> str | None:
    from cli.oncall.stack_file import read_config_value

    value = read_config_value(fleet.stack_file, "parkbrake:inference.live_colour")
    return value if isinstance(value, str) else None


@dataclass
class CtrlCDuringBake:
    """Ctrl-C a minute into the bake (raised from the deploy's sleep, where a real one lands)."""

    bake_started: datetime | None = None

    def __call__(self, clock: VirtualClock) -> None:
        if self.bake_started is None and clock.scheduler.fleet.weights()["green"] == 10:
            self.bake_started = clock.now()
        if self.bake_started is not None and clock.now() - self.bake_started >= timedelta(minutes=1):
            raise KeyboardInterrupt


def interrupted(fleet: InferenceFleet, scheduler: SimulatedScheduler) -> None:
    with pytest.raises(KeyboardInterrupt):
        deployer(fleet, scheduler, VirtualClock(scheduler, CtrlCDuringBake())).run()
    # Interrupted, the service still serves: the canary split, both colours up and healthy.
    assert fleet.weights() == {"blue": 90, "green": 10}
    assert (fleet.desired("blue"), fleet.desired("green")) == (1, 1)
    assert (fleet.healthy_targets("blue"), fleet.healthy_targets("green")) == (1, 1)
    assert fleet.surge_mark() == "2"


def invoke(
    fleet: InferenceFleet, scheduler: SimulatedScheduler, clock: VirtualClock, *args: str
) -> tuple[int, str]:
    arguments = [
        "deploy",
        "inference",
        "--stack",
        STACK,
        "--project-dir",
        str(fleet.stack_file.parent),
        *args,
    ]
    outcome = CliRunner().invoke(parkbrake, arguments, obj=runtime(fleet, scheduler, clock))
    assert "Traceback" not in outcome.output
    return outcome.exit_code, outcome.output


def run_as_another(
    fleet: InferenceFleet, scheduler: SimulatedScheduler, clock: VirtualClock, *args: str
) -> tuple[int, str]:
    """Another engineer's run, at the same moment as ``clock`` (its own clock reads that time), with
    ``--yes``: ``args`` are the command, the service and its options."""
    theirs = VirtualClock(scheduler)
    theirs.current = clock.now()
    command, service, *rest = args
    arguments = [command, service, "--stack", STACK, "--project-dir", str(fleet.stack_file.parent), "--yes"]
    outcome = CliRunner().invoke(parkbrake, [*arguments, *rest], obj=runtime(fleet, scheduler, theirs))
    return outcome.exit_code, outcome.output


def lease_item(fleet: InferenceFleet) -> dict[str, Any]:
    """The service's lease item in the stack's guardrails table ({} when there is none)."""
    found = fleet.clients.dynamodb.get_item(
        TableName=names.notices_table(STACK), Key={"notice": {"S": lease_key(SERVICE)}}, ConsistentRead=True
    )
    item: dict[str, Any] = found.get("Item", {})
    return item


def lease_holder(fleet: InferenceFleet) -> str | None:
    """Who holds the service's lease now; None when nobody does (never taken, or released)."""
    holder = lease_item(fleet).get("holder")
    return str(holder["S"]) if holder else None
