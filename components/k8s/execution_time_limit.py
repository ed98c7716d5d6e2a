"""``ExecutionTimeLimit``: every GPU job a tenant queues says how long it may run, within its pool's cap.

Kueue deactivates a Workload once it has run for its ``kueue.x-k8s.io/max-exec-time-seconds`` label (read
from the job object's labels: kueue v0.19.2 ``pkg/controller/jobframework/utils.go``), and the budget
check reserves money for that long; Kueue has no default for the label (a LocalQueue cannot set one). So,
per tenant, an ``admissionregistration.k8s.io/v1`` ``ValidatingAdmissionPolicy`` (GA since Kubernetes
1.30) and its ``ValidatingAdmissionPolicyBinding`` over the tenant's namespaces make the API server refuse,
for every kind of job Kueue runs here (:data:`JOB_KINDS`: ``batch/v1`` Job, JobSet, RayJob, PyTorchJob
and plain Pods — a rule for a kind whose CRD the cluster lacks matches nothing):

- a job whose containers (in any of its pod templates) ask for ``nvidia.com/gpu`` and that names no
  LocalQueue (``kueue.x-k8s.io/queue-name``): it would run outside Kueue's quota and the budget check;
- a job that names a queue without the label, or with a value that is not whole seconds from 1 to the cap.

It never stands in Kueue's way. Its ``matchConditions`` apply it only on CREATE and on an UPDATE that
changes the queue or the execution-time label: Kueue suspends and resumes a job by patching it
(kueue v0.19.2 ``pkg/controller/jobframework/reconciler.go`` ``stopJob``/``startJob``), and a job whose
label no longer passes (a cap lowered since) must still be suspended by ``HoldAndDrain`` or a budget stop.
An object whose controller is one of the covered kinds (a JobSet's Jobs, a Job's Pods) is its owner's,
judged there, as Kueue leaves it to its owner (``IsOwnerManagedByKueueForObject`` in
``pkg/controller/jobframework/integrationmanager.go``).

The cap is, for each pod template asking for GPUs, that of the tenant's pool whose instance type it
selects (``node.kubernetes.io/instance-type``, which Kueue also writes there on admission), else the
smallest of the tenant's pools' caps: a job that may land on any of them must fit the one that expires
first (Karpenter's ``expireAfter``). A tenant with no training pool has no cap: its queued jobs are
refused. The policy fails closed (``failurePolicy: Fail``) and denies (``validationActions: [Deny]``).
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
class JobKind:
    """A kind of job Kueue admits (kueue v0.19.2 ``pkg/controller/jobs/<kind>``) and where its pods are."""

    group: str
    version: str
    kind: str
    resource: str
    pod_specs: str  # CEL: the list of the object's pod specs


JOB_KINDS = (
    JobKind("batch", "v1", "Job", "jobs", "[object.spec.template.spec]"),
    # jobset v0.10 api/jobset/v1alpha2/jobset_types.go: replicatedJobs[].template is a JobTemplateSpec
    JobKind(
        "jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets",
        "has(object.spec.replicatedJobs) ? object.spec.replicatedJobs.map(r, r.template.spec.template.spec) : []",
    ),
    # kuberay ray-operator/apis/ray/v1/rayjob_types.go, raycluster_types.go: head and worker groups
    JobKind(
        "ray.io", "v1", "RayJob", "rayjobs",
        "has(object.spec.rayClusterSpec) ? [object.spec.rayClusterSpec.headGroupSpec.template.spec]"
        " + (has(object.spec.rayClusterSpec.workerGroupSpecs)"
        " ? object.spec.rayClusterSpec.workerGroupSpecs.map(g, g.template.spec) : []) : []",
    ),
    # kubeflow training-operator pkg/apis/kubeflow.org/v1/pytorch_types.go: a map of replica specs
    JobKind(
        "kubeflow.org", "v1", "PyTorchJob", "pytorchjobs",
        "object.spec.pytorchReplicaSpecs.map(k, object.spec.pytorchReplicaSpecs[k].template.spec)",
    ),
    JobKind("", "v1", "Pod", "pods", "[object.spec]"),
)  # fmt: skip


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


def _asks_for_gpus(pod: str) -> str:
    resources = " || ".join(
        f"(has(c.resources.{kind}) && {_cel_string(GPU_RESOURCE)} in c.resources.{kind})"
        for kind in ("limits", "requests")
    )
    return f"{pod}.containers.exists(c, has(c.resources) && ({resources}))"


def _pod_specs() -> str:
    """CEL: the request's object's pod specs, by its kind (``request.resource``)."""
    expression = "[]"
    for kind in reversed(JOB_KINDS):
        expression = (
            f"request.resource.group == {_cel_string(kind.group)}"
            f" && request.resource.resource == {_cel_string(kind.resource)} ? ({kind.pod_specs}) : {expression}"
        )
    return expression


def _label(name: str, of: str) -> str:
    return f"(has({of}.metadata.labels) && {_cel_string(name)} in {of}.metadata.labels ? {of}.metadata.labels[{_cel_string(name)}] : '')"


def match_conditions() -> list[dict[str, str]]:
    """When the policy applies at all (every condition true): a create, or an update that changes what it
    judges (the queue or the execution-time label); never an object its covered owner answers for."""
    changed = " || ".join(
        f"{_label(label, 'object')} != {_label(label, 'oldObject')}"
        for label in (QUEUE_LABEL, MAX_EXEC_TIME_LABEL)
    )
    owners = ", ".join(
        _cel_string(f"{kind.group}/{kind.version}" if kind.group else kind.version)
        + f": {_cel_string(kind.kind)}"
        for kind in JOB_KINDS
    )
    return [
        {"name": "creates-or-relabels", "expression": f"request.operation == 'CREATE' || {changed}"},
        {
            "name": "not-its-owners",
            "expression": (
                "!has(object.metadata.ownerReferences) || !object.metadata.ownerReferences.exists(r,"
                f" has(r.controller) && r.controller && r.apiVersion in {{{owners}}}"
                f" && {{{owners}}}[r.apiVersion] == r.kind)"
            ),
        },
    ]


def _cap_of(instance_type: str, smallest: int) -> str:
    """CEL: the cap of the tenant's pool of ``instance_type`` (an expression), else the smallest."""
    return f"({instance_type} in variables.caps ? variables.caps[{instance_type}] : {smallest})"


