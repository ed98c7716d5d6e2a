"""Reading pulumi-aws resources the way several rules need to: type tokens, tags, instance types, GPU pools.

Inputs arrive as plain dicts and lists from ``plan`` and as read-only Mapping/Sequence proxies from the
Pulumi engine, so these helpers test for the abstract types only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from guardrails import tags
from guardrails.instance_types import is_accelerator
from policies.rule import ResourceView

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
AUTOSCALING_GROUP = "aws:autoscaling/group:Group"
LAMBDA_FUNCTION = "aws:lambda/function:Function"
SCHEDULE = "aws:scheduler/schedule:Schedule"
METRIC_ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"


def mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def items(value: object) -> Sequence[Any]:
    """A list input, or nothing; a string is not a list of anything here."""
    return value if isinstance(value, Sequence) and not isinstance(value, str) else ()


def text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def of_type(resources: Sequence[ResourceView], *types: str) -> list[ResourceView]:
    return [resource for resource in resources if resource.type in types]


def tags_of(resource: ResourceView) -> dict[str, str]:
    """A resource's own tags: a ``{key: value}`` map, or an Auto Scaling group's ``[{key, value}]`` list."""
    raw = resource.inputs.get("tags")
    if resource.type == AUTOSCALING_GROUP:
        return {
            str(tag["key"]): str(tag.get("value", ""))
            for tag in map(mapping, items(raw))
            if isinstance(tag.get("key"), str)
        }
    return {str(key): str(value) for key, value in mapping(raw).items()}


def host_tags(resource: ResourceView) -> dict[str, str] | None:
    """The tags an EC2 host gets: an instance's own, or a launch template's ``instance`` tag specification.

    None for a launch template without an ``instance`` tag specification.
    """
    if resource.type != LAUNCH_TEMPLATE:
        return tags_of(resource)
    found = None
    for specification in map(mapping, items(resource.inputs.get("tagSpecifications"))):
        if specification.get("resourceType") == "instance":
            found = {
                **(found or {}),
                **{str(k): str(v) for k, v in mapping(specification.get("tags")).items()},
            }
    return found


def instance_types_of(resource: ResourceView) -> list[str]:
    """Every instance type a launch template, instance or Auto Scaling group (mixed instances) names."""
    named = [resource.inputs.get("instanceType")]
    if resource.type == AUTOSCALING_GROUP:
        policy = mapping(resource.inputs.get("mixedInstancesPolicy"))
        overrides = items(mapping(policy.get("launchTemplate")).get("overrides"))
        named += [mapping(override).get("instanceType") for override in overrides]
    return [name for name in named if isinstance(name, str)]


def is_accelerator_host(resource: ResourceView) -> bool:
    """A launch template or instance of an accelerated-computing instance type."""
    return resource.type in (LAUNCH_TEMPLATE, INSTANCE) and any(
        is_accelerator(name) for name in instance_types_of(resource)
    )


def accelerator_hosts(resources: Sequence[ResourceView]) -> list[ResourceView]:
    return [resource for resource in resources if is_accelerator_host(resource)]


def gpu_autoscaling_groups(resources: Sequence[ResourceView]) -> Iterator[ResourceView]:
    """Auto Scaling groups that launch accelerator hosts.

    A group's launch template id is only known after deployment, so a group counts as a GPU pool when it
    shares its parent component with an accelerator launch template, names an accelerator type in its
    mixed-instances overrides, or carries the ``parkbrake:pool`` tag.
    """
    gpu_parents = {host.parent for host in accelerator_hosts(resources) if host.parent is not None}
    for group in of_type(resources, AUTOSCALING_GROUP):
        if (
            group.parent in gpu_parents
            or any(is_accelerator(name) for name in instance_types_of(group))
            or tags.POOL in tags_of(group)
        ):
            yield group
