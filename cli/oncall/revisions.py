"""Prove which revision an ECS service runs: the checks of ``parkbrake verify`` and a deploy's last step.

A service runs revision SHA when its PRIMARY deployment has COMPLETED on a task definition labelled
SHA and pinned to an image digest, no other deployment still runs tasks, and every running task runs
that task definition (and, where asked, the service's ``/version`` answers SHA).

A COMPLETED rollout alone proves nothing: when ECS's deployment circuit breaker rolls a deployment
back, it starts a *new* PRIMARY deployment of the *old* task definition and reports it COMPLETED, and
boto's ``services_stable`` waiter passes. So the checks look at what the PRIMARY deployment runs, and a
deploy also compares the PRIMARY deployment's id with the one its own update created.

What ECS's scheduler has done (deployments, running tasks) is read through :class:`RolloutSource`;
:class:`EcsRolloutSource` is the real one. moto does not run an ECS scheduler, so tests supply their
own source (see ``docs/deploy.md``).
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from guardrails import names, tags
from guardrails.errors import InputError, ParkbrakeError

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
ECR_HOST = re.compile(
    r"(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?"
)
REPOSITORY = re.compile(r"[\w.\-/:]+")
# A git commit (or a release name): it becomes a Docker label and an AWS tag value.
REVISION = re.compile(r"[0-9A-Za-z][0-9A-Za-z._\-]{0,127}")
# Words ECS puts in a rollout reason or event when the circuit breaker reverts a deployment.
ROLLBACK_WORDS = ("circuit breaker", "rolling back", "rolled back", "rollback")
VERSION_TIMEOUT_SECONDS = 10
ECS_DESCRIBE_TASKS_LIMIT = 100


def revision_text(text: str) -> str:
    """``text`` as a revision, or a clear error: it is written into labels and tags."""
    if not REVISION.fullmatch(text):
        raise InputError(f"{text!r} is not a revision; pass the git commit, e.g. --revision 3f2c1ab")
    return text


# -- What ECS reports ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deployment:
    id: str
    status: str  # PRIMARY, ACTIVE or INACTIVE
    task_definition: str
    rollout_state: str  # IN_PROGRESS, COMPLETED or FAILED
    rollout_state_reason: str
    desired_count: int
    running_count: int
    failed_tasks: int = 0

    @classmethod
    def from_api(cls, item: Mapping[str, Any]) -> Deployment:
        return cls(
            id=item["id"],
            status=item["status"],
            task_definition=item["taskDefinition"],
            rollout_state=item.get("rolloutState", "IN_PROGRESS"),
            rollout_state_reason=item.get("rolloutStateReason", ""),
            desired_count=item.get("desiredCount", 0),
            running_count=item.get("runningCount", 0),
            failed_tasks=item.get("failedTasks", 0),
        )

    @property
    def reads_as_rollback(self) -> bool:
        reason = self.rollout_state_reason.lower()
        return any(word in reason for word in ROLLBACK_WORDS)


@dataclass(frozen=True)
class RunningTask:
    arn: str
    task_definition: str
    image_digests: tuple[str, ...]  # as the ECS agent reports what it pulled; empty until it reports
    container_instance: str | None = None  # the host's container instance ARN (EC2 launch type)


@dataclass(frozen=True)
class Rollout:
    """A service's deployments and its running tasks, as ECS's scheduler reports them now."""

    deployments: tuple[Deployment, ...]
    tasks: tuple[RunningTask, ...]

    @property
    def primary(self) -> Deployment | None:
        return next((item for item in self.deployments if item.status == "PRIMARY"), None)

    @property
    def others(self) -> tuple[Deployment, ...]:
        return tuple(item for item in self.deployments if item.status != "PRIMARY")


class RolloutSource(Protocol):
    def rollout(self, cluster: str, service: str) -> Rollout:
        """The service's deployments and running tasks."""
        ...


