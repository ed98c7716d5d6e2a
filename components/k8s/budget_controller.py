"""``BudgetController``: ``parkbrake k8s controller`` as a Deployment, with its ServiceAccount and least-privilege RBAC.

It is Kueue's external admission-check controller for ``parkbrake.dev/budget``: it watches Workloads, asks
the ledger, and patches each Workload's admission-check state. Its ClusterRole grants exactly what it
requests (tests/cli/k8s/test_rbac.py runs those requests against the fake API server with the role
enforced): Workloads get/list/watch and ``workloads/status`` patch; AdmissionChecks list/watch and
``admissionchecks/status`` patch (to keep its check ``Active``); NodeClaims list/delete (a node past its
cap); Events create (core group). The park brake's grants are another role's (components/k8s/park_role.py).
It is never parked: parked queues are held, and the controller still releases reservations as admitted
work finishes.

Its container is probed: GET ``/healthz`` on port 8081 answers 503 once one of its loops (a watch, the
workers, the budget sweep) has died, so the kubelet restarts it instead of leaving a live process that
decides nothing; ``/metrics`` is on the same port. Each tenant's ``gpu_quota`` (the total across its
flavors, which Kueue cannot cap: kueue #3215) the controller reads from the stack file it loads, as it
reads the pools and caps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.common import child_of
from components.k8s.common import NAME_LABEL, REVISION_LABEL, labels, type_token
from guardrails.names import CONTROLLER_HEALTH_PATH, CONTROLLER_HEALTH_PORT

CONTROLLER = "parkbrake-budget-controller"
# (API group, resources, verbs): everything the controller may do, nothing more.
RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("kueue.x-k8s.io", ("workloads",), ("get", "list", "watch")),
    ("kueue.x-k8s.io", ("workloads/status",), ("patch",)),
    ("kueue.x-k8s.io", ("admissionchecks",), ("list", "watch")),  # its informer; never one by name
    ("kueue.x-k8s.io", ("admissionchecks/status",), ("patch",)),
    ("karpenter.sh", ("nodeclaims",), ("list", "delete")),
    ("", ("events",), ("create",)),
)


def rules_of(
    grants: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...],
) -> list[dict[str, list[str]]]:
    """(API group, resources, verbs) as RBAC policy rules."""
    return [
        {"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
        for group, resources, verbs in grants
    ]


@dataclass
class BudgetControllerArgs:
    stack: str
    namespace: str
    image: str
    revision: str
    environment: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)


def _container(args: BudgetControllerArgs) -> dict[str, Any]:
    """The controller's container: ``parkbrake k8s controller`` for the stack, its health port probed."""
    environment = [{"name": "PARKBRAKE_REVISION", "value": args.revision}] + [
        {"name": key, "value": value} for key, value in sorted(args.environment.items())
    ]
    return {
        "name": "controller",
        "image": args.image,
        "command": ["parkbrake", "k8s", "controller", "--stack", args.stack],
        "env": environment,
        "ports": [{"name": "health", "containerPort": CONTROLLER_HEALTH_PORT}],
        # A died loop answers 503 (cli/k8s/metrics.py): restarted, not left deciding
        # nothing; three misses a minute apart, so a slow ledger is not a death.
        "livenessProbe": {
            "httpGet": {"path": CONTROLLER_HEALTH_PATH, "port": "health"},
            "initialDelaySeconds": 10,
            "periodSeconds": 20,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "256Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
        },
    }


class BudgetController(pulumi.ComponentResource):
    service_account_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: BudgetControllerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(type_token("BudgetController"), name, None, opts)
        selector = {NAME_LABEL: CONTROLLER}
        object_labels = labels(args.stack, selector)
        account = k8s.core.v1.ServiceAccount(
            f"{name}-service-account",
            metadata={"name": CONTROLLER, "namespace": args.namespace, "labels": object_labels},
            opts=child_of(self),
        )
        role = k8s.rbac.v1.ClusterRole(
            f"{name}-cluster-role",
            metadata={"name": CONTROLLER, "labels": object_labels},
            rules=rules_of(RULES),
            opts=child_of(self),
        )
        binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-cluster-role-binding",
            metadata={"name": CONTROLLER, "labels": object_labels},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CONTROLLER},
            subjects=[{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": args.namespace}],
            opts=child_of(self, depends_on=[role, account]),
        )
        pod_labels = labels(args.stack, {**selector, REVISION_LABEL: args.revision})
        k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": CONTROLLER, "namespace": args.namespace, "labels": pod_labels},
            spec={
                # One replica: the ledger's admission serialises reservations, two controllers would race
                # to patch the same Workload's check.
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        "serviceAccountName": CONTROLLER,
                        "containers": [
                            _container(args),
                        ],
                    },
                },
            },
            opts=child_of(self, depends_on=[binding]),
        )
        self.service_account_name = pulumi.Output.from_input(CONTROLLER)
        self.register_outputs({"serviceAccountName": self.service_account_name})
