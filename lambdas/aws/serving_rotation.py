"""The sweep's path for serving hosts past their lifetime: replace first, then remove (guardrails.rotation).

Each sweep moves each such host one step: ask its group for one more host and mark it; later, once the
group has its hosts healthy, terminate it with the desired capacity decremented (the ECS capacity
provider's managed draining moves its tasks off first). A host outside an Auto Scaling group is not
rotated: the caller stops it like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from guardrails import tags
from guardrails.hosts import Host
from guardrails.rotation import GroupState, rotation_step
from guardrails.rules.base import instant
from lambdas.aws.errors import AWS_ERRORS, describe_error

log = logging.getLogger(__name__)


@dataclass
class RotationOutcome:
    dry_run: bool
    steps: list[dict[str, str]] = field(default_factory=list)  # instance_id, group, step, reason
    errors: list[dict[str, str]] = field(default_factory=list)

    @property
    def removed(self) -> list[str]:
        return [step["instance_id"] for step in self.steps if step["step"] == "remove"]


def group_states(autoscaling: Any, names: Sequence[str]) -> dict[str, GroupState]:
    states: dict[str, GroupState] = {}
    pages = autoscaling.get_paginator("describe_auto_scaling_groups").paginate(
        AutoScalingGroupNames=list(names)
    )
    for page in pages:
        for group in page["AutoScalingGroups"]:
            healthy = frozenset(
                instance["InstanceId"]
                for instance in group.get("Instances", [])
                if instance.get("LifecycleState") == "InService" and instance.get("HealthStatus") == "Healthy"
            )
            states[group["AutoScalingGroupName"]] = GroupState(
                group["AutoScalingGroupName"], group["DesiredCapacity"], group["MaxSize"], healthy
            )
    return states


def rotate_serving_hosts(
    hosts: Sequence[Host], *, ec2: Any, autoscaling: Any, now: datetime, dry_run: bool
) -> RotationOutcome:
    """One rotation step for each of ``hosts`` (serving, in a group, past their lifetime)."""
    outcome = RotationOutcome(dry_run=dry_run)
    try:
        states = group_states(autoscaling, sorted({host.autoscaling_group or "" for host in hosts}))
    except AWS_ERRORS as error:
        for host in hosts:
            outcome.errors.append(
                {"instance_id": host.instance_id, "action": "rotate", "error": describe_error(error)}
            )
        return outcome
    for host in hosts:
        group = states.get(host.autoscaling_group or "")
        if group is None:
            outcome.errors.append(
                {
                    "instance_id": host.instance_id,
                    "action": "rotate",
                    "error": f"group {host.autoscaling_group} not found",
                }
            )
            continue
        rotation = rotation_step(host.instance_id, host.tags, group)
        outcome.steps.append(
            {
                "instance_id": host.instance_id,
                "group": group.name,
                "step": rotation.step,
                "reason": rotation.reason,
            }
        )
        log.info(
            "%s %s (%s): %s",
            "would rotate" if dry_run else "rotating",
            host.instance_id,
            rotation.step,
            rotation.reason,
        )
        if rotation.step == "blocked":
            # It keeps serving, but someone has to raise the pool's max: an error pages.
            outcome.errors.append(
                {"instance_id": host.instance_id, "action": "rotate", "error": rotation.reason}
            )
        if dry_run or rotation.step in ("wait", "blocked"):
            continue
        try:
            if rotation.step == "replace":
                autoscaling.set_desired_capacity(
                    AutoScalingGroupName=group.name, DesiredCapacity=group.desired + 1, HonorCooldown=False
                )
                ec2.create_tags(
                    Resources=[host.instance_id], Tags=[{"Key": tags.ROTATING_SINCE, "Value": instant(now)}]
                )
                states[group.name] = replace(group, desired=group.desired + 1)
            else:
                autoscaling.terminate_instance_in_auto_scaling_group(
                    InstanceId=host.instance_id, ShouldDecrementDesiredCapacity=True
                )
                states[group.name] = replace(
                    group, desired=group.desired - 1, healthy=group.healthy - {host.instance_id}
                )
        except AWS_ERRORS as error:
            log.error("could not rotate %s: %s", host.instance_id, describe_error(error))
            outcome.errors.append(
                {"instance_id": host.instance_id, "action": "rotate", "error": describe_error(error)}
            )
    return outcome