def _variables(tenant: TenantCaps) -> list[dict[str, str]]:
    """What the validations read, in order: the labels, the GPU pod templates, the caps and types."""
    caps = (
        "{"
        + ", ".join(f"{_cel_string(kind)}: {seconds}" for kind, seconds in sorted(tenant.caps.items()))
        + "}"
    )
    instance_type = _cel_string(INSTANCE_TYPE_LABEL)
    return [
        {"name": "labels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
        {"name": "gpuPods", "expression": f"({_pod_specs()}).filter(p, {_asks_for_gpus('p')})"},
        {"name": "queued", "expression": f"{_cel_string(QUEUE_LABEL)} in variables.labels"},
        {"name": "gpus", "expression": "size(variables.gpuPods) > 0"},
        {"name": "caps", "expression": caps},
        {
            # the instance type each GPU pod template selects ('' none); a queued job without one: ['']
            "name": "types",
            "expression": (
                f"size(variables.gpuPods) == 0 ? [''] : variables.gpuPods.map(p, has(p.nodeSelector)"
                f" && {instance_type} in p.nodeSelector ? p.nodeSelector[{instance_type}] : '')"
            ),
        },
        # the first GPU pod template's cap: for the message
        {"name": "cap", "expression": _cap_of("variables.types[0]", min(tenant.caps.values(), default=0))},
        {"name": "limit", "expression": _label(MAX_EXEC_TIME_LABEL, "object")},
    ]


def policy_spec(tenant: TenantCaps) -> dict[str, object]:
    """The policy's spec: when it applies, its variables, then the two refusals, each with a message that
    says what to set."""
    smallest = min(tenant.caps.values(), default=0)
    if tenant.caps:
        limit_message = (
            f"'set label {MAX_EXEC_TIME_LABEL} to whole seconds from 1 to ' + string(variables.cap) + "
            f"', the cap of tenant {tenant.tenant}: its ' + (variables.types[0] in variables.caps"
            f" ? variables.types[0] + ' pool' : 'pool that expires first (select {INSTANCE_TYPE_LABEL}"
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
                    "apiGroups": [kind.group],
                    "apiVersions": [kind.version],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [kind.resource],
                }
                for kind in JOB_KINDS
            ]
        },
        "matchConditions": match_conditions(),
        "variables": _variables(tenant),
        "validations": [
            {
                "expression": "variables.queued || !variables.gpus",
                "messageExpression": "'a ' + object.kind + "
                + _cel_string(
                    f" asking for {GPU_RESOURCE} must name its tenant's LocalQueue: "
                    f"set label {QUEUE_LABEL}: {tenant.tenant}"
                ),
                "reason": "Forbidden",
            },
            {
                "expression": (
                    f"!variables.queued || (variables.limit.matches('{SECONDS_PATTERN}')"
                    " && int(variables.limit) >= 1"
                    f" && variables.types.all(t, int(variables.limit) <= {_cap_of('t', smallest)}))"
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
