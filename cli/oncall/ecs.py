"""Every ECS call of ``cli/``: what ECS reports, and what a deploy, a rollback, an abort, ``verify``,
``status`` and ``park --now``/``unpark --now`` change.

It sits beside the engines, not inside one, so that every engine and shared helper may call it
(import-linter keeps ``park`` and ``stack_inventory.py`` off the deploy engine); it imports no engine.

What ECS's scheduler has done (deployments, running tasks) is read through :class:`RolloutSource`;
:class:`EcsRolloutSource` is the real one. moto does not run an ECS scheduler, so tests supply their
own source (see ``docs/deploy.md``).

A COMPLETED rollout alone proves nothing: when ECS's deployment circuit breaker rolls a deployment
back, it starts a *new* PRIMARY deployment of the *old* task definition and reports it COMPLETED, and
boto's ``services_stable`` waiter passes. So the checks (``revision_checks.py``) look at what the
PRIMARY deployment runs, and a deploy also compares the PRIMARY deployment's id with the one its own
update created.

No other module calls ECS; ``tests/test_aws_conversations.py`` fails naming any that does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from guardrails import names, tags
from guardrails.errors import InputError, ParkbrakeError

# Words ECS puts in a rollout reason or event when the circuit breaker reverts a deployment.
ROLLBACK_WORDS = ("circuit breaker", "rolling back", "rolled back", "rollback")
ECS_DESCRIBE_TASKS_LIMIT = 100
ECS_DESCRIBE_SERVICES_LIMIT = 10


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


def task_definition_facts(ecs: Any, arn: str, container: str | None = None) -> TaskDefinitionFacts:
    """The serving container's image and the revision records of the task definition ``arn``."""
    answer = describe_task_definition(ecs, arn)
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


def describe_task_definition(ecs: Any, arn: str) -> dict[str, Any]:
    """The task definition ``arn`` with its tags (where the revision and the verified mark live)."""
    answer: dict[str, Any] = ecs.describe_task_definition(taskDefinition=arn, include=["TAGS"])
    return answer


def family_task_definitions(ecs: Any, family: str) -> list[str]:
    """The ACTIVE task definitions of ``family`` exactly (the prefix also matches longer families)."""
    return [
        arn
        for page in ecs.get_paginator("list_task_definitions").paginate(familyPrefix=family, status="ACTIVE")
        for arn in page["taskDefinitionArns"]
        if arn.rsplit("/", 1)[-1].rsplit(":", 1)[0] == family
    ]


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


def cluster_services(ecs: Any, cluster: str) -> list[dict[str, Any]]:
    """The ACTIVE services of ``cluster`` with their tags, by name; none when the cluster does not
    exist (``status``, ``park --now`` and ``unpark --now``)."""
    try:
        service_names = list_service_names(ecs, cluster)
    except ecs.exceptions.ClusterNotFoundException:
        return []
    services: list[dict[str, Any]] = []
    for start in range(0, len(service_names), ECS_DESCRIBE_SERVICES_LIMIT):
        batch = service_names[start : start + ECS_DESCRIBE_SERVICES_LIMIT]
        described = ecs.describe_services(cluster=cluster, services=batch, include=["TAGS"])["services"]
        services.extend(service for service in described if service.get("status") == "ACTIVE")
    return sorted(services, key=lambda service: service["serviceName"])


# -- What a deploy changes ---------------------------------------------------------------------------


def register_task_definition(ecs: Any, definition: Mapping[str, Any]) -> tuple[str, str]:
    """Register ``definition`` (RegisterTaskDefinition's arguments: a deploy's pinned copy, made by
    ``deploy/task_definition_copy.py``); its ARN and ``family:revision``."""
    registered = ecs.register_task_definition(**definition)["taskDefinition"]
    return str(registered["taskDefinitionArn"]), f"{registered['family']}:{registered['revision']}"


def start_service(
    ecs: Any, *, cluster: str, service: str, task_definition: str, desired: int, capacity_provider: str
) -> str | None:
    """Run ``task_definition`` on ``service`` with ``desired`` tasks on the capacity provider, as a new
    deployment; the id of the PRIMARY deployment ECS answers (None when it lists none)."""
    answer = ecs.update_service(
        cluster=cluster,
        service=service,
        taskDefinition=task_definition,
        desiredCount=desired,
        capacityProviderStrategy=[{"capacityProvider": capacity_provider, "weight": 1}],
        forceNewDeployment=True,
    )
    primary = next((d for d in answer["service"].get("deployments", []) if d["status"] == "PRIMARY"), None)
    return str(primary["id"]) if primary else None


def scale_service_to_zero(ecs: Any, cluster: str, service: str) -> None:
    set_desired_count(ecs, cluster, service, 0)


def set_desired_count(ecs: Any, cluster: str, service: str, desired: int) -> None:
    """The service's desired task count, and nothing else (``park --now`` and ``unpark --now``)."""
    ecs.update_service(cluster=cluster, service=service, desiredCount=desired)


def container_hosts(ecs: Any, cluster: str, container_instances: set[str]) -> set[str]:
    """The EC2 instances behind these container instances."""
    if not container_instances:
        return set()
    described = ecs.describe_container_instances(
        cluster=cluster, containerInstances=sorted(container_instances)
    )["containerInstances"]
    return {item["ec2InstanceId"] for item in described}


def tag_resource(ecs: Any, arn: str, key: str, value: str) -> None:
    """One tag on an ECS resource (a task definition's verified mark, a parked service's record)."""
    ecs.tag_resource(resourceArn=arn, tags=[{"key": key, "value": value}])


def untag_resource(ecs: Any, arn: str, key: str) -> None:
    ecs.untag_resource(resourceArn=arn, tagKeys=[key])
