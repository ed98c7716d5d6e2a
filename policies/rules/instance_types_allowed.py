"""Accelerator hosts use only the instance types the stack allows.

The default allow-list is every accelerator type with a price in ``guardrails/prices.json``: a type
without a price cannot be budgeted. Non-accelerator types are not this rule's business.
"""

from __future__ import annotations

from collections.abc import Iterator

from guardrails.instance_types import is_accelerator
from policies.resources import AUTOSCALING_GROUP, INSTANCE, LAUNCH_TEMPLATE, instance_types_of
from policies.rule import PolicyContext, PolicyRule, ResourceView, per_resource


def type_problems(resource: ResourceView, context: PolicyContext) -> Iterator[str]:
    for instance_type in instance_types_of(resource):
        if is_accelerator(instance_type) and instance_type not in context.allowed_instance_types:
            allowed = ", ".join(sorted(context.allowed_instance_types)) or "none"
            yield f"instance type {instance_type} is not allowed; allowed: {allowed}"


RULE = PolicyRule(
    name="instance-types-allowed",
    description="Accelerator launch templates, instances and Auto Scaling groups use only allowed instance types.",
    enforcement="mandatory",
    check=per_resource((LAUNCH_TEMPLATE, INSTANCE, AUTOSCALING_GROUP), type_problems),
    settings=("allowed_instance_types",),
)
