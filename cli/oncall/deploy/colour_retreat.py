"""Putting a blue-green service back on its live colour: what a rollback and ``deploy --abort`` do.

All traffic to the live colour, the other colour to zero, the deploy's extra host out of the pool.
Each step is tried even when another fails, and each is a no-op when already done, so a retreat
can be repeated (after an interrupt, by another engineer) until it reports no errors.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from cli.oncall.deploy.lease import LeaseLost
from cli.oncall.deploy.revisions import describe_service
from cli.oncall.deploy.runtime import ServiceAt
from cli.oncall.deploy.surge_host import SurgeHost
from cli.oncall.deploy.traffic import forward_weights

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
        elbv2, topology = self.at.clients.elbv2, self.at.topology
        listener = elbv2.describe_listeners(ListenerArns=[topology.listener_arn])["Listeners"][0]
        forward = next(action for action in listener["DefaultActions"] if action["Type"] == "forward")
        stickiness = forward.get("ForwardConfig", {}).get("TargetGroupStickinessConfig", {"Enabled": False})
        current = forward_weights(listener)
        wanted = {topology.target_groups[colour]: weight for colour, weight in weights.items()}
        if all(current.get(arn) == weight for arn, weight in wanted.items()):
            return
        groups = [{"TargetGroupArn": arn, "Weight": weight} for arn, weight in wanted.items()]
        elbv2.modify_listener(
            ListenerArn=topology.listener_arn,
            DefaultActions=[
                {
                    "Type": "forward",
                    "ForwardConfig": {"TargetGroups": groups, "TargetGroupStickinessConfig": stickiness},
                }
            ],
        )
        self.at.progress.step(message)

    def scale_to_zero(self, colour: str) -> None:
        at = self.at
        service = at.service(colour)
        if not describe_service(at.clients.ecs, at.target.cluster, service)["desiredCount"]:
            return
        at.progress.step(f"Scaling {service} to zero")
        at.clients.ecs.update_service(cluster=at.target.cluster, service=service, desiredCount=0)

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
        if not instances:
            return set()
        described = at.clients.ecs.describe_container_instances(
            cluster=at.target.cluster, containerInstances=sorted(instances)
        )["containerInstances"]
        return {item["ec2InstanceId"] for item in described}
