"""The NodeClaim reconciler: delete the NodeClaims of the stack's NodePools past their cap and drain
(cli/k8s/reclaim.py decides which), each a ``stop`` decision of its instance. One claim's failed
delete is counted and tried again at the next sweep; the others are still deleted."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from lightkube import ApiError

from cli.k8s.admission import ACTOR
from cli.k8s.kube import NodeClaim
from cli.k8s.reclaim import overdue_nodeclaims
from guardrails.decisions import Decision

if TYPE_CHECKING:
    from lightkube import Client

    from cli.k8s.admission import BudgetCheck
    from cli.k8s.metrics import ControllerMetrics
    from stacks.config import StackConfig


class NodeClaimReconciler:
    def __init__(
        self,
        client: Client,
        config: StackConfig,
        metrics: ControllerMetrics,
        *,
        clock: Callable[[], datetime],
    ) -> None:
        from stacks.kubernetes_config import kubernetes_config, nodepool_name

        self.client, self.metrics, self.clock = client, metrics, clock
        self.caps = {nodepool_name(p.tenant, p.name): p.max_runtime for p in config.pools.values()}
        self.tenants = {nodepool_name(p.tenant, p.name): p.tenant for p in config.pools.values()}
        self.grace = kubernetes_config(config).termination_grace_period

    def reconcile(self, check: BudgetCheck) -> list[str]:
        """Delete the overdue NodeClaims; the names deleted."""
        claims = [dict(claim) for claim in self.client.list(NodeClaim)]
        now = self.clock()
        deleted = []
        for reclaim in overdue_nodeclaims(claims, self.caps, self.grace, now):
            try:
                self.client.delete(NodeClaim, reclaim.nodeclaim)
            except ApiError as error:
                if error.status.code != 404:
                    self.metrics.errors.labels(reconciler="nodeclaims").inc()
                    continue
            details = {
                "action": "delete-nodeclaim",
                "nodeclaim": reclaim.nodeclaim,
                "nodepool": reclaim.nodepool,
            }
            subject = reclaim.instance_id or f"nodeclaim/{reclaim.nodeclaim}"
            check.decisions.append(
                [
                    Decision(
                        "stop",
                        ACTOR,
                        reclaim.reason,
                        now,
                        subject,
                        self.tenants.get(reclaim.nodepool),
                        details,
                    )
                ],
                origin=f"k8s:nodeclaim:{reclaim.nodeclaim}",
            )
            deleted.append(reclaim.nodeclaim)
        return deleted
