"""The task definition a deploy registers: a copy of the serving one, pinned to the image's digest
and labelled with the revision (Docker label, environment variable, tag). Pure: ``start.py`` reads the
serving one and registers the copy, both through ``cli/oncall/ecs.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def pinned_definition(
    described: Mapping[str, Any], container: str, image: str, revision: str
) -> dict[str, Any]:
    """RegisterTaskDefinition's arguments for the copy of ``described`` (a DescribeTaskDefinition
    answer with its tags): ``container`` on ``image``, labelled, and the revision tag replaced."""
    template = described["taskDefinition"]
    containers = [
        _pinned(item, image, revision) if item["name"] == container else item
        for item in template["containerDefinitions"]
    ]
    labels = [item for item in described.get("tags", []) if item["key"] != tags.REVISION]
    return {
        **{key: template[key] for key in TASK_DEFINITION_FIELDS if key in template},
        "containerDefinitions": containers,
        "tags": [*labels, {"key": tags.REVISION, "value": revision}],
    }


def _pinned(container: dict[str, Any], image: str, revision: str) -> dict[str, Any]:
    """The serving container on the pinned image, its label and environment naming the revision."""
    environment = [item for item in container.get("environment", []) if item["name"] != REVISION_ENVIRONMENT]
    return {
        **container,
        "image": image,
        "dockerLabels": {**container.get("dockerLabels", {}), names.CONTAINER_REVISION_LABEL: revision},
        "environment": [*environment, {"name": REVISION_ENVIRONMENT, "value": revision}],
    }
