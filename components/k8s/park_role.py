"""``ParkRole``: who may pull the brake on the cluster (``parkbrake k8s park --now``), and nothing more.

A ServiceAccount ``parkbrake-park`` with exactly the requests :func:`cli.k8s.park.park_now` makes
(tests/cli/k8s/test_rbac.py runs them against the fake API server with these roles enforced):

- a ClusterRole: ClusterQueues list/patch (``stopPolicy``), NodePools list/patch (the GPU limit),
  NodeClaims list/delete;
- a Role in the stack's namespace: Deployments list/patch (the GPU Deployments' replicas), so the brake
  scales nothing of another namespace's.

The controller has none of these (components/k8s/budget_controller.py): the account that decides
admissions cannot also scale Deployments. An on-call engineer without cluster-admin parks with a
short-lived token of this account (``kubectl create token parkbrake-park -n <namespace>``, given as
``--token-file``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.common import child_of
from components.k8s.budget_controller import rules_of
from components.k8s.common import NAME_LABEL, labels, type_token

PARK = "parkbrake-park"
# (API group, resources, verbs), cluster-wide and in the stack's namespace.
CLUSTER_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("kueue.x-k8s.io", ("clusterqueues",), ("list", "patch")),
    ("karpenter.sh", ("nodepools",), ("list", "patch")),
    ("karpenter.sh", ("nodeclaims",), ("list", "delete")),
)
NAMESPACE_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("apps", ("deployments",), ("list", "patch")),
)


@dataclass
class ParkRoleArgs:
    stack: str
    namespace: str


class ParkRole(pulumi.ComponentResource):
    service_account_name: pulumi.Output[str]

    def __init__(self, name: str, args: ParkRoleArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(type_token("ParkRole"), name, None, opts)
        object_labels = labels(args.stack, {NAME_LABEL: PARK})
        account = k8s.core.v1.ServiceAccount(
            f"{name}-service-account",
            metadata={"name": PARK, "namespace": args.namespace, "labels": object_labels},
            opts=child_of(self),
        )
        subjects = [{"kind": "ServiceAccount", "name": PARK, "namespace": args.namespace}]
        cluster_role = k8s.rbac.v1.ClusterRole(
            f"{name}-cluster-role",
            metadata={"name": PARK, "labels": object_labels},
            rules=rules_of(CLUSTER_RULES),
            opts=child_of(self),
        )
        k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-cluster-role-binding",
            metadata={"name": PARK, "labels": object_labels},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": PARK},
            subjects=subjects,
            opts=child_of(self, depends_on=[cluster_role, account]),
        )
        role = k8s.rbac.v1.Role(
            f"{name}-role",
            metadata={"name": PARK, "namespace": args.namespace, "labels": object_labels},
            rules=rules_of(NAMESPACE_RULES),
            opts=child_of(self),
        )
        k8s.rbac.v1.RoleBinding(
            f"{name}-role-binding",
            metadata={"name": PARK, "namespace": args.namespace, "labels": object_labels},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": PARK},
            subjects=subjects,
            opts=child_of(self, depends_on=[role, account]),
        )
        self.service_account_name = pulumi.Output.from_input(PARK)
        self.register_outputs({"serviceAccountName": self.service_account_name})
