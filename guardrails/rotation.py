"""Serving hosts are rotated at their maximum lifetime, not stopped (Karpenter's ``expireAfter``).

A host tagged ``parkbrake:serving=true`` (an inference pool's) that the sweep finds past its deadline
is replaced before it goes: first its group is asked for one more host and the old one is marked
``parkbrake:rotating-since``; once the group has as many healthy in-service hosts as it wants, the
marked one leaves with the desired capacity decremented (the capacity provider's managed draining
moves its tasks and lets the load balancer drain them first). So the sweep never removes a serving
host while it is the only healthy one. Pure: the reaper reads the group and applies the step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from guardrails import tags

Step = Literal["replace", "wait", "remove", "blocked"]


@dataclass(frozen=True)
class GroupState:
    name: str
    desired: int
    max_size: int
    healthy: frozenset[str]  # in service and healthy, as the group sees them


@dataclass(frozen=True)
class Rotation:
    step: Step
    reason: str


def is_serving(host_tags: Mapping[str, str]) -> bool:
    return host_tags.get(tags.SERVING, "").strip().lower() == "true"


def rotation_step(instance_id: str, host_tags: Mapping[str, str], group: GroupState) -> Rotation:
    """What to do now with a serving host past its lifetime in ``group``."""
    others = group.healthy - {instance_id}
    if tags.ROTATING_SINCE in host_tags:
        if others and len(group.healthy) >= group.desired:
            return Rotation("remove", f"its replacement is healthy ({len(others)} other healthy host(s))")
        return Rotation(
            "wait",
            f"waiting for its replacement: {len(group.healthy)} of {group.desired} hosts healthy in {group.name}",
        )
    if group.desired < group.max_size:
        return Rotation("replace", f"past its lifetime: {group.name} launches a replacement first")
    return Rotation(
        "blocked",
        f"past its lifetime but {group.name} is at its maximum ({group.max_size}), so no replacement can "
        "start and it keeps serving; raise the pool's max by one to let it rotate",
    )
