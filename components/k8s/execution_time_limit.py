"""``ExecutionTimeLimit``: every GPU job a tenant queues says how long it may run, within its pool's cap.

Kueue deactivates a Workload once it has run for its ``kueue.x-k8s.io/max-exec-time-seconds`` label, and
the budget check reserves money for that long; Kueue has no default for the label (a LocalQueue cannot set
one). So, per tenant, an ``admissionregistration.k8s.io/v1`` ``ValidatingAdmissionPolicy`` (GA since
Kubernetes 1.30) and its ``ValidatingAdmissionPolicyBinding`` over the tenant's namespaces make the API
server refuse, on create and update of a ``batch/v1`` Job:

- a Job whose containers ask for ``nvidia.com/gpu`` and that names no LocalQueue
  (``kueue.x-k8s.io/queue-name``): it would run outside Kueue's quota and the budget check;
- a Job that names a queue without the label, or with a value that is not whole seconds from 1 to the cap.

The cap is that of the tenant's pool whose instance type the Job's pod template selects
(``node.kubernetes.io/instance-type``, which Kueue also writes there on admission), else the smallest
of the tenant's pools' caps: a Job that may land on any of them must fit the one that expires first
(Karpenter's ``expireAfter``). A tenant with no training pool has no cap: its queued Jobs are refused.
The policy fails closed (``failurePolicy: Fail``) and denies (``validationActions: [Deny]``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi

from components.common import child_of
from components.k8s.common import GPU_RESOURCE, TENANT_LABEL, KubernetesObject, labels, type_token

ADMISSION_API = "admissionregistration.k8s.io/v1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# Whole seconds, ASCII digits only, at most nine of them (31 years): int() never sees anything else.
SECONDS_PATTERN = "^[0-9]{1,9}$"


@dataclass(frozen=True)
class TenantCaps:
    tenant: str
    caps: Mapping[str, int]  # instance type → the cap, in seconds, of the tenant's pool of that type


@dataclass
class ExecutionTimeLimitArgs:
    stack: str
    tenants: Sequence[TenantCaps]

    def __post_init__(self) -> None:
        names = [tenant.tenant for tenant in self.tenants]
        if len(set(names)) != len(names):
            raise ValueError(f"tenant names repeat: {names}")


def policy_name(tenant: str) -> str:
    return f"parkbrake-max-exec-time-{tenant}"


def _cel_string(text: str) -> str:
    return json.dumps(text)  # a JSON string literal is a CEL string literal for this alphabet


def _asks_for_gpus() -> str:
    resources = " || ".join(
        f"(has(c.resources.{kind}) && {_cel_string(GPU_RESOURCE)} in c.resources.{kind})"
        for kind in ("limits", "requests")
    )
    return f"variables.pod.containers.exists(c, has(c.resources) && ({resources}))"


def policy_spec(tenant: TenantCaps) -> dict[str, object]:
    """The policy's spec: its variables, then the two refusals, each with a message that says what to set."""
    caps = (
        "{"
        + ", ".join(f"{_cel_string(kind)}: {seconds}" for kind, seconds in sorted(tenant.caps.items()))
        + "}"
    )
    smallest = min(tenant.caps.values(), default=0)
    queue, limit, instance_type = (
        _cel_string(label) for label in (QUEUE_LABEL, MAX_EXEC_TIME_LABEL, INSTANCE_TYPE_LABEL)
    )
    if tenant.caps:
        limit_message = (
            f"'set label {MAX_EXEC_TIME_LABEL} to whole seconds from 1 to ' + string(variables.cap) + "
            f"', the cap of tenant {tenant.tenant}: its ' + (variables.instanceType in variables.caps"
            f" ? variables.instanceType + ' pool' : 'pool that expires first (select {INSTANCE_TYPE_LABEL}"
            f" for another)')"
        )
    else:
        limit_message = _cel_string(
            f"tenant {tenant.tenant} has no training pool: its queues admit no GPU job"
        )
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": ["batch"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["jobs"],
                }
            ]
        },
        "variables": [
            {"name": "labels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
            {"name": "pod", "expression": "object.spec.template.spec"},
            {"name": "queued", "expression": f"{queue} in variables.labels"},
            {"name": "gpus", "expression": _asks_for_gpus()},
            {"name": "caps", "expression": caps},
            {
                "name": "instanceType",
                "expression": (
                    f"has(variables.pod.nodeSelector) && {instance_type} in variables.pod.nodeSelector"
                    f" ? variables.pod.nodeSelector[{instance_type}] : ''"
                ),
            },
            {
                "name": "cap",
                "expression": (
                    f"variables.instanceType in variables.caps ? variables.caps[variables.instanceType] : {smallest}"
                ),
            },
            {"name": "limit", "expression": f"{limit} in variables.labels ? variables.labels[{limit}] : ''"},
        ],
        "validations": [
            {
                "expression": "variables.queued || !variables.gpus",
                "message": (
                    f"a Job asking for {GPU_RESOURCE} must name its tenant's LocalQueue: "
                    f"set label {QUEUE_LABEL}: {tenant.tenant}"
                ),
                "reason": "Forbidden",
            },
            {
                "expression": (
                    f"!variables.queued || (variables.limit.matches('{SECONDS_PATTERN}')"
                    " && int(variables.limit) >= 1 && int(variables.limit) <= variables.cap)"
                ),
                "messageExpression": limit_message,
                "reason": "Invalid",
            },
        ],
    }


class ExecutionTimeLimit(pulumi.ComponentResource):
    policies: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: ExecutionTimeLimitArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(type_token("ExecutionTimeLimit"), name, None, opts)
        for tenant in args.tenants:
            tenant_labels = labels(args.stack, {TENANT_LABEL: tenant.tenant})
            policy = KubernetesObject(
                f"{name}-policy-{tenant.tenant}",
                {
                    "apiVersion": ADMISSION_API,
                    "kind": "ValidatingAdmissionPolicy",
                    "metadata": {"name": policy_name(tenant.tenant), "labels": tenant_labels},
                    "spec": policy_spec(tenant),
                },
                opts=child_of(self),
            )
            KubernetesObject(
                f"{name}-binding-{tenant.tenant}",
                {
                    "apiVersion": ADMISSION_API,
                    "kind": "ValidatingAdmissionPolicyBinding",
                    "metadata": {"name": policy_name(tenant.tenant), "labels": tenant_labels},
                    "spec": {
                        "policyName": policy_name(tenant.tenant),
                        "validationActions": ["Deny"],
                        "matchResources": {
                            "namespaceSelector": {"matchLabels": {TENANT_LABEL: tenant.tenant}}
                        },
                    },
                },
                opts=child_of(self, depends_on=[policy]),
            )
        self.policies = pulumi.Output.from_input([policy_name(tenant.tenant) for tenant in args.tenants])
        self.register_outputs({"policies": self.policies})
