"""READY → STARTING: the pinned task definition registered, one host added, the idle colour started."""

from __future__ import annotations

from cli.oncall.deploy.deploy_run import DeployRun
from cli.oncall.deploy.phases import Observation, Situation
from cli.oncall.deploy.task_definition_copy import pinned_definition
from cli.oncall.ecs import describe_task_definition, register_task_definition, start_service
from guardrails import names
from guardrails.errors import ParkbrakeError
from guardrails.plurals import counted


def start_new_colour(run: DeployRun, observation: Observation, situation: Situation) -> None:
    at, request = run.at, run.request
    live, idle = observation.colours[situation.old], observation.colours[situation.new]
    surge = observation.surge
    if not surge.room:
        raise ParkbrakeError(
            f"{at.target.autoscaling_group} is at its max ({surge.maximum}), so no host can be added "
            f"for the new colour; raise pools.{at.target.pool}.max"
        )
    serving = live.task_definition
    copy = pinned_definition(
        describe_task_definition(at.clients.ecs, serving.arn),
        serving.container,
        request.image.image,
        request.revision,
    )
    definition, name = register_task_definition(at.clients.ecs, copy)
    at.progress.step(f"Registered {name}: {request.image.image}")
    run.result.task_definition = definition
    run.retreat.surge.add(surge)
    at.progress.step(f"Starting {idle.service}: {counted(live.desired, 'task')} of {request.revision}")
    before = idle.rollout.primary
    started = start_service(
        at.clients.ecs,
        cluster=at.target.cluster,
        service=idle.service,
        task_definition=definition,
        desired=live.desired,
        capacity_provider=names.capacity_provider(at.target.stack, at.target.pool),
    )
    run.health.deployment_before = run.result.deployment_before = before.id if before else None
    run.health.expected_deployment = run.result.deployment_after = started
