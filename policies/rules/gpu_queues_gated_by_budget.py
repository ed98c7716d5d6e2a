"""Every Kueue ClusterQueue that admits GPUs is gated by parkbrake's budget admission check.

Kueue's quota counts GPUs, never dollars: without the ``parkbrake-budget`` check a queue admits any job its
quota allows, whatever the tenant's budget says. The check must be named in the queue's
``admissionChecksStrategy`` (or ``admissionChecks``) and exist in the stack with the controller
``parkbrake.dev/budget`` — a check of another controller's, or one nobody declares, gates nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.kubernetes_fields import (
    ADMISSION_CHECK,
    BUDGET_CONTROLLER,
    CLUSTER_QUEUE,
    GPU_RESOURCE,
    object_name,
    spec,
)
from policies.resources import items, mapping, of_type
from policies.rule import PolicyContext, PolicyRule, ResourceView, Violation


def _covers_gpus(queue: ResourceView) -> bool:
    return any(
        GPU_RESOURCE in items(mapping(group).get("coveredResources"))
        for group in items(spec(queue).get("resourceGroups"))
    )


def _named_checks(queue: ResourceView) -> set[str]:
    strategy = mapping(spec(queue).get("admissionChecksStrategy"))
    named = {str(mapping(check).get("name")) for check in items(strategy.get("admissionChecks"))}
    return named | {str(check) for check in items(spec(queue).get("admissionChecks"))}


def check_queues(resources: Sequence[ResourceView], context: PolicyContext) -> Iterator[Violation]:
    budget_checks = {
        object_name(check)
        for check in of_type(resources, ADMISSION_CHECK)
        if spec(check).get("controllerName") == BUDGET_CONTROLLER
    }
    for queue in of_type(resources, CLUSTER_QUEUE):
        if not _covers_gpus(queue):
            continue
        if not _named_checks(queue) & budget_checks:
            yield Violation(
                queue.urn,
                f"admits {GPU_RESOURCE} without the budget check; name an AdmissionCheck whose controllerName "
                f"is {BUDGET_CONTROLLER} in spec.admissionChecksStrategy.admissionChecks",
            )


RULE = PolicyRule(
    name="gpu-queues-gated-by-budget",
    description=(
        "Every Kueue ClusterQueue covering nvidia.com/gpu names, in its admission checks, an AdmissionCheck "
        "of the stack whose controller is parkbrake.dev/budget."
    ),
    enforcement="mandatory",
    check=check_queues,
)
