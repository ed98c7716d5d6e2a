"""Reading what a stack has in AWS, by the names in ``guardrails.names`` and the tags in ``guardrails.tags``.

Shared by ``park --now``/``unpark --now``, ``status``, ``reap`` and ``schedule list``; every listing is
paginated or batched to the API's own limit, so the number of calls grows with pages, not with resources.
A stack's ECS services are listed by ``cli/oncall/ecs.py`` (``cluster_services``), the home of every ECS call.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from guardrails import names, tags
from guardrails.errors import InputError

ECS_DESIRED_COUNT = "ecs:service:DesiredCount"
DESCRIBE_SCALABLE_TARGETS_LIMIT = 50


def managed_groups(autoscaling: Any, stack: str) -> Iterator[dict[str, Any]]:
    """The stack's Auto Scaling groups under guardrails (``parkbrake:stack`` = stack, ``managed`` = true)."""
    filters = [
        {"Name": f"tag:{tags.STACK}", "Values": [stack]},
        {"Name": f"tag:{tags.MANAGED}", "Values": ["true"]},
    ]
    for page in autoscaling.get_paginator("describe_auto_scaling_groups").paginate(Filters=filters):
        yield from page["AutoScalingGroups"]


def service_resource_id(cluster: str, service_name: str) -> str:
    """Application Auto Scaling's id for an ECS service."""
    return f"service/{cluster}/{service_name}"


def service_scalable_targets(scaling: Any, resource_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Registered desired-count targets of these ECS services, by resource id."""
    targets: dict[str, dict[str, Any]] = {}
    for start in range(0, len(resource_ids), DESCRIBE_SCALABLE_TARGETS_LIMIT):
        for target in scaling.describe_scalable_targets(
            ServiceNamespace="ecs",
            ResourceIds=resource_ids[start : start + DESCRIBE_SCALABLE_TARGETS_LIMIT],
            ScalableDimension=ECS_DESIRED_COUNT,
        )["ScalableTargets"]:
            targets[target["ResourceId"]] = target
    return targets


def ecs_tags(resource: dict[str, Any]) -> dict[str, str]:
    """ECS spells tags ``[{"key", "value"}]``."""
    return {tag["key"]: tag["value"] for tag in resource.get("tags") or []}


def park_parameter_value(ssm: Any, stack: str) -> str | None:
    """The SSM park parameter's text, or None when the stack has none in this region."""
    try:
        return str(ssm.get_parameter(Name=names.park_parameter(stack))["Parameter"]["Value"])
    except ssm.exceptions.ParameterNotFound:
        return None


def unknown_stack(
    problem: str,
    stack: str,
    regions: Sequence[str],
    ssm_of: Callable[[str], Any],
    *,
    region_flag: str = "--region",
) -> InputError:
    """A ``--stack`` with nothing where a command looked: bad input (exit 2), naming the stack given and
    the stacks that are deployed there (their park parameters), so a typo shows its correction."""
    from botocore.exceptions import BotoCoreError, ClientError

    from lambdas.aws.ec2_hosts import live_stacks

    try:
        deployed = sorted({found for region in regions for found in live_stacks(ssm_of(region))} - {stack})
    except (BotoCoreError, ClientError):  # no right to list them: the error still names the stack given
        return InputError(f"{problem} — check --stack and {region_flag}")
    if not deployed:
        return InputError(f"{problem} — no stack is deployed in {', '.join(regions)}; check {region_flag}")
    closest = difflib.get_close_matches(stack, deployed, n=1)
    guess = f"did you mean --stack {closest[0]}? " if closest else ""
    return InputError(
        f"{problem} — {guess}stacks deployed there: {', '.join(deployed)}; check --stack and {region_flag}"
    )
