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

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
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


def existing_services(ecs: Any, cluster: str, wanted: Sequence[str]) -> dict[str, dict[str, Any]]:
    try:
        answer = ecs.describe_services(cluster=cluster, services=list(wanted))
    except ecs.exceptions.ClusterNotFoundException:
        stack = cluster.removeprefix(names.prefix(""))  # the cluster is named after the --stack given
        raise InputError(
            f"no ECS cluster {cluster!r} in {ecs.meta.region_name}: stack {stack!r} is not deployed there "
            "— check --stack and the region (AWS_REGION)"
        ) from None
    return {item["serviceName"]: item for item in answer["services"] if item.get("status") != "INACTIVE"}


def list_service_names(ecs: Any, cluster: str) -> list[str]:
    pages = ecs.get_paginator("list_services").paginate(cluster=cluster)
    return [arn.rsplit("/", 1)[-1] for page in pages for arn in page["serviceArns"]]
