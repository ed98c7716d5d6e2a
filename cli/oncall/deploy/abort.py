"""``parkbrake deploy --abort``: stop a deploy where it stands and put the service back on its live colour.

The live colour is found in AWS, like everything a deploy decides: when only one colour has tasks it
is that one; when both do, it is the one whose task definition was registered first (a deploy always
registers the new colour's task definition as a copy of the live one's, so the newer one is the
colour being deployed). Then the same retreat as a rollback: all traffic to the live colour, the
other colour to zero, the deploy's extra host out of the pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from cli.oncall.deploy.colour_retreat import FULL_WEIGHT, Retreat
from cli.oncall.deploy.elb import colour_weights
from cli.oncall.deploy.runtime import ServiceAt
from cli.oncall.ecs import describe_service
from guardrails import names
from guardrails.errors import ParkbrakeError
from guardrails.plurals import counted


@dataclass
class AbortResult:
    service: str
    live: str
    aborted: str
    dry_run: bool
    steps: list[str] = field(default_factory=list)  # what needed doing (done, or planned in a dry run)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        if not self.steps:
            return "nothing-to-abort"
        if self.dry_run:
            return "dry-run"
        return "failed" if self.errors else "aborted"

    def as_json(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "outcome": self.outcome,
            "live_colour": self.live,
            "aborted_colour": self.aborted,
            "dry_run": self.dry_run,
            "steps": self.steps,
            "errors": self.errors,
            "warnings": self.warnings,
        }


def abort_deploy(at: ServiceAt, timeout: timedelta, *, dry_run: bool) -> AbortResult:
    desired: dict[str, int] = {}
    registered: dict[str, int] = {}
    for colour in names.COLOURS:
        described = describe_service(at.clients.ecs, at.target.cluster, at.service(colour))
        desired[colour] = int(described["desiredCount"])
        registered[colour] = int(str(described["taskDefinition"]).rsplit(":", 1)[-1])
    running = [colour for colour in names.COLOURS if desired[colour]]
    if not running:
        raise ParkbrakeError(
            f"neither colour of {at.target.service} has tasks, so there is no live colour to return "
            "traffic to; is the stack parked?"
        )
    live = running[0] if len(running) == 1 else min(running, key=lambda colour: registered[colour])
    other = next(colour for colour in names.COLOURS if colour != live)
    retreat = Retreat(at, timeout)
    result = AbortResult(at.target.service, live, other, dry_run)
    result.steps = _needed(at, retreat, live, other, desired)
    if result.steps and not dry_run:
        at.confirm_lease("the retreat")
        result.errors = retreat.restore(live, other)
        result.warnings = retreat.warnings
    return result


def _needed(at: ServiceAt, retreat: Retreat, live: str, other: str, desired: dict[str, int]) -> list[str]:
    steps = []
    weights = colour_weights(at.clients.elbv2, at.topology)
    if weights[live] != FULL_WEIGHT or weights[other]:
        steps.append(f"send all traffic to {live} (now {live} {weights[live]}, {other} {weights[other]})")
    if desired[other]:
        steps.append(f"scale {at.service(other)} from {counted(desired[other], 'task')} to zero")
    if retreat.surge.mark().surged_to is not None:
        steps.append(f"remove the deploy's extra host from {at.target.autoscaling_group}")
    return steps
