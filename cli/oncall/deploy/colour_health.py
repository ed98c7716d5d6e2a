"""Whether a colour of a blue-green service is up, healthy and running the revision being deployed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cli.oncall.deploy.elb import healthy_targets
from cli.oncall.deploy.runtime import ServiceAt
from cli.oncall.deploy.surge_host import POLL_SECONDS
from cli.oncall.ecs import TaskDefinitionFacts, describe_service, task_definition_facts
from guardrails.durations import format_duration
from guardrails.plurals import counted


class DeployFailure(Exception):
    """A step failed; the deploy rolls back."""


@dataclass(frozen=True)
class Health:
    ready: bool
    healthy: int
    desired: int
    detail: str


class ColourHealth:
    """Reads one colour's PRIMARY deployment and target health; waits for it, or while it holds."""

    def __init__(self, at: ServiceAt) -> None:
        self.at = at
        self.deployment_before: str | None = None  # the PRIMARY deployment before this run's update
        self.expected_deployment: str | None = None  # the PRIMARY deployment this run's update created
        self._facts: dict[str, TaskDefinitionFacts] = {}

    def facts_of(self, arn: str, described: dict[str, Any]) -> TaskDefinitionFacts:
        if arn not in self._facts:  # a task definition never changes once registered
            container = next((lb.get("containerName") for lb in described.get("loadBalancers", [])), None)
            self._facts[arn] = task_definition_facts(self.at.clients.ecs, arn, container)
        return self._facts[arn]

    def health(self, colour: str, revision: str) -> Health:
        """Whether ``colour`` runs ``revision`` with every task up and healthy behind the load balancer.

        Raises :class:`DeployFailure` when ECS gave up on this run's deployment (FAILED, or replaced it
        with a rollback to another task definition): waiting longer cannot help.
        """
        at = self.at
        service = at.service(colour)
        described = describe_service(at.clients.ecs, at.target.cluster, service)
        desired = described["desiredCount"]
        healthy = healthy_targets(at.clients.elbv2, at.topology.target_groups[colour])
        primary = at.source.rollout(at.target.cluster, service).primary
        if primary is None:
            return Health(False, healthy, desired, "no PRIMARY deployment yet")
        facts = self.facts_of(primary.task_definition, described)
        expected = self.expected_deployment
        if expected is not None and primary.id == self.deployment_before:
            # ECS's reads are eventually consistent: the update's deployment is not listed yet.
            return Health(False, healthy, desired, f"waiting for ECS to list deployment {expected}")
        if (expected is not None and primary.id != expected) or facts.revision_label != revision:
            raise DeployFailure(
                f"ECS rolled {service} back: PRIMARY deployment {primary.id} runs {facts.name} "
                f"(revision {facts.revision_label or 'unlabelled'}). {primary.rollout_state_reason}".strip()
            )
        if primary.rollout_state == "FAILED":
            raise DeployFailure(
                f"ECS deployment {primary.id} of {service} FAILED: {primary.rollout_state_reason}"
            )
        detail = (
            f"deployment {primary.id} {primary.rollout_state}, {primary.running_count}/{desired} running, "
            f"{healthy}/{counted(desired, 'healthy target')}"
        )
        ready = (
            primary.rollout_state == "COMPLETED" and primary.running_count >= desired and healthy >= desired
        )
        return Health(ready and desired > 0, healthy, desired, detail)

    def await_healthy(self, colour: str, revision: str, timeout: timedelta) -> None:
        clock, progress = self.at.clock, self.at.progress
        deadline = clock.now() + timeout
        while True:
            health = self.health(colour, revision)
            progress.waiting(f"{colour}: healthy targets", health.healthy, health.desired)
            if health.ready:
                progress.step(f"{colour} is healthy: {health.detail}")
                return
            if clock.now() >= deadline:
                raise DeployFailure(
                    f"{colour} was not healthy within {format_duration(timeout)}: {health.detail}"
                )
            clock.sleep(POLL_SECONDS)

    def hold(self, colour: str, revision: str, duration: timedelta, label: str) -> None:
        """Wait ``duration`` while ``colour`` stays healthy on ``revision``; fail the moment it is not."""
        clock = self.at.clock
        started = clock.now()
        total = int(duration.total_seconds())
        while True:
            health = self.health(colour, revision)
            if not health.ready:
                raise DeployFailure(f"{colour} became unhealthy while {label}: {health.detail}")
            elapsed = int((clock.now() - started).total_seconds())
            self.at.progress.waiting(label, min(elapsed, total), total)
            if elapsed >= total:
                return
            clock.sleep(min(POLL_SECONDS, total - elapsed))
