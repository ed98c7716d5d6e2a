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
Each phase's step is a module of its own: ``start`` (READY), ``canary`` (STARTING and CANARY),
``retire`` (SHIFTED), ``finish`` (DONE), ``rollback`` (FOREIGN, and any failure); they call ECS
through ``cli.oncall.ecs`` and the load balancer through ``elb`` alone. This module observes, classifies and
calls the step; the walk of the revision from the command to its first ECS write goes down through
it once (``tests/cli/oncall/deploy/test_deploy_walk.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from cli.oncall.deploy.canary import send_canary, shift_all_traffic
from cli.oncall.deploy.colour_health import ColourHealth, DeployFailure
from cli.oncall.deploy.colour_retreat import Retreat
from cli.oncall.deploy.deploy_run import DeployRun
from cli.oncall.deploy.elb import colour_weights
from cli.oncall.deploy.finish import finish
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
from cli.oncall.deploy.retire import retire_old_colour
from cli.oncall.deploy.rollback import clear_foreign, roll_back
from cli.oncall.deploy.runtime import ServiceAt
from cli.oncall.deploy.start import start_new_colour
from cli.oncall.ecs import describe_service
from guardrails import names
from guardrails.durations import format_duration
from guardrails.errors import ParkbrakeError

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
# The step each phase takes towards DONE (which finishes instead: ``finish.py``).
STEPS: dict[Phase, Callable[[DeployRun, Observation, Situation], None]] = {
    Phase.FOREIGN: clear_foreign,
    Phase.READY: start_new_colour,
    Phase.STARTING: send_canary,
    Phase.CANARY: shift_all_traffic,
    Phase.SHIFTED: retire_old_colour,
}


class BlueGreenDeploy:
    """One ``parkbrake deploy``: observe, classify, take the phase's step, repeat until DONE."""

    def __init__(self, request: DeployRequest, at: ServiceAt) -> None:
        self.request = request
        self.at = at
        self.state = DeployRun(
            request,
            at,
            DeployResult(at.target.service, request.revision, request.image.image),
            ColourHealth(at),
            Retreat(at, request.timeout),
        )

    @property
    def result(self) -> DeployResult:
        return self.state.result

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
                    return finish(self.state, situation)
                STEPS[situation.phase](self.state, observation, situation)
            raise DeployFailure(f"the deploy did not settle after {MAX_STEPS} steps")
        except LeaseLost:
            raise  # the service is another run's now: rolling back would undo that run's work
        except Exception as error:
            if situation is None or not self.state.may_roll_back:
                raise
            roll_back(self.state, situation, error)
            if not isinstance(error, DeployFailure | ParkbrakeError) and not _is_aws_error(error):
                raise
            return self.result

    def observe(self) -> Observation:
        weights = colour_weights(self.at.clients.elbv2, self.at.topology)
        colours = {colour: self._colour_state(colour) for colour in names.COLOURS}
        return Observation(weights, colours, self.state.retreat.surge.mark())

    def _situate(self, observation: Observation) -> Situation:
        result = self.state.result  # read before classify: the walk goes down through this file once
        situation = classify(observation, self.request.revision)
        if not result.phase:
            result.phase = situation.phase.value
        result.old_colour, result.new_colour = situation.old, situation.new
        return situation

    def _colour_state(self, colour: str) -> ColourState:
        at = self.at
        service = at.service(colour)
        described = describe_service(at.clients.ecs, at.target.cluster, service)
        return ColourState(
            colour=colour,
            service=service,
            desired=described["desiredCount"],
            task_definition=self.state.health.facts_of(described["taskDefinition"], described),
            rollout=at.source.rollout(at.target.cluster, service),
        )

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
