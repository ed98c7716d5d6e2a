"""STARTING → CANARY → SHIFTED: the new colour healthy, then the canary share, baked, then all traffic."""

from __future__ import annotations

from cli.oncall.deploy.colour_retreat import FULL_WEIGHT
from cli.oncall.deploy.deploy_run import DeployRun
from cli.oncall.deploy.phases import Observation, Situation


def send_canary(run: DeployRun, observation: Observation, situation: Situation) -> None:
    """STARTING: once the new colour is healthy, the canary share of the traffic goes to it."""
    old, new = situation.old, situation.new
    if observation.surge.surged_to is not None:  # a run stopped between marking and raising
        run.retreat.surge.add(observation.surge)
    run.health.await_healthy(new, run.revision, run.request.timeout)
    share = run.request.canary_percent
    run.retreat.set_weights({old: FULL_WEIGHT - share, new: share}, f"Canary: {share}% of traffic to {new}")


def shift_all_traffic(run: DeployRun, observation: Observation, situation: Situation) -> None:
    """CANARY: the canary bakes healthy, then all traffic goes to the new colour."""
    old, new = situation.old, situation.new
    label = f"baking the {observation.weights[new]}% canary on {new}"
    run.health.hold(new, run.revision, run.request.bake, label)
    run.retreat.set_weights({old: 0, new: FULL_WEIGHT}, f"All traffic to {new}")
