"""The checks of ``parkbrake verify`` and a deploy's last step: does a service run revision SHA?

A service runs revision SHA when its PRIMARY deployment has COMPLETED on a task definition labelled
SHA and pinned to an image digest, no other deployment still runs tasks, every running task runs that
task definition, and no listener route sends any traffic to a colour running something else (and,
where asked, the service's ``/version`` answers SHA). Why a COMPLETED rollout alone proves nothing is
told in ``cli/oncall/ecs.py``.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from cli.oncall.deploy.elb import Route, Topology, colour_traffic, find_topology, routes_to
from cli.oncall.deploy.revisions import ImageReference
from cli.oncall.ecs import (
    Deployment,
    Rollout,
    RolloutSource,
    TaskDefinitionFacts,
    describe_service,
    task_definition_facts,
)
from guardrails import names, tags
from guardrails.plurals import counted

VERSION_TIMEOUT_SECONDS = 10


@dataclass(frozen=True)
class Check:
    name: str
    subject: str  # the ECS service or URL checked
    passed: bool
    detail: str


@dataclass(frozen=True)
class RevisionReport:
    service: str
    revision: str
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.passed)

    def as_json(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "revision": self.revision,
            "passed": self.passed,
            "checks": [asdict(check) for check in self.checks],
        }


def check_service(
    ecs: Any,
    source: RolloutSource,
    cluster: str,
    service: str,
    revision: str,
    *,
    expected_digest: str | None = None,
    expected_deployment: str | None = None,
) -> list[Check]:
    """Every check that ECS service ``service`` runs ``revision``.

    ``expected_deployment`` is the PRIMARY deployment id a deploy's own update created; any other
    PRIMARY means ECS replaced it (a circuit-breaker rollback).
    """
    rollout, facts = primary_facts(ecs, source, cluster, service)
    primary = rollout.primary
    if primary is None or facts is None:
        return [Check("primary-deployment", service, False, "the service has no PRIMARY deployment")]
    return [
        _primary_check(
            primary, facts, rollout, service=service, revision=revision, expected=expected_deployment
        ),
        _label_check(service, revision, facts),
        _digest_check(service, facts, rollout, expected_digest),
        _other_deployments_check(service, rollout),
        _tasks_check(service, primary, facts, rollout),
    ]


def primary_facts(
    ecs: Any, source: RolloutSource, cluster: str, service: str
) -> tuple[Rollout, TaskDefinitionFacts | None]:
    """The service's rollout, and the task definition its PRIMARY deployment runs (None: no PRIMARY).

    The PRIMARY deployment, not the service's ``taskDefinition``: that is what ECS is running now.
    """
    described = describe_service(ecs, cluster, service)
    container = next((lb.get("containerName") for lb in described.get("loadBalancers", [])), None)
    rollout = source.rollout(cluster, service)
    primary = rollout.primary
    facts = None if primary is None else task_definition_facts(ecs, primary.task_definition, container)
    return rollout, facts


def _primary_check(
    primary: Deployment,
    facts: TaskDefinitionFacts,
    rollout: Rollout,
    *,
    service: str,
    revision: str,
    expected: str | None,
) -> Check:
    name = "primary-deployment"
    summary = f"PRIMARY deployment {primary.id} is {primary.rollout_state} on {facts.name}"
    if expected is not None and primary.id != expected:
        return Check(
            name,
            service,
            False,
            f"rolled back to {facts.name}: the deploy's deployment {expected} is no longer PRIMARY; "
            f"{summary} (revision {facts.revision_label or 'unlabelled'}). {primary.rollout_state_reason}".strip(),
        )
    failed = [item for item in rollout.others if item.rollout_state == "FAILED"]
    if facts.revision_label != revision and (primary.reads_as_rollback or failed):
        why = primary.rollout_state_reason or "; ".join(item.rollout_state_reason for item in failed)
        return Check(
            name,
            service,
            False,
            f"rolled back to {facts.name} (revision {facts.revision_label or 'unlabelled'}), not "
            f"{revision}: ECS's circuit breaker replaced the deployment; {summary}. {why}".strip(),
        )
    if primary.rollout_state != "COMPLETED":
        reason = f": {primary.rollout_state_reason}" if primary.rollout_state_reason else ""
        return Check(name, service, False, f"{summary}{reason}")
    return Check(name, service, True, summary)


def _label_check(service: str, revision: str, facts: TaskDefinitionFacts) -> Check:
    records = {
        f"label {names.CONTAINER_REVISION_LABEL}": facts.revision_label,
        f"tag {tags.REVISION}": facts.revision_tag,
    }
    wrong = [f"{what} is {value or 'absent'}" for what, value in records.items() if value != revision]
    if wrong:
        return Check(
            "revision-label", service, False, f"{facts.name}: {', '.join(wrong)}; expected {revision}"
        )
    return Check("revision-label", service, True, f"{facts.name} is labelled and tagged {revision}")


def _digest_check(
    service: str, facts: TaskDefinitionFacts, rollout: Rollout, expected_digest: str | None
) -> Check:
    """The digest that runs is the pinned one; for a tag, the one digest every task reports."""
    name = "image-digest"
    reported = {
        digest for task in rollout.tasks if task.task_definition == facts.arn for digest in task.image_digests
    }
    image = ImageReference.parse(facts.image)
    running = image.digest or (next(iter(reported)) if len(reported) == 1 else None)
    if running is None:
        return Check(
            name, service, False, f"{facts.image} is not pinned to a digest; what runs cannot be proven"
        )
    if expected_digest is not None and running != expected_digest:
        return Check(name, service, False, f"{facts.name} runs {running}, not the expected {expected_digest}")
    strays = sorted(reported - {running})
    if strays:
        return Check(
            name, service, False, f"{facts.name} pins {running}, but tasks report {', '.join(strays)}"
        )
    return Check(name, service, True, f"{facts.name} runs {image.repository}@{running}")


def _other_deployments_check(service: str, rollout: Rollout) -> Check:
    busy = [
        f"{item.id} ({item.status}, {item.running_count} running)"
        for item in rollout.others
        if item.running_count
    ]
    if busy:
        return Check("other-deployments", service, False, f"still running tasks: {', '.join(busy)}")
    return Check("other-deployments", service, True, "no other deployment runs tasks")


def _tasks_check(service: str, primary: Deployment, facts: TaskDefinitionFacts, rollout: Rollout) -> Check:
    name = "running-tasks"
    strays = [
        task.arn.rsplit("/", 1)[-1]
        for task in rollout.tasks
        if task.task_definition != primary.task_definition
    ]
    if not rollout.tasks:
        return Check(name, service, False, "no task is running")
    if strays:
        return Check(
            name,
            service,
            False,
            f"tasks running another task definition: {len(strays)} of {len(rollout.tasks)}",
        )
    return Check(
        name, service, True, f"every running task runs {facts.name} ({counted(len(rollout.tasks), 'task')})"
    )


def fetch_version(url: str) -> str:
    """What ``URL/version`` answers: plain text, or JSON with a ``revision`` field."""
    endpoint = url.rstrip("/") + "/version"
    with urllib.request.urlopen(endpoint, timeout=VERSION_TIMEOUT_SECONDS) as response:
        body = response.read(65_536).decode("utf-8", "replace").strip()
    if body.startswith("{"):
        value = json.loads(body).get("revision")
        if not isinstance(value, str):
            raise ValueError('the JSON has no string "revision"')
        return value.strip()
    return body


def check_version_endpoint(url: str, revision: str, fetch: Callable[[str], str] = fetch_version) -> Check:
    subject = url.rstrip("/") + "/version"
    try:
        answered = fetch(url)
    except (OSError, ValueError) as error:  # URLError, HTTPError and timeouts are OSErrors
        return Check("version-endpoint", subject, False, f"could not read it: {error}")
    if answered != revision:
        return Check("version-endpoint", subject, False, f"answers {answered!r}, expected {revision}")
    return Check("version-endpoint", subject, True, f"answers {revision}")


def verify_revision(
    ecs: Any,
    elbv2: Any,
    source: RolloutSource,
    *,
    cluster: str,
    service: str,
    revision: str,
    expected_digest: str | None = None,
    url: str | None = None,
) -> RevisionReport:
    """``parkbrake verify``: every ECS service that any listener route sends ``service``'s traffic to
    runs ``revision``, and no route sends traffic to a colour that runs something else."""
    topology = find_topology(ecs, elbv2, cluster, service)
    if topology is None:
        checks = check_service(ecs, source, cluster, service, revision, expected_digest=expected_digest)
    else:
        checks = _colour_checks(
            ecs,
            elbv2=elbv2,
            source=source,
            topology=topology,
            revision=revision,
            expected_digest=expected_digest,
        )
    if url:
        checks.append(check_version_endpoint(url, revision))
    return RevisionReport(service, revision, tuple(checks))


def _colour_checks(
    ecs: Any,
    *,
    elbv2: Any,
    source: RolloutSource,
    topology: Topology,
    revision: str,
    expected_digest: str | None,
) -> list[Check]:
    traffic = colour_traffic(routes_to(elbv2, topology.target_groups.values()), topology)
    serving = [colour for colour, routes in traffic.items() if routes]
    if not serving:
        return [Check("listener-routes", topology.service, False, "no listener route sends it any traffic")]
    checks = []
    for colour in serving:
        checks += check_service(
            ecs,
            source,
            topology.cluster,
            topology.services[colour],
            revision,
            expected_digest=expected_digest,
        )
    return checks + route_checks(ecs, source, topology, traffic, revision)


def route_checks(
    ecs: Any,
    source: RolloutSource,
    topology: Topology,
    traffic: dict[str, list[tuple[Route, int]]],
    revision: str,
) -> list[Check]:
    """One check per colour that takes traffic: every route to it names a colour running ``revision``."""
    checks = []
    for colour, routes in traffic.items():
        if not routes:
            continue
        service = topology.services[colour]
        _, facts = primary_facts(ecs, source, topology.cluster, service)
        runs = facts.revision_label if facts else None
        shares = ", ".join(f"{route.name} {percent}%" for route, percent in routes)
        if runs == revision:
            checks.append(Check("listener-routes", service, True, f"runs {revision}; traffic from {shares}"))
            continue
        running = f"{facts.name} (revision {runs or 'unlabelled'})" if facts else "no PRIMARY deployment"
        checks.append(
            Check(
                "listener-routes",
                service,
                False,
                f"{shares} of the traffic goes to {service}, which runs {running}, not {revision}",
            )
        )
    return checks
