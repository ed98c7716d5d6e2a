"""Every tenant namespace a GPU ClusterQueue admits is bound to a policy that makes Jobs carry their runtime.

Kueue deactivates a Workload only at its ``kueue.x-k8s.io/max-exec-time-seconds`` label, and nothing in
Kueue requires or defaults it: without an admission policy a job runs until its node expires, and the
budget check reserves money for a guess. Each namespace a gated queue's ``namespaceSelector`` matches must
be matched by a ``ValidatingAdmissionPolicyBinding`` that denies (``validationActions`` with ``Deny``),
whose ``ValidatingAdmissionPolicy`` exists in the stack, fails closed (``failurePolicy: Fail``), covers
``batch/v1`` Jobs and checks the label in one of its validations.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from policies.kubernetes_fields import CLUSTER_QUEUE, GPU_RESOURCE, object_name, spec
from policies.resources import items, mapping, of_type
from policies.rule import PolicyContext, PolicyRule, ResourceView, Violation

NAMESPACE = "kubernetes:core/v1:Namespace"
POLICY = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"


def _selects(selector: Mapping[str, Any], namespace_labels: Mapping[str, Any]) -> bool:
    """A label selector's ``matchLabels`` (a selector with ``matchExpressions`` is not judged: never matches)."""
    if items(selector.get("matchExpressions")):
        return False
    wanted = mapping(selector.get("matchLabels"))
    return bool(wanted) and all(namespace_labels.get(key) == value for key, value in wanted.items())


def _covers_jobs(policy: ResourceView) -> bool:
    for entry in items(mapping(spec(policy).get("matchConstraints")).get("resourceRules")):
        rule = mapping(entry)
        if (
            {"batch", "*"} & set(items(rule.get("apiGroups")))
            and {"jobs", "*"} & set(items(rule.get("resources")))
            and {"CREATE", "*"} & set(items(rule.get("operations")))
        ):
            return True
    return False


def _enforcing(policy: ResourceView) -> bool:
    checks_label = any(
        MAX_EXEC_TIME_LABEL in str(mapping(entry).get("expression", ""))
        for entry in [*items(spec(policy).get("validations")), *items(spec(policy).get("variables"))]
    )
    return spec(policy).get("failurePolicy", "Fail") == "Fail" and _covers_jobs(policy) and checks_label


def check_jobs_carry_exec_time(
    resources: Sequence[ResourceView], context: PolicyContext
) -> Iterator[Violation]:
    policies = {object_name(policy) for policy in of_type(resources, POLICY) if _enforcing(policy)}
    binding_selectors = [
        mapping(mapping(spec(binding).get("matchResources")).get("namespaceSelector"))
        for binding in of_type(resources, BINDING)
        if spec(binding).get("policyName") in policies
        and "Deny" in items(spec(binding).get("validationActions"))
    ]
    namespaces = [
        (object_name(namespace), mapping(mapping(namespace.inputs.get("metadata")).get("labels")))
        for namespace in of_type(resources, NAMESPACE)
    ]
    for queue in of_type(resources, CLUSTER_QUEUE):
        if not any(
            GPU_RESOURCE in items(mapping(group).get("coveredResources"))
            for group in items(spec(queue).get("resourceGroups"))
        ):
            continue
        selector = mapping(spec(queue).get("namespaceSelector"))
        for name, namespace_labels in namespaces:
            if _selects(selector, namespace_labels) and not any(
                _selects(binding, namespace_labels) for binding in binding_selectors
            ):
                yield Violation(
                    queue.urn,
                    f"admits GPU jobs from namespace {name}, which no ValidatingAdmissionPolicyBinding (Deny) of "
                    f"a policy requiring {MAX_EXEC_TIME_LABEL} on batch/v1 Jobs covers; declare the stack's "
                    "ExecutionTimeLimit for the tenant",
                )


RULE = PolicyRule(
    name="gpu-jobs-carry-exec-time",
    description=(
        "Every namespace a GPU ClusterQueue admits is bound (Deny) to a ValidatingAdmissionPolicy that fails "
        "closed and requires kueue.x-k8s.io/max-exec-time-seconds on batch/v1 Jobs."
    ),
    enforcement="mandatory",
    check=check_jobs_carry_exec_time,
)
