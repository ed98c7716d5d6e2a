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

Any failure before the old colour is scaled in rolls back (``cli/oncall/deploy/colour_retreat.py``): all
traffic to the old colour, the new colour to zero, the surge host removed. Verification runs while
the old colour still has its tasks, so a failed verify is as cheap to undo as a failed health check.
The units it drives: ``colour_health`` (waits), ``task_definition_copy`` (the pinned copy),
``surge_host`` (the extra host), ``colour_retreat`` (rollback), ``verified_revisions`` (the record
``rollback`` reads).
"""

from __future__ import annotations

from datetime import timedelta

from cli.oncall.deploy.colour_health import ColourHealth, DeployFailure
from cli.oncall.deploy.colour_retreat import FULL_WEIGHT, Retreat
from cli.oncall.deploy.lease import LeaseLost
from cli.oncall.deploy.phases import (
    ColourState,
    DeployRequest,
    DeployResult,
    Observation,
    Phase,
    Situation,
    classify,
)
from cli.oncall.deploy.revision_checks import RevisionReport, check_service, route_checks
from cli.oncall.deploy.revisions import describe_service
from cli.oncall.deploy.runtime import ServiceAt
from cli.oncall.deploy.surge_host import POLL_SECONDS
from cli.oncall.deploy.task_definition_copy import register_pinned
from cli.oncall.deploy.traffic import colour_traffic, colour_weights, routes_to
from cli.oncall.deploy.verified_revisions import mark_verified
from cli.oncall.stack_file import set_config_value
from guardrails import names
from guardrails.durations import format_duration
from guardrails.errors import ParkbrakeError
from guardrails.plurals import counted

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


class BlueGreenDeploy:
    """One ``parkbrake deploy``: observe, classify, take the phase's step, repeat until DONE."""

    def __init__(self, request: DeployRequest, at: ServiceAt) -> None:
        self.request = request
        self.at = at
        self.result = DeployResult(at.target.service, request.revision, request.image.image)
        self.health = ColourHealth(at, request.revision)
        self.retreat = Retreat(at, request.timeout)
        self._may_roll_back = True

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
                # What was observed is this run's to act on only while it holds the lease.
                self.at.confirm_lease(f"the {situation.phase.value} step")
                if situation.phase is Phase.DONE:
                    return self._finish(situation)
                self._advance(observation, situation)
            raise DeployFailure(f"the deploy did not settle after {MAX_STEPS} steps")
        except LeaseLost:
            raise  # the service is another run's now: rolling back would undo that run's work
        except Exception as error:
            if situation is None or not self._may_roll_back:
                raise
            self._roll_back(situation, error)
            if not isinstance(error, DeployFailure | ParkbrakeError) and not _is_aws_error(error):
                raise
            return self.result

    def observe(self) -> Observation:
        weights = colour_weights(self.at.clients.elbv2, self.at.topology)
        colours = {colour: self._colour_state(colour) for colour in names.COLOURS}
        return Observation(weights, colours, self.retreat.surge.mark())

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
            self.at.progress.step(f"Rolling back the half-done deploy of {stale} on {new}")
            errors = self.retreat.restore(old, new)
            if errors:
                raise ParkbrakeError(f"could not roll back the deploy of {stale}: {'; '.join(errors)}")
        elif situation.phase is Phase.READY:
            self._start(observation, situation)
        elif situation.phase is Phase.STARTING:
            if observation.surge.surged_to is not None:  # a run stopped between marking and raising
                self.retreat.surge.add(observation.surge)
            self.health.await_healthy(new, self.request.timeout)
            share = self.request.canary_percent
            self.retreat.set_weights(
                {old: FULL_WEIGHT - share, new: share}, f"Canary: {share}% of traffic to {new}"
            )
        elif situation.phase is Phase.CANARY:
            label = f"baking the {observation.weights[new]}% canary on {new}"
            self.health.hold(new, self.request.bake, label)
            self.retreat.set_weights({old: 0, new: FULL_WEIGHT}, f"All traffic to {new}")
        elif situation.phase is Phase.SHIFTED:
            report = self._verify(new)
            if not report.passed:
                raise DeployFailure("verification failed: " + "; ".join(c.detail for c in report.failures))
            self.health.hold(new, self._drain_time(old), f"draining {old}")
            self._retire(old)

    def _start(self, observation: Observation, situation: Situation) -> None:
        at, request = self.at, self.request
        live, idle = observation.colours[situation.old], observation.colours[situation.new]
        surge = observation.surge
        if not surge.room:
            raise ParkbrakeError(
                f"{at.target.autoscaling_group} is at its max ({surge.maximum}), so no host can be added "
                f"for the new colour; raise pools.{at.target.pool}.max"
            )
        definition, name = register_pinned(
            at.clients.ecs, live.task_definition, request.image.image, request.revision
        )
        at.progress.step(f"Registered {name}: {request.image.image}")
        self.result.task_definition = definition
        self.retreat.surge.add(surge)
        at.progress.step(f"Starting {idle.service}: {counted(live.desired, 'task')} of {request.revision}")
        answer = at.clients.ecs.update_service(
            cluster=at.target.cluster,
            service=idle.service,
            taskDefinition=definition,
            desiredCount=live.desired,
            capacityProviderStrategy=[
                {"capacityProvider": names.capacity_provider(at.target.stack, at.target.pool), "weight": 1}
            ],
            forceNewDeployment=True,
        )
        primary = next(
            (d for d in answer["service"].get("deployments", []) if d["status"] == "PRIMARY"), None
        )
        before = idle.rollout.primary
        self.health.deployment_before = self.result.deployment_before = before.id if before else None
        self.health.expected_deployment = self.result.deployment_after = primary["id"] if primary else None

    def _verify(self, colour: str) -> RevisionReport:
        at = self.at
        checks = check_service(
            at.clients.ecs,
            at.source,
            at.target.cluster,
            at.service(colour),
            self.request.revision,
            expected_digest=self.request.image.digest,
            expected_deployment=self.health.expected_deployment,
        )
        traffic = colour_traffic(routes_to(at.clients.elbv2, at.topology.target_groups.values()), at.topology)
        checks += route_checks(at.clients.ecs, at.source, at.topology, traffic, self.request.revision)
        report = RevisionReport(at.target.service, self.request.revision, tuple(checks))
        self.result.verification = report
        return report

    def _retire(self, colour: str) -> None:
        """Scale the old colour in; from here on the old revision cannot take traffic back at once."""
        self._may_roll_back = False
        at = self.at
        service = at.service(colour)
        at.progress.step(f"Scaling {service} to zero")
        at.clients.ecs.update_service(cluster=at.target.cluster, service=service, desiredCount=0)
        deadline = at.clock.now() + self.request.timeout
        initially = len(at.source.rollout(at.target.cluster, service).tasks)
        while running := len(at.source.rollout(at.target.cluster, service).tasks):
            at.progress.waiting(f"{colour}: tasks stopped", max(initially - running, 0), initially)
            if at.clock.now() >= deadline:
                self.result.warnings.append(
                    f"{service} still had {counted(running, 'task')} after the timeout"
                )
                return
            at.clock.sleep(POLL_SECONDS)

    def _finish(self, situation: Situation) -> DeployResult:
        self._may_roll_back = False
        self.retreat.remove_surge_host()
        self.result.warnings += self.retreat.warnings
        self.at.confirm_lease(f"setting {self.at.target.live_colour_key} in {self.at.target.stack_file.name}")
        self.result.config_edit = set_config_value(
            self.at.target.stack_file, self.at.target.live_colour_key, situation.new
        )
        report = self._verify(situation.new)
        found_done = self.result.phase == Phase.DONE.value
        self.result.outcome = (
            ("already-serving" if found_done else "deployed") if report.passed else "verify-failed"
        )
        if report.passed:
            mark_verified(self.at, situation.new, self.at.clock.now())
        else:
            self.result.reason = "; ".join(check.detail for check in report.failures)
        return self.result

    def _roll_back(self, situation: Situation, error: Exception) -> None:
        self.result.outcome = "rolled-back"
        self.result.reason = str(error) or type(error).__name__
        self.at.confirm_lease("rolling back")  # the failure may be another run's doing, not this one's
        self.at.progress.step(f"Rolling back: {self.result.reason}")
        self.result.rollback_errors = self.retreat.restore(situation.old, situation.new)
        self.result.warnings += self.retreat.warnings

    def _colour_state(self, colour: str) -> ColourState:
        at = self.at
        service = at.service(colour)
        described = describe_service(at.clients.ecs, at.target.cluster, service)
        return ColourState(
            colour=colour,
            service=service,
            desired=described["desiredCount"],
            task_definition=self.health.facts_of(described["taskDefinition"], described),
            rollout=at.source.rollout(at.target.cluster, service),
        )

    def _drain_time(self, colour: str) -> timedelta:
        """The old colour's deregistration delay: how long in-flight requests may still be answered."""
        attributes = self.at.clients.elbv2.describe_target_group_attributes(
            TargetGroupArn=self.at.topology.target_groups[colour]
        )["Attributes"]
        seconds = next(
            (a["Value"] for a in attributes if a["Key"] == "deregistration_delay.timeout_seconds"), "0"
        )
        return timedelta(seconds=int(seconds))

    def _remaining_steps(self, situation: Situation) -> list[str]:
        old, new = situation.old, situation.new
        request, target = self.request, self.at.target
        steps = [
            f"register a task definition for {request.revision} running {request.image.image}",
            f"add one host to {target.autoscaling_group}",
            f"start {self.at.service(new)} on capacity provider "
            f"{names.capacity_provider(target.stack, target.pool)}",
            f"wait up to {format_duration(request.timeout)} for its targets to be healthy",
            f"send {request.canary_percent}% of traffic to {new} and bake {format_duration(request.bake)}",
            f"send all traffic to {new} and verify {request.revision}",
            f"drain {old} and scale it to zero",
            f"remove the added host and set {target.live_colour_key}: {new} in {target.stack_file.name}",
        ]
        remaining = steps[FIRST_STEP[situation.phase] :]
        if situation.phase is Phase.FOREIGN:
            remaining.insert(0, f"roll back the half-done deploy on {new}")
        return remaining


def _is_aws_error(error: Exception) -> bool:
    from botocore.exceptions import BotoCoreError, ClientError

    return isinstance(error, BotoCoreError | ClientError)
