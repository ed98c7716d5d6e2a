"""The deploy engine's entry points: ``deploy``, ``rollback`` and ``deploy --abort``, each under the
service's lease. ``cli/deploy.py`` parses the options and calls one of these; what they print is the
command's (the results come back), what they ask goes through ``confirm``.

``confirm(question)`` returns when the answer is yes (or ``--yes``) and raises otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from cli.oncall.deploy.abort import AbortResult, abort_deploy
from cli.oncall.deploy.blue_green import BlueGreenDeploy
from cli.oncall.deploy.elb import colour_weights
from cli.oncall.deploy.lease import held
from cli.oncall.deploy.lease_guard import service_lease, under_lease
from cli.oncall.deploy.phases import DeployRequest, DeployResult, DeployTarget
from cli.oncall.deploy.revision_checks import primary_facts
from cli.oncall.deploy.revisions import resolve_image, revision_text
from cli.oncall.deploy.runtime import DeployProgress, Runtime, ServiceAt
from cli.oncall.deploy.verified_revisions import VerifiedRevision, previous_verified
from cli.oncall.ecs import TaskDefinitionFacts
from guardrails.errors import ParkbrakeError

Confirm = Callable[[str], None]


@dataclass(frozen=True)
class DeploySettings:
    canary_percent: int
    bake: timedelta
    timeout: timedelta
    dry_run: bool
    steal_lock: bool = False
    operation: str = "deploy"  # or "rollback": what the lease says its holder is doing


def deploy(
    target: DeployTarget,
    *,
    image: str,
    revision: str,
    allow_tag: bool,
    settings: DeploySettings,
    runtime: Runtime,
    progress: DeployProgress,
    confirm: Confirm,
) -> DeployResult:
    """Deploy ``image`` as ``revision``, blue-green (a dry run: the plan); the lease held throughout.

    Written as one pass down, the revision handed on and never brought back: the walk from the
    command to the first ECS write visits each file once (``tests/cli/oncall/deploy/test_deploy_walk.py``).
    """
    resolved = resolve_image(image, allow_tag=allow_tag, ecr_in=runtime.clients.ecr_in)
    request = DeployRequest(
        target=target,
        image=resolved,
        revision=revision_text(revision),
        canary_percent=settings.canary_percent,
        bake=settings.bake,
        timeout=settings.timeout,
    )
    at = ServiceAt.find(target, runtime, progress)
    if settings.dry_run:
        return BlueGreenDeploy(request, at).plan()
    confirm(f"Deploy {revision} ({request.image.image}) to {target.service} in stack {target.stack}?")
    lease = service_lease(at, settings.operation, request.revision)
    with held(lease, steal=settings.steal_lock, confirm=confirm):
        # Every AWS write and every wait confirms the lease first; once lost, the run stops there.
        return BlueGreenDeploy(request, under_lease(at, lease)).run()


def previous_revision(
    target: DeployTarget, runtime: Runtime, *, dry_run: bool, steal_lock: bool
) -> tuple[TaskDefinitionFacts, VerifiedRevision]:
    """What ``rollback`` goes back from (the serving revision) and to (the previous verified one)."""
    at = ServiceAt.find(target, runtime, _Quiet())
    if not dry_run:  # another run's half-done deploy is no ground to pick the previous revision on
        service_lease(at, "rollback", "the previous verified revision").refuse_if_held(steal=steal_lock)
    weights = colour_weights(runtime.clients.elbv2, at.topology)
    live = max(weights, key=lambda colour: weights[colour])
    _, serving = primary_facts(at.clients.ecs, at.source, at.target.cluster, at.service(live))
    if serving is None:
        raise ParkbrakeError(f"{at.service(live)} has no PRIMARY deployment; nothing to roll back from")
    previous = previous_verified(at, serving)
    if previous is None:
        raise ParkbrakeError(
            f"{target.service} has no verified revision other than "
            f"{serving.revision_label or 'the serving one'} ({serving.name}); "
            "deploy a revision by --image and --revision instead"
        )
    return serving, previous


def abort(
    target: DeployTarget,
    *,
    timeout: timedelta,
    dry_run: bool,
    steal_lock: bool,
    runtime: Runtime,
    progress: DeployProgress,
    confirm_plan: Callable[[AbortResult], None],
    confirm: Confirm,
) -> AbortResult:
    """``deploy --abort``: the plan, and unless a dry run (or nothing to do) the retreat under the lease.
    ``confirm_plan`` is shown the plan and asks before anything changes."""
    at = ServiceAt.find(target, runtime, progress)
    if not dry_run:  # a deploy in flight is the holder's to finish or abort, not ours to plan on
        service_lease(at, "abort", "the live colour").refuse_if_held(steal=steal_lock)
    plan = abort_deploy(at, timeout, dry_run=True)
    if not plan.steps or dry_run:
        return plan
    confirm_plan(plan)
    lease = service_lease(at, "abort", "the live colour")
    with held(lease, steal=steal_lock, confirm=confirm):
        return abort_deploy(under_lease(at, lease), timeout, dry_run=False)


class _Quiet:
    """No progress to show: ``rollback`` only reads while it picks the revision."""

    def step(self, message: str) -> None:
        pass

    def waiting(self, label: str, done: int, total: int) -> None:
        pass