class EcsRolloutSource:
    """The real source: ``DescribeServices`` deployments and the service's RUNNING tasks."""

    def __init__(self, ecs: Any) -> None:
        self.ecs = ecs

    def rollout(self, cluster: str, service: str) -> Rollout:
        described = describe_service(self.ecs, cluster, service)
        deployments = tuple(Deployment.from_api(item) for item in described.get("deployments", []))
        return Rollout(deployments, tuple(self._running_tasks(cluster, service)))

    def _running_tasks(self, cluster: str, service: str) -> Iterator[RunningTask]:
        arns = [
            arn
            for page in self.ecs.get_paginator("list_tasks").paginate(
                cluster=cluster, serviceName=service, desiredStatus="RUNNING"
            )
            for arn in page["taskArns"]
        ]
        for start in range(0, len(arns), ECS_DESCRIBE_TASKS_LIMIT):
            chunk = arns[start : start + ECS_DESCRIBE_TASKS_LIMIT]
            for task in self.ecs.describe_tasks(cluster=cluster, tasks=chunk)["tasks"]:
                # A service's tasks are in group "service:<name>"; the filter keeps the answer right
                # where a ListTasks implementation ignores serviceName.
                if task.get("lastStatus") != "RUNNING" or task.get("group") != f"service:{service}":
                    continue
                digests = tuple(c["imageDigest"] for c in task.get("containers", []) if c.get("imageDigest"))
                yield RunningTask(
                    task["taskArn"], task["taskDefinitionArn"], digests, task.get("containerInstanceArn")
                )


def describe_service(ecs: Any, cluster: str, service: str) -> dict[str, Any]:
    """One ECS service, or a clear error when the cluster or the service does not exist."""
    found = existing_services(ecs, cluster, [service])
    if service not in found:
        raise ParkbrakeError(f"no ECS service {service!r} in cluster {cluster!r}")
    return found[service]


# -- Where traffic goes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Topology:
    """A blue-green service: one ECS service and target group per colour, one weighted listener."""

    cluster: str
    service: str
    services: dict[str, str]  # colour → ECS service name
    target_groups: dict[str, str]  # colour → target group ARN
    listener_arn: str


def find_topology(ecs: Any, elbv2: Any, cluster: str, service: str) -> Topology | None:
    """The colours of ``service`` and their listener; None when ``service`` is a plain ECS service."""
    coloured = {colour: names.ecs_service(service, colour) for colour in names.COLOURS}
    found = existing_services(ecs, cluster, [*coloured.values(), service])
    if not any(name in found for name in coloured.values()):
        if service in found:
            return None
        known = ", ".join(sorted(list_service_names(ecs, cluster))) or "none"
        raise ParkbrakeError(
            f"unknown service {service!r}: cluster {cluster} has no such service (its services: {known})"
        )
    missing = [name for name in coloured.values() if name not in found]
    if missing:
        raise ParkbrakeError(f"{service} is half blue-green: cluster {cluster} has no {', '.join(missing)}")
    target_groups = {}
    for colour, name in coloured.items():
        arns = [
            lb["targetGroupArn"] for lb in found[name].get("loadBalancers", []) if lb.get("targetGroupArn")
        ]
        if len(arns) != 1:
            raise ParkbrakeError(f"{name} must be behind exactly one target group (it has {len(arns)})")
        target_groups[colour] = arns[0]
    listener = _shared_listener(elbv2, target_groups.values())
    return Topology(cluster, service, coloured, target_groups, listener["ListenerArn"])


def existing_services(ecs: Any, cluster: str, wanted: Sequence[str]) -> dict[str, dict[str, Any]]:
    try:
        answer = ecs.describe_services(cluster=cluster, services=list(wanted))
    except ecs.exceptions.ClusterNotFoundException:
        raise ParkbrakeError(f"no ECS cluster {cluster!r}: is the stack deployed in this region?") from None
    return {item["serviceName"]: item for item in answer["services"] if item.get("status") != "INACTIVE"}


def list_service_names(ecs: Any, cluster: str) -> list[str]:
    pages = ecs.get_paginator("list_services").paginate(cluster=cluster)
    return [arn.rsplit("/", 1)[-1] for page in pages for arn in page["serviceArns"]]


def _shared_listener(elbv2: Any, target_groups: Iterable[str]) -> dict[str, Any]:
    wanted = set(target_groups)
    groups = elbv2.describe_target_groups(TargetGroupArns=sorted(wanted))["TargetGroups"]
    for load_balancer in sorted({arn for group in groups for arn in group.get("LoadBalancerArns", [])}):
        pages = elbv2.get_paginator("describe_listeners").paginate(LoadBalancerArn=load_balancer)
        for listener in (item for page in pages for item in page["Listeners"]):
            if wanted <= set(forward_weights(listener)):
                return dict(listener)
    raise ParkbrakeError("no load balancer listener forwards to both colours' target groups")


