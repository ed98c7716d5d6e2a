"""Putting a blue-green service back on its live colour: what a rollback and ``deploy --abort`` do.

All traffic to the live colour, the other colour to zero, the deploy's extra host out of the pool.
Each step is tried even when another fails, and each is a no-op when already done, so a retreat
can be repeated (after an interrupt, by another engineer) until it reports no errors.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from cli.oncall.deploy.elb import set_colour_weights
from cli.oncall.deploy.lease import LeaseLost
from cli.oncall.deploy.runtime import ServiceAt
from cli.oncall.deploy.surge_host import SurgeHost
from cli.oncall.ecs import container_hosts, describe_service, scale_service_to_zero

FULL_WEIGHT = 100


class Retreat:
    def __init__(self, at: ServiceAt, timeout: timedelta) -> None:
        self.at = at
        self.timeout = timeout  # how long to wait for a host to become idle, so it can go
        self.surge = SurgeHost(
            at.clients.autoscaling, at.target.autoscaling_group, at.clock, at.progress.step
        )
        self.warnings: list[str] = []

    def restore(self, live: str, other: str) -> list[str]:
        """All traffic to ``live``, ``other`` to zero, the extra host out; the errors of failed steps."""
        steps: list[Callable[[], None]] = [
            lambda: self.set_weights({live: FULL_WEIGHT, other: 0}, f"All traffic back to {live}"),
            lambda: self.scale_to_zero(other),
            self.remove_surge_host,
        ]
        errors = []
        for step in steps:
            try:
                step()
            except LeaseLost:
                raise  # another run holds the service now: no further step is this run's to take
            except Exception as error:
                errors.append(str(error) or type(error).__name__)
        return errors

    def set_weights(self, weights: dict[str, int], message: str) -> None:
        """The listener's default forward to these colour weights (stickiness kept); no call if so already."""
        if set_colour_weights(self.at.clients.elbv2, self.at.topology, weights):
            self.at.progress.step(message)

    def scale_to_zero(self, colour: str) -> None:
        at = self.at
        service = at.service(colour)
        if not describe_service(at.clients.ecs, at.target.cluster, service)["desiredCount"]:
            return
        at.progress.step(f"Scaling {service} to zero")
        scale_service_to_zero(at.clients.ecs, at.target.cluster, service)

    def remove_surge_host(self) -> None:
        warning = self.surge.remove(self.busy_hosts, self.timeout)
        if warning:
            self.warnings.append(warning)

    def busy_hosts(self) -> set[str]:
        """EC2 instances running a task of either colour."""
        at = self.at
        instances = {
            task.container_instance
            for service in at.topology.services.values()
            for task in at.source.rollout(at.target.cluster, service).tasks
            if task.container_instance
        }
        return container_hosts(at.clients.ecs, at.target.cluster, instances)
