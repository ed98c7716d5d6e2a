"""What a deploy, an abort and ``verify`` talk to, and what they share while they run.

The CLI builds the real :class:`Runtime` from the environment; tests hand theirs to the command
through click's ``obj`` (moto runs no ECS scheduler, so they bring a simulated one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cli.oncall.deploy.elb import Topology, find_topology
from cli.oncall.deploy.phases import DeployTarget
from cli.oncall.ecs import RolloutSource
from guardrails.clock import Clock
from guardrails.errors import ParkbrakeError


@dataclass(frozen=True)
class AwsClients:
    ecs: Any
    elbv2: Any
    autoscaling: Any
    ecr_in: Callable[[str], Any]  # region → ECR client (an image may live in another region)
    dynamodb: Any = None  # where the deploy lease lives; None: the environment's (cli/oncall/deploy/lease.py)

    @classmethod
    def from_environment(cls) -> AwsClients:
        from lambdas.clients import client

        return cls(
            client("ecs"),
            client("elbv2"),
            client("autoscaling"),
            lambda region: client("ecr", region),
            client("dynamodb"),
        )


@dataclass(frozen=True)
class Runtime:
    clients: AwsClients
    source: RolloutSource
    clock: Clock

    @classmethod
    def from_environment(cls) -> Runtime:
        from cli.oncall.ecs import EcsRolloutSource
        from guardrails.clock import SystemClock

        clients = AwsClients.from_environment()
        return cls(clients, EcsRolloutSource(clients.ecs), SystemClock())

    @classmethod
    def of(cls, context_object: object) -> Runtime:
        return context_object if isinstance(context_object, Runtime) else cls.from_environment()


class DeployProgress(Protocol):
    def step(self, message: str) -> None:
        """A step was taken (or is about to be)."""
        ...

    def waiting(self, label: str, done: int, total: int) -> None:
        """A wait is ``done`` of ``total`` along (targets healthy, seconds baked)."""
        ...


def no_lease(before: str) -> None:
    """A run holding no lease (a dry run, a test driving the steps itself) has nothing to confirm."""


@dataclass(frozen=True)
class ServiceAt:
    """One blue-green service where it runs, with everything a deploy step needs to act on it."""

    target: DeployTarget
    topology: Topology
    clients: AwsClients
    source: RolloutSource
    clock: Clock
    progress: DeployProgress
    # Called before a change outside AWS (the stack file); the run's AWS writes confirm the lease
    # themselves (cli/oncall/deploy/lease_guard.py).
    confirm_lease: Callable[[str], None] = no_lease

    @classmethod
    def find(cls, target: DeployTarget, runtime: Runtime, progress: DeployProgress) -> ServiceAt:
        clients = runtime.clients
        topology = find_topology(clients.ecs, clients.elbv2, target.cluster, target.service)
        if topology is None:
            raise ParkbrakeError(f"{target.service} is not a blue-green service: it has no colours")
        return cls(target, topology, clients, runtime.source, runtime.clock, progress)

    def service(self, colour: str) -> str:
        return self.topology.services[colour]
