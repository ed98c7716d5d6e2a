"""SHIFTED → DONE: the new colour verified, the old one drained and scaled in."""

from __future__ import annotations

from cli.oncall.deploy.colour_health import DeployFailure
from cli.oncall.deploy.deploy_run import DeployRun
from cli.oncall.deploy.elb import deregistration_delay
from cli.oncall.deploy.phases import Observation, Situation
from cli.oncall.deploy.surge_host import POLL_SECONDS
from cli.oncall.deploy.verification import verify_colour
from cli.oncall.ecs import scale_service_to_zero
from guardrails.plurals import counted


def retire_old_colour(run: DeployRun, observation: Observation, situation: Situation) -> None:
    old, new = situation.old, situation.new
    report = verify_colour(run, new)
    if not report.passed:
        raise DeployFailure("verification failed: " + "; ".join(c.detail for c in report.failures))
    # The old colour's deregistration delay: how long in-flight requests may still be answered.
    drain = deregistration_delay(run.at.clients.elbv2, run.at.topology.target_groups[old])
    run.health.hold(new, run.revision, drain, f"draining {old}")
    _scale_in(run, old)


def _scale_in(run: DeployRun, colour: str) -> None:
    """Scale the old colour in; from here on the old revision cannot take traffic back at once."""
    run.may_roll_back = False
    at = run.at
    service = at.service(colour)
    at.progress.step(f"Scaling {service} to zero")
    scale_service_to_zero(at.clients.ecs, at.target.cluster, service)
    deadline = at.clock.now() + run.request.timeout
    initially = len(at.source.rollout(at.target.cluster, service).tasks)
    while running := len(at.source.rollout(at.target.cluster, service).tasks):
        at.progress.waiting(f"{colour}: tasks stopped", max(initially - running, 0), initially)
        if at.clock.now() >= deadline:
            run.result.warnings.append(f"{service} still had {counted(running, 'task')} after the timeout")
            return
        at.clock.sleep(POLL_SECONDS)
