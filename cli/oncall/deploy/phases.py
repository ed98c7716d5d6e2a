"""Where a blue-green deploy stands: what it reads from AWS, and the phase that follows from it.

A deploy never keeps its own state. Before every step it observes the listener weights, each
colour's desired count and task definition (with its revision label), and the surge mark on the GPU
pool, and :func:`classify` names the phase from that alone; see ``cli/oncall/deploy/blue_green.py`` for the steps.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from cli.oncall.deploy.revision_checks import RevisionReport
from cli.oncall.deploy.revisions import ResolvedImage
from cli.oncall.deploy.surge_host import SurgeMark
from cli.oncall.ecs import Rollout, TaskDefinitionFacts
from cli.oncall.stack_file import ConfigEdit, read_config_value
from guardrails import names
from guardrails.errors import InputError, ParkbrakeError


class Phase(StrEnum):
    READY = "ready"
    STARTING = "starting"
    CANARY = "canary"
    SHIFTED = "shifted"
    DONE = "done"
    FOREIGN = "foreign"


@dataclass(frozen=True)
class DeployTarget:
    """Where a service lives: from the stack's names and its ``Pulumi.<stack>.yaml``."""

    stack: str
    service: str
    pool: str
    stack_file: Path

    @classmethod
    def from_stack_file(cls, stack: str, service: str, stack_file: Path) -> DeployTarget:
        pool = read_config_value(stack_file, f"parkbrake:{service}.pool")
        if not isinstance(pool, str):
            raise InputError(
                f"{stack_file.name} has no parkbrake:{service}.pool; is {service} a blue-green service?"
            )
        return cls(stack, service, pool, stack_file)

    @property
    def cluster(self) -> str:
        return names.ecs_cluster(self.stack)

    @property
    def autoscaling_group(self) -> str:
        return names.autoscaling_group(self.stack, self.pool)

    @property
    def live_colour_key(self) -> str:
        return f"parkbrake:{self.service}.live_colour"


@dataclass(frozen=True)
class DeployRequest:
    target: DeployTarget
    image: ResolvedImage
    revision: str
    canary_percent: int
    bake: timedelta
    timeout: timedelta


@dataclass(frozen=True)
class ColourState:
    colour: str
    service: str
    desired: int
    task_definition: TaskDefinitionFacts  # what the service is set to run
    rollout: Rollout

    @property
    def revision(self) -> str | None:
        return self.task_definition.revision_label


@dataclass(frozen=True)
class Observation:
    weights: dict[str, int]
    colours: dict[str, ColourState]
    surge: SurgeMark


@dataclass(frozen=True)
class Situation:
    phase: Phase
    old: str  # the colour serving the previous revision: where a rollback sends traffic
    new: str  # the colour that carries (or will carry) the revision being deployed


def classify(observation: Observation, revision: str) -> Situation:
    """Where a deploy of ``revision`` stands, from what AWS reports now."""
    weights, colours = observation.weights, observation.colours
    if sum(weights.values()) <= 0:
        raise ParkbrakeError("the listener sends no traffic to either colour; fix it before deploying")
    first, second = names.COLOURS
    if all(weights.values()):
        canary = min(
            names.COLOURS, key=lambda colour: (weights[colour], colours[colour].revision != revision)
        )
        live = second if canary == first else first
        phase = Phase.CANARY if colours[canary].revision == revision else Phase.FOREIGN
        return Situation(phase, old=live, new=canary)
    live = first if weights[first] else second
    idle = second if live == first else first
    if colours[live].revision == revision:
        return Situation(Phase.SHIFTED if colours[idle].desired else Phase.DONE, old=idle, new=live)
    if not colours[live].desired:
        raise ParkbrakeError(
            f"{colours[live].service} takes the traffic but has no tasks: is the stack parked?"
        )
    if colours[idle].desired:
        phase = Phase.STARTING if colours[idle].revision == revision else Phase.FOREIGN
        return Situation(phase, old=live, new=idle)
    return Situation(Phase.READY, old=live, new=idle)


@dataclass
class DeployResult:
    service: str
    revision: str
    image: str
    outcome: str = "dry-run"  # deployed, already-serving, rolled-back, verify-failed, dry-run
    phase: str = ""  # where the deploy found the service
    old_colour: str = ""
    new_colour: str = ""
    reason: str = ""
    steps: list[str] = field(default_factory=list)
    task_definition: str | None = None
    deployment_before: str | None = None
    deployment_after: str | None = None
    verification: RevisionReport | None = None
    config_edit: ConfigEdit | None = None
    rollback_errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.outcome in ("deployed", "already-serving", "dry-run")

    def as_json(self) -> dict[str, Any]:
        document = asdict(self)
        document["verification"] = self.verification.as_json() if self.verification else None
        document["config_edit"] = (
            {
                "path": str(self.config_edit.path),
                "key": self.config_edit.key,
                "changed": self.config_edit.changed,
            }
            if self.config_edit
            else None
        )
        return json.loads(json.dumps(document, default=str))
