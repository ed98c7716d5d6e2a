"""The task definition a deploy registers: a copy of the serving one, pinned to the image's digest
and labelled with the revision (Docker label, environment variable, tag)."""

from __future__ import annotations

from typing import Any

from cli.oncall.deploy.revisions import TaskDefinitionFacts
from guardrails import names, tags

# The variable the container reads its revision from (e.g. to answer /version).
REVISION_ENVIRONMENT = "PARKBRAKE_REVISION"
# What RegisterTaskDefinition takes back from DescribeTaskDefinition (besides the containers and tags).
TASK_DEFINITION_FIELDS = (
    "family",
    "taskRoleArn",
    "executionRoleArn",
    "networkMode",
    "volumes",
    "placementConstraints",
    "requiresCompatibilities",
    "cpu",
    "memory",
    "pidMode",
    "ipcMode",
    "proxyConfiguration",
    "inferenceAccelerators",
    "ephemeralStorage",
    "runtimePlatform",
)


def register_pinned(ecs: Any, serving: TaskDefinitionFacts, image: str, revision: str) -> tuple[str, str]:
    """Register the copy; its ARN and ``family:revision``."""
    answer = ecs.describe_task_definition(taskDefinition=serving.arn, include=["TAGS"])
    template = answer["taskDefinition"]
    containers = [
        _pinned(container, image, revision) if container["name"] == serving.container else container
        for container in template["containerDefinitions"]
    ]
    labels = [item for item in answer.get("tags", []) if item["key"] != tags.REVISION]
    registered = ecs.register_task_definition(
        **{key: template[key] for key in TASK_DEFINITION_FIELDS if key in template},
        containerDefinitions=containers,
        tags=[*labels, {"key": tags.REVISION, "value": revision}],
    )["taskDefinition"]
    return str(registered["taskDefinitionArn"]), f"{registered['family']}:{registered['revision']}"


def _pinned(container: dict[str, Any], image: str, revision: str) -> dict[str, Any]:
    """The serving container on the pinned image, its label and environment naming the revision."""
    environment = [item for item in container.get("environment", []) if item["name"] != REVISION_ENVIRONMENT]
    return {
        **container,
        "image": image,
        "dockerLabels": {**container.get("dockerLabels", {}), names.CONTAINER_REVISION_LABEL: revision},
        "environment": [*environment, {"name": REVISION_ENVIRONMENT, "value": revision}],
    }
