"""DONE: the extra host removed, the stack file's live colour set, the revision verified and recorded."""

from __future__ import annotations

from cli.oncall.deploy.deploy_run import DeployRun
from cli.oncall.deploy.phases import DeployResult, Phase, Situation
from cli.oncall.deploy.verification import verify_colour
from cli.oncall.deploy.verified_revisions import mark_verified
from cli.oncall.stack_file import set_config_value


def finish(run: DeployRun, situation: Situation) -> DeployResult:
    at, result = run.at, run.result
    run.may_roll_back = False
    run.retreat.remove_surge_host()
    result.warnings += run.retreat.warnings
    at.confirm_lease(f"setting {at.target.live_colour_key} in {at.target.stack_file.name}")
    result.config_edit = set_config_value(at.target.stack_file, at.target.live_colour_key, situation.new)
    report = verify_colour(run, situation.new)
    found_done = result.phase == Phase.DONE.value
    result.outcome = ("already-serving" if found_done else "deployed") if report.passed else "verify-failed"
    if report.passed:
        mark_verified(at, situation.new, at.clock.now())
    else:
        result.reason = "; ".join(check.detail for check in report.failures)
    return result