def forward_weights(listener: Mapping[str, Any]) -> dict[str, int]:
    """Target group ARN → weight of the listener's default weighted forward."""
    for action in listener.get("DefaultActions", []):
        if action.get("Type") == "forward":
            groups = action.get("ForwardConfig", {}).get("TargetGroups", [])
            if groups:
                return {group["TargetGroupArn"]: group.get("Weight", 1) for group in groups}
            return {action["TargetGroupArn"]: 1} if action.get("TargetGroupArn") else {}
    return {}


def colour_weights(elbv2: Any, topology: Topology) -> dict[str, int]:
    """Colour → the listener's weight for it, read now."""
    listener = elbv2.describe_listeners(ListenerArns=[topology.listener_arn])["Listeners"][0]
    weights = forward_weights(listener)
    return {colour: weights.get(arn, 0) for colour, arn in topology.target_groups.items()}


def serving_services(ecs: Any, elbv2: Any, cluster: str, service: str) -> list[str]:
    """The ECS services that take ``service``'s traffic: its colours with weight, or the plain service."""
    topology = find_topology(ecs, elbv2, cluster, service)
    if topology is None:
        return [service]
    weights = colour_weights(elbv2, topology)
    serving = [topology.services[colour] for colour, weight in weights.items() if weight > 0]
    if not serving:
        raise ParkbrakeError(f"the listener sends no traffic to either colour of {service}")
    return serving


# -- What a task definition says ---------------------------------------------------------------------


@dataclass(frozen=True)
class TaskDefinitionFacts:
    arn: str
    name: str  # family:revision, for messages
    container: str
    image: str
    revision_label: str | None
    revision_tag: str | None

    @property
    def digest(self) -> str | None:
        return ImageReference.parse(self.image).digest

    def repository_at(self, digest: str) -> str:
        return f"{ImageReference.parse(self.image).repository}@{digest}"


def task_definition_facts(ecs: Any, arn: str, container: str | None = None) -> TaskDefinitionFacts:
    """The serving container's image and the revision records of the task definition ``arn``."""
    answer = ecs.describe_task_definition(taskDefinition=arn, include=["TAGS"])
    definition = answer["taskDefinition"]
    chosen = serving_container(definition["containerDefinitions"], container)
    tag_values = {item["key"]: item["value"] for item in answer.get("tags", [])}
    return TaskDefinitionFacts(
        arn=definition["taskDefinitionArn"],
        name=f"{definition['family']}:{definition['revision']}",
        container=chosen["name"],
        image=chosen["image"],
        revision_label=(chosen.get("dockerLabels") or {}).get(names.CONTAINER_REVISION_LABEL),
        revision_tag=tag_values.get(tags.REVISION),
    )


def serving_container(containers: Sequence[Mapping[str, Any]], name: str | None) -> Mapping[str, Any]:
    """The container named ``name`` (the load balancer's), else the only or the first essential one."""
    if name is not None:
        for container in containers:
            if container["name"] == name:
                return container
        raise ParkbrakeError(f"the task definition has no container {name!r}")
    if len(containers) == 1:
        return containers[0]
    essential = [container for container in containers if container.get("essential", True)]
    if not essential:
        raise ParkbrakeError("the task definition has no essential container")
    return essential[0]


# -- Images ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageReference:
    repository: str  # registry host and path, without tag or digest
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> ImageReference:
        name, _, digest = text.strip().partition("@")
        if digest and not DIGEST.fullmatch(digest):
            raise InputError(f"{text!r}: {digest!r} is not a sha256 digest (sha256: and 64 hex digits)")
        repository, tag = name, None
        last = name.rsplit("/", 1)[-1]
        if ":" in last:
            repository, tag = name.rsplit(":", 1)
        if not repository or not REPOSITORY.fullmatch(repository) or tag == "":
            raise InputError(f"{text!r} is not an image reference such as REGISTRY/REPO:TAG or REPO@sha256:…")
        return cls(repository, tag, digest or None)

    @property
    def ecr(self) -> tuple[str, str, str] | None:
        """(account, region, repository name) when the image lives in ECR."""
        host, _, path = self.repository.partition("/")
        match = ECR_HOST.fullmatch(host)
        return (match["account"], match["region"], path) if match and path else None


