"""No GPU Auto Scaling group may grow past a configured number of hosts.

``maxSize`` is what a scaling policy, an ECS capacity provider or a fat-fingered ``desired`` can reach
without another review; the ceiling bounds the worst case of a pool's bill.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.resources import gpu_autoscaling_groups
from policies.rule import PolicyContext, PolicyRule, ResourceView, Violation


def ceiling_problems(resources: Sequence[ResourceView], context: PolicyContext) -> Iterator[Violation]:
    for group in gpu_autoscaling_groups(resources):
        max_size = group.inputs.get("maxSize")
        if isinstance(max_size, bool) or not isinstance(max_size, int | float):
            yield Violation(group.urn, f"maxSize is {max_size!r}, not a number of hosts")
        elif max_size > context.max_pool_size:
            yield Violation(
                group.urn,
                f"maxSize {max_size:g} is above the GPU pool ceiling of {context.max_pool_size}; "
                "lower it or raise the ceiling deliberately",
            )


RULE = PolicyRule(
    name="gpu-pool-size-ceiling",
    description="Every GPU Auto Scaling group has maxSize at or below the configured pool-size ceiling.",
    enforcement="mandatory",
    check=ceiling_problems,
    settings=("max_pool_size",),
)
