"""Blue-green deploys: a service with two colours behind one weighted ALB listener.

The deploy is a small state machine whose state is read from AWS before every step (listener
weights, each colour's desired count, task definition and revision label, the surge mark on the GPU
pool), never from local files. So an interrupted deploy (Ctrl-C, a lost terminal) leaves a state
that serves, and the next ``parkbrake deploy`` resumes it or rolls it back from what it finds:

    READY     all traffic on the old colour, the idle colour empty  → register, surge, start new colour
    STARTING  the new colour runs SHA and takes no traffic          → wait for healthy targets, canary
    CANARY    the canary share goes to the new colour               → bake, then send it everything
    SHIFTED   all traffic on SHA, the old colour still up           → verify, drain, scale old to zero
    DONE      all traffic on SHA, the old colour at zero            → remove surge host, flip live_colour
    FOREIGN   another revision is half-deployed on the idle colour  → roll it back first

Any failure before the old colour is scaled in rolls back: all traffic to the old colour, the new
colour to zero, the surge host removed. Verification runs while the old colour still has its tasks,
so a failed verify is as cheap to undo as a failed health check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from cli.oncall.deploy_phases import (
    ColourState,
    DeployRequest,
    DeployResult,
    Observation,
    Phase,
    Situation,
    classify,
)
from cli.oncall.revisions import (
    RevisionReport,
    RolloutSource,
    TaskDefinitionFacts,
    Topology,
    check_service,
    colour_weights,
    describe_service,
    find_topology,
    forward_weights,
    task_definition_facts,
)
from cli.oncall.stack_file import set_config_value
from cli.oncall.surge_host import POLL_SECONDS, SurgeHost
from guardrails import names, tags
from guardrails.clock import Clock
from guardrails.durations import format_duration
from guardrails.errors import ParkbrakeError

# The variable the container reads its revision from (e.g. to answer /version).
REVISION_ENVIRONMENT = "PARKBRAKE_REVISION"
FULL_WEIGHT = 100
# READY → STARTING → CANARY → SHIFTED → DONE, after at most one FOREIGN rollback: more means a loop.
MAX_STEPS = 8
# Where each phase starts in the list of steps a dry run prints.
FIRST_STEP = {
    Phase.FOREIGN: 0,
    Phase.READY: 0,
    Phase.STARTING: 3,
    Phase.CANARY: 4,
    Phase.SHIFTED: 5,
    Phase.DONE: 7,
}
# What RegisterTaskDefinition takes back from DescribeTaskDefinition (besides the containers and tags).
TASK_DEFINITION_FIELDS = (
    "family",
    "taskRoleArn",
    "executionRoleArn",
    "networkMode",
    "volumes",
    "placementConstraints",
    "requiresCompatibilities",
    "cpu",
    "memory",
    "pidMode",
    "ipcMode",
    "proxyConfiguration",
    "inferenceAccelerators",
    "ephemeralStorage",
    "runtimePlatform",
)


class DeployFailure(Exception):
    """A step failed; the deploy rolls back."""


@dataclass(frozen=True)
class AwsClients:
    ecs: Any
    elbv2: Any
    autoscaling: Any
    ecr_in: Callable[[str], Any]  # region → ECR client (an image may live in another region)

    @classmethod
    def from_environment(cls) -> AwsClients:
        from lambdas.aws.clients import client

        return cls(
            client("ecs"), client("elbv2"), client("autoscaling"), lambda region: client("ecr", region)
        )


@dataclass(frozen=True)
class Runtime:
    """What ``deploy`` and ``verify`` talk to. The CLI builds the real one; tests hand theirs to
    the command through click's ``obj`` (moto has no ECS scheduler, so they bring a simulated one)."""

    clients: AwsClients
    source: RolloutSource
    clock: Clock

    @classmethod
    def from_environment(cls) -> Runtime:
        from cli.oncall.revisions import EcsRolloutSource
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


@dataclass(frozen=True)
class Health:
    ready: bool
    healthy: int
    desired: int
    detail: str