@dataclass(frozen=True)
class ResolvedImage:
    requested: str
    image: str  # what the task definition will name: REPO@sha256:… when pinned
    digest: str | None  # None only for a tag accepted with --allow-tag


def resolve_image(text: str, *, allow_tag: bool, ecr_in: Callable[[str], Any]) -> ResolvedImage:
    """Pin ``text`` to a digest: kept when given, looked up in ECR for an ECR tag.

    A tag outside ECR cannot be resolved here and may move under a running service, so it is
    refused unless ``allow_tag``. ``ecr_in(region)`` returns an ECR client for that region.
    """
    reference = ImageReference.parse(text)
    ecr = reference.ecr
    if ecr is None:
        if reference.digest:
            return ResolvedImage(text, f"{reference.repository}@{reference.digest}", reference.digest)
        if allow_tag:
            return ResolvedImage(text, text, None)
        raise InputError(
            f"{text} is a mutable tag without a digest, and only ECR tags can be resolved to one; "
            f"deploy {reference.repository}@sha256:…, push the image to ECR, or pass --allow-tag"
        )
    account, region, repository = ecr
    image_id = (
        {"imageDigest": reference.digest} if reference.digest else {"imageTag": reference.tag or "latest"}
    )
    client = ecr_in(region)
    try:
        details = client.describe_images(registryId=account, repositoryName=repository, imageIds=[image_id])
    except (client.exceptions.ImageNotFoundException, client.exceptions.RepositoryNotFoundException) as error:
        raise InputError(f"{text}: {error.response['Error']['Message']}") from None
    digest = details["imageDetails"][0]["imageDigest"]
    return ResolvedImage(text, f"{reference.repository}@{digest}", digest)


# -- The checks --------------------------------------------------------------------------------------


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
    described = describe_service(ecs, cluster, service)
    container = next((lb.get("containerName") for lb in described.get("loadBalancers", [])), None)
    rollout = source.rollout(cluster, service)
    primary = rollout.primary
    if primary is None:
        return [Check("primary-deployment", service, False, "the service has no PRIMARY deployment")]
    facts = task_definition_facts(ecs, primary.task_definition, container)
    return [
        _primary_check(
            primary, facts, rollout, service=service, revision=revision, expected=expected_deployment
        ),
        _label_check(service, revision, facts),
        _digest_check(service, facts, rollout, expected_digest),
        _other_deployments_check(service, rollout),
        _tasks_check(service, primary, facts, rollout),
    ]


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
            f"ECS rolled back: the deploy's deployment {expected} is no longer PRIMARY; "
            f"{summary} (revision {facts.revision_label or 'unlabelled'}). {primary.rollout_state_reason}".strip(),
        )
    failed = [item for item in rollout.others if item.rollout_state == "FAILED"]
    if facts.revision_label != revision and (primary.reads_as_rollback or failed):
        why = primary.rollout_state_reason or "; ".join(item.rollout_state_reason for item in failed)
        return Check(
            name,
            service,
            False,
            f"ECS rolled back (circuit breaker): {summary}, which is revision "
            f"{facts.revision_label or 'unlabelled'}, not {revision}. {why}".strip(),
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
    running = facts.digest or (next(iter(reported)) if len(reported) == 1 else None)
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
    return Check(name, service, True, f"{facts.name} runs {facts.repository_at(running)}")


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
            name, service, False, f"{len(strays)} of {len(rollout.tasks)} tasks run another task definition"
        )
    return Check(name, service, True, f"all {len(rollout.tasks)} running tasks run {facts.name}")


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
    """``parkbrake verify``: every ECS service taking ``service``'s traffic runs ``revision``."""
    checks = [
        check
        for name in serving_services(ecs, elbv2, cluster, service)
        for check in check_service(ecs, source, cluster, name, revision, expected_digest=expected_digest)
    ]
    if url:
        checks.append(check_version_endpoint(url, revision))
    return RevisionReport(service, revision, tuple(checks))
