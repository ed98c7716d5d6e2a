"""The revision's walk from ``parkbrake deploy`` to its first ECS write (``deploy_walk.py``): at most
:data:`MAX_STAYS` stays, and no file visited twice on the way down (issue 35).

Before the engine was laid out by phase and AWS service, the same walk took 15 stays in 6 files with
9 returns (``blue_green.py`` 4 times, ``colour_health.py`` 3); counting the lease's modules as stays
too (``walk(..., gate=frozenset())``), 37 stays in 12 files with 25 returns. Now: 8 stays in 8 files,
no return (27 stays in 15 files, 12 returns counting the lease, whose objects every step holds).
"""

from __future__ import annotations

from pathlib import Path

from tests.cli.oncall.deploy.deploy_steps import invoke
from tests.cli.oncall.deploy.deploy_walk import Walk, walk
from tests.cli.oncall.deploy.inference_fleet import (
    NEW_REVISION,
    SimulatedScheduler,
    VirtualClock,
    build_fleet,
)

MAX_STAYS = 20


def deploy_walk(project: Path) -> tuple[Walk, int]:
    fleet = build_fleet(project)
    scheduler = SimulatedScheduler(fleet)
    clock = VirtualClock(scheduler)
    outcome: list[int] = []

    def deploy() -> None:
        code, output = invoke(
            fleet, scheduler, clock, "--image", fleet.image("v1"), "--revision", NEW_REVISION, "--yes"
        )
        assert code == 0, output
        outcome.append(code)

    return walk(deploy, NEW_REVISION), outcome[0]


def test_the_revision_walks_down_to_its_first_ecs_write_without_coming_back(aws: str, tmp_path: Path) -> None:
    found, exit_code = deploy_walk(tmp_path / "project")

    print(found.text())
    assert exit_code == 0
    assert found.first_write == "RegisterTaskDefinition", found.text()
    assert found.calls[0] == ("cli/deploy.py", "deploy"), found.text()
    assert found.gate_crossings > 0, "the first write was not made under the deploy's lease"
    assert len(found.stays) <= MAX_STAYS, found.text()
    assert found.returns == [], found.text()