class BlueGreenDeploy:
    """One ``parkbrake deploy``: observe, classify, take the phase's step, repeat until DONE."""

    def __init__(
        self,
        request: DeployRequest,
        clients: AwsClients,
        source: RolloutSource,
        clock: Clock,
        progress: DeployProgress,
    ) -> None:
        self.request = request
        self.target = request.target
        self.clients = clients
        self.source = source
        self.clock = clock
        self.progress = progress
        topology = find_topology(clients.ecs, clients.elbv2, self.target.cluster, self.target.service)
        if topology is None:
            raise ParkbrakeError(f"{self.target.service} is not a blue-green service: it has no colours")
        self.topology: Topology = topology
        self.result = DeployResult(self.target.service, request.revision, request.image.image)
        self._facts: dict[str, TaskDefinitionFacts] = {}
        self._expected_deployment: str | None = None  # the PRIMARY deployment this run's update created
        self._may_roll_back = True
        self.surge = SurgeHost(clients.autoscaling, self.target.autoscaling_group, clock, progress.step)

    # -- the machine ---------------------------------------------------------------------------------

    def plan(self) -> DeployResult:
        """What a deploy would do from here, changing nothing (``--dry-run``)."""
        situation = self._situate(self.observe())
        self.result.steps = self._remaining_steps(situation)
        return self.result

    def run(self) -> DeployResult:
        situation: Situation | None = None
        try:
            for _ in range(MAX_STEPS):
                observation = self.observe()
                situation = self._situate(observation)
                if situation.phase is Phase.DONE:
                    return self._finish(situation)
                self._advance(observation, situation)
            raise DeployFailure(f"the deploy did not settle after {MAX_STEPS} steps")
        except Exception as error:
            if situation is None or not self._may_roll_back:
                raise
            self._roll_back(situation, error)
            if not isinstance(error, DeployFailure | ParkbrakeError) and not _is_aws_error(error):
                raise
            return self.result

    def observe(self) -> Observation:
        weights = colour_weights(self.clients.elbv2, self.topology)
        colours = {colour: self._colour_state(colour) for colour in names.COLOURS}
        return Observation(weights, colours, self.surge.mark())

    def _situate(self, observation: Observation) -> Situation:
        situation = classify(observation, self.request.revision)
        if not self.result.phase:
            self.result.phase = situation.phase.value
        self.result.old_colour, self.result.new_colour = situation.old, situation.new
        return situation

    def _advance(self, observation: Observation, situation: Situation) -> None:
        old, new = situation.old, situation.new
        if situation.phase is Phase.FOREIGN:
            stale = observation.colours[new].revision or "an unlabelled revision"
            self.progress.step(f"Rolling back the half-done deploy of {stale} on {new}")
            errors = self._restore(situation)
            if errors:
                raise ParkbrakeError(f"could not roll back the deploy of {stale}: {'; '.join(errors)}")
        elif situation.phase is Phase.READY:
            self._start(observation, situation)
        elif situation.phase is Phase.STARTING:
            self._await_healthy(new)
            share = self.request.canary_percent
            self._set_weights({old: FULL_WEIGHT - share, new: share}, f"Canary: {share}% of traffic to {new}")
        elif situation.phase is Phase.CANARY:
            self._hold(new, self.request.bake, f"baking the {observation.weights[new]}% canary on {new}")
            self._set_weights({old: 0, new: FULL_WEIGHT}, f"All traffic to {new}")
        elif situation.phase is Phase.SHIFTED:
            report = self._verify(new)
            if not report.passed:
                raise DeployFailure("verification failed: " + "; ".join(c.detail for c in report.failures))
            self._hold(new, self._drain_time(old), f"draining {old}")
            self._retire(old)

    # -- steps ---------------------------------------------------------------------------------------

    def _start(self, observation: Observation, situation: Situation) -> None:
        live, idle = observation.colours[situation.old], observation.colours[situation.new]
        surge = observation.surge
        if not surge.room:
            raise ParkbrakeError(
                f"{self.target.autoscaling_group} is at its max ({surge.maximum}), so no host can be added "
                f"for the new colour; raise pools.{self.target.pool}.max"
            )
        definition = self._register(live.task_definition)
        self.result.task_definition = definition
        self.surge.add(surge)
        self.progress.step(f"Starting {idle.service}: {live.desired} task(s) of {self.request.revision}")
        answer = self.clients.ecs.update_service(
            cluster=self.target.cluster,
            service=idle.service,
            taskDefinition=definition,
            desiredCount=live.desired,
            capacityProviderStrategy=[
                {
                    "capacityProvider": names.capacity_provider(self.target.stack, self.target.pool),
                    "weight": 1,
                }
            ],
            forceNewDeployment=True,
        )
        primary = next(
            (d for d in answer["service"].get("deployments", []) if d["status"] == "PRIMARY"), None
        )
        before = idle.rollout.primary
        self.result.deployment_before = before.id if before else None
        self.result.deployment_after = self._expected_deployment = primary["id"] if primary else None

    def _register(self, serving: TaskDefinitionFacts) -> str:
        """A copy of the serving task definition, its image pinned and labelled with the revision."""
        answer = self.clients.ecs.describe_task_definition(taskDefinition=serving.arn, include=["TAGS"])
        template = answer["taskDefinition"]
        containers = [
            self._pinned(container) if container["name"] == serving.container else container
            for container in template["containerDefinitions"]
        ]
        revision_tag = {"key": tags.REVISION, "value": self.request.revision}
        labels = [item for item in answer.get("tags", []) if item["key"] != tags.REVISION]
        registered = self.clients.ecs.register_task_definition(
            **{key: template[key] for key in TASK_DEFINITION_FIELDS if key in template},
            containerDefinitions=containers,
            tags=[*labels, revision_tag],
        )["taskDefinition"]
        name = f"{registered['family']}:{registered['revision']}"
        self.progress.step(f"Registered {name}: {self.request.image.image}")
        return str(registered["taskDefinitionArn"])

    def _pinned(self, container: dict[str, Any]) -> dict[str, Any]:
        """The serving container on the pinned image, its label and environment naming the revision."""
        revision = self.request.revision
        environment = [
            item for item in container.get("environment", []) if item["name"] != REVISION_ENVIRONMENT
        ]
        return {
            **container,
            "image": self.request.image.image,
            "dockerLabels": {**container.get("dockerLabels", {}), names.CONTAINER_REVISION_LABEL: revision},
            "environment": [*environment, {"name": REVISION_ENVIRONMENT, "value": revision}],
        }

    def _await_healthy(self, colour: str) -> None:
        deadline = self.clock.now() + self.request.timeout
        while True:
            health = self._health(colour)
            self.progress.waiting(f"{colour}: healthy targets", health.healthy, health.desired)
            if health.ready:
                self.progress.step(f"{colour} is healthy: {health.detail}")
                return
            if self.clock.now() >= deadline:
                raise DeployFailure(
                    f"{colour} was not healthy within {format_duration(self.request.timeout)}: {health.detail}"
                )
            self.clock.sleep(POLL_SECONDS)

    def _hold(self, colour: str, duration: timedelta, label: str) -> None:
        """Wait ``duration`` while ``colour`` stays healthy; fail the moment it is not."""
        started = self.clock.now()
        total = int(duration.total_seconds())
        while True:
            health = self._health(colour)
            if not health.ready:
                raise DeployFailure(f"{colour} became unhealthy while {label}: {health.detail}")
            elapsed = int((self.clock.now() - started).total_seconds())
            self.progress.waiting(label, min(elapsed, total), total)
            if elapsed >= total:
                return
            self.clock.sleep(min(POLL_SECONDS, total - elapsed))

    def _verify(self, colour: str) -> RevisionReport:
        checks = check_service(
            self.clients.ecs,
            self.source,
            self.target.cluster,
            self.topology.services[colour],
            self.request.revision,
            expected_digest=self.request.image.digest,
            expected_deployment=self._expected_deployment,
        )
        report = RevisionReport(self.target.service, self.request.revision, tuple(checks))
        self.result.verification = report
        return report

    def _retire(self, colour: str) -> None:
        """Scale the old colour in; from here on the old revision cannot take traffic back at once."""
        self._may_roll_back = False
        service = self.topology.services[colour]
        self.progress.step(f"Scaling {service} to zero")
        self.clients.ecs.update_service(cluster=self.target.cluster, service=service, desiredCount=0)
        deadline = self.clock.now() + self.request.timeout
        initially = len(self.source.rollout(self.target.cluster, service).tasks)
        while running := len(self.source.rollout(self.target.cluster, service).tasks):
            self.progress.waiting(f"{colour}: tasks stopped", max(initially - running, 0), initially)
            if self.clock.now() >= deadline:
                self.result.warnings.append(f"{service} still had {running} task(s) after the timeout")
                return
            self.clock.sleep(POLL_SECONDS)

    def _finish(self, situation: Situation) -> DeployResult:
        self._may_roll_back = False
        self._remove_surge_host()
        self.result.config_edit = set_config_value(
            self.target.stack_file, self.target.live_colour_key, situation.new
        )
        report = self._verify(situation.new)
        found_done = self.result.phase == Phase.DONE.value
        self.result.outcome = (
            ("already-serving" if found_done else "deployed") if report.passed else "verify-failed"
        )
        if not report.passed:
            self.result.reason = "; ".join(check.detail for check in report.failures)
        return self.result

    # -- rollback ------------------------------------------------------------------------------------

    def _roll_back(self, situation: Situation, error: Exception) -> None:
        self.result.outcome = "rolled-back"
        self.result.reason = str(error) or type(error).__name__
        self.progress.step(f"Rolling back: {self.result.reason}")
        self.result.rollback_errors = self._restore(situation)

    def _restore(self, situation: Situation) -> list[str]:
        """All traffic to the old colour, the new colour to zero, the surge host out; each step tried."""
        steps: list[Callable[[], None]] = [
            lambda: self._set_weights(
                {situation.old: FULL_WEIGHT, situation.new: 0}, f"All traffic back to {situation.old}"
            ),
            lambda: self._scale_to_zero(situation.new),
            self._remove_surge_host,
        ]
        errors = []
        for step in steps:
            try:
                step()
            except Exception as error:
                errors.append(str(error))
        return errors

    def _scale_to_zero(self, colour: str) -> None:
        service = self.topology.services[colour]
        if not describe_service(self.clients.ecs, self.target.cluster, service)["desiredCount"]:
            return
        self.progress.step(f"Scaling {service} to zero")
        self.clients.ecs.update_service(cluster=self.target.cluster, service=service, desiredCount=0)

    # -- reading and writing AWS ---------------------------------------------------------------------

    def _colour_state(self, colour: str) -> ColourState:
        service = self.topology.services[colour]
        described = describe_service(self.clients.ecs, self.target.cluster, service)
        return ColourState(
            colour=colour,
            service=service,
            desired=described["desiredCount"],
            task_definition=self._facts_of(described["taskDefinition"], described),
            rollout=self.source.rollout(self.target.cluster, service),
        )

    def _facts_of(self, arn: str, described: dict[str, Any]) -> TaskDefinitionFacts:
        if arn not in self._facts:  # a task definition never changes once registered
            container = next((lb.get("containerName") for lb in described.get("loadBalancers", [])), None)
            self._facts[arn] = task_definition_facts(self.clients.ecs, arn, container)
        return self._facts[arn]

    def _healthy_targets(self, colour: str) -> int:
        answer = self.clients.elbv2.describe_target_health(TargetGroupArn=self.topology.target_groups[colour])
        return sum(
            1 for item in answer["TargetHealthDescriptions"] if item["TargetHealth"]["State"] == "healthy"
        )

    def _health(self, colour: str) -> Health:
        """Whether ``colour`` runs the revision with every task up and healthy behind the load balancer.

        Raises :class:`DeployFailure` when ECS gave up on this run's deployment (FAILED, or replaced it
        with a rollback to another task definition): waiting longer cannot help.
        """
        service = self.topology.services[colour]
        described = describe_service(self.clients.ecs, self.target.cluster, service)
        desired = described["desiredCount"]
        healthy = self._healthy_targets(colour)
        primary = self.source.rollout(self.target.cluster, service).primary
        if primary is None:
            return Health(False, healthy, desired, "no PRIMARY deployment yet")
        facts = self._facts_of(primary.task_definition, described)
        expected = self._expected_deployment
        if expected is not None and primary.id == self.result.deployment_before:
            # ECS's reads are eventually consistent: the update's deployment is not listed yet.
            return Health(False, healthy, desired, f"waiting for ECS to list deployment {expected}")
        if (expected is not None and primary.id != expected) or facts.revision_label != self.request.revision:
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
            f"{healthy}/{desired} healthy targets"
        )
        ready = (
            primary.rollout_state == "COMPLETED" and primary.running_count >= desired and healthy >= desired
        )
        return Health(ready and desired > 0, healthy, desired, detail)

    def _set_weights(self, weights: dict[str, int], message: str) -> None:
        elbv2 = self.clients.elbv2
        listener = elbv2.describe_listeners(ListenerArns=[self.topology.listener_arn])["Listeners"][0]
        forward = next(action for action in listener["DefaultActions"] if action["Type"] == "forward")
        stickiness = forward.get("ForwardConfig", {}).get("TargetGroupStickinessConfig", {"Enabled": False})
        current = forward_weights(listener)
        wanted = {self.topology.target_groups[colour]: weight for colour, weight in weights.items()}
        if all(current.get(arn) == weight for arn, weight in wanted.items()):
            return
        groups = [{"TargetGroupArn": arn, "Weight": weight} for arn, weight in wanted.items()]
        elbv2.modify_listener(
            ListenerArn=self.topology.listener_arn,
            DefaultActions=[
                {
                    "Type": "forward",
                    "ForwardConfig": {"TargetGroups": groups, "TargetGroupStickinessConfig": stickiness},
                }
            ],
        )
        self.progress.step(message)

    def _drain_time(self, colour: str) -> timedelta:
        """The old colour's deregistration delay: how long in-flight requests may still be answered."""
        attributes = self.clients.elbv2.describe_target_group_attributes(
            TargetGroupArn=self.topology.target_groups[colour]
        )["Attributes"]
        seconds = next(
            (a["Value"] for a in attributes if a["Key"] == "deregistration_delay.timeout_seconds"), "0"
        )
        return timedelta(seconds=int(seconds))

    def _remove_surge_host(self) -> None:
        warning = self.surge.remove(self._busy_hosts, self.request.timeout)
        if warning:
            self.result.warnings.append(warning)

    def _busy_hosts(self) -> set[str]:
        """EC2 instances running a task of either colour."""
        instances = {
            task.container_instance
            for service in self.topology.services.values()
            for task in self.source.rollout(self.target.cluster, service).tasks
            if task.container_instance
        }
        if not instances:
            return set()
        described = self.clients.ecs.describe_container_instances(
            cluster=self.target.cluster, containerInstances=sorted(instances)
        )["containerInstances"]
        return {item["ec2InstanceId"] for item in described}

    def _remaining_steps(self, situation: Situation) -> list[str]:
        old, new = situation.old, situation.new
        request = self.request
        steps = [
            f"register a task definition for {request.revision} running {request.image.image}",
            f"add one host to {self.target.autoscaling_group}",
            f"start {self.topology.services[new]} on capacity provider "
            f"{names.capacity_provider(self.target.stack, self.target.pool)}",
            f"wait up to {format_duration(request.timeout)} for its targets to be healthy",
            f"send {request.canary_percent}% of traffic to {new} and bake {format_duration(request.bake)}",
            f"send all traffic to {new} and verify {request.revision}",
            f"drain {old} and scale it to zero",
            f"remove the added host and set {self.target.live_colour_key}: {new} in {self.target.stack_file.name}",
        ]
        remaining = steps[FIRST_STEP[situation.phase] :]
        if situation.phase is Phase.FOREIGN:
            remaining.insert(0, f"roll back the half-done deploy on {new}")
        return remaining


def _is_aws_error(error: Exception) -> bool:
    from botocore.exceptions import BotoCoreError, ClientError

    return isinstance(error, BotoCoreError | ClientError)
