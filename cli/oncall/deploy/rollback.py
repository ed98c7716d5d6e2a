"""A deploy's way back: a failed run rolled back, and (FOREIGN) another revision's half-done deploy
rolled back before this one starts. Both are the retreat of ``colour_retreat.py``."""

from __future__ import annotations

from cli.oncall.deploy.deploy_run import DeployRun
from cli.oncall.deploy.phases import Observation, Situation
from guardrails.errors import ParkbrakeError


def clear_foreign(run: DeployRun, observation: Observation, situation: Situation) -> None:
    """FOREIGN: the idle colour's half-done deploy of another revision rolled back."""
    stale = observation.colours[situation.new].revision or "an unlabelled revision"
    run.at.progress.step(f"Rolling back the half-done deploy of {stale} on {situation.new}")
    errors = run.retreat.restore(situation.old, situation.new)
    if errors:
        raise ParkbrakeError(f"could not roll back the deploy of {stale}: {'; '.join(errors)}")


def roll_back(run: DeployRun, situation: Situation, error: Exception) -> None:
    """All traffic back to the old colour, the new one to zero, the extra host out; why, in the result."""
    result = run.result
    result.outcome = "rolled-back"
    result.reason = str(error) or type(error).__name__
    run.at.confirm_lease("rolling back")  # the failure may be another run's doing, not this one's
    run.at.progress.step(f"Rolling back: {result.reason}")
    result.rollback_errors = run.retreat.restore(situation.old, situation.new)
    result.warnings += run.retreat.warnings
