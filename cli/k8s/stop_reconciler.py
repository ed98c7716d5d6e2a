"""The budget-stop reconciler: when a tenant's budget's ``stop`` action fires, each of its admitted
Workloads gets ``Retry`` (Kueue evicts it, releasing its quota, and requeues it: pkg/controller/core/
workload_controller.go, reconcileCheckBasedEviction; pkg/workload/evict/evict.go). Each Workload is
written on its own: one that fails (a 422, a socket error, three conflicts) is counted and tried again
at the next sweep, and never keeps the others from being stopped."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from lightkube import ApiError

from cli.k8s.admission import CheckDecision
from cli.k8s.kube import Workload, apply_check_entry
from cli.k8s.workload import mapping, subject_of
from cli.k8s.workload_reconciler import admission_key, ended, entry_for, own_entry
from guardrails.runway import budget_decisions

if TYPE_CHECKING:
    from lightkube import Client

    from cli.k8s.admission import BudgetCheck
    from cli.k8s.informer import Informer
    from cli.k8s.metrics import ControllerMetrics

STOP_RETRY = timedelta(hours=1)


class StopReconciler:
    def __init__(
        self,
        client: Client,
        informer: Informer,
        checks: Callable[[], set[str]],
        metrics: ControllerMetrics,
        *,
        clock: Callable[[], datetime],
    ) -> None:
        self.client, self.informer, self.checks, self.metrics, self.clock = (
            client,
            informer,
            checks,
            metrics,
            clock,
        )

    def admitted(self) -> dict[str, list[dict[str, Any]]]:
        """Tenant → its Workloads whose entry is Ready and whose admission has not ended."""
        checks = self.checks()
        found: dict[str, list[dict[str, Any]]] = {}
        for workload in self.informer.items():
            entry = own_entry(workload, checks)
            if entry is None or entry.get("state") != "Ready" or ended(workload, entry):
                continue
            tenant = str(mapping(workload["status"]["admission"]).get("clusterQueue"))
            found.setdefault(tenant, []).append(workload)
        return found

    def reconcile(self, check: BudgetCheck) -> list[str]:
        """Send back the admitted Workloads of every tenant whose stop fires; the names sent back."""
        admitted = self.admitted()
        if not admitted:
            return []
        now = self.clock()
        sent: list[str] = []
        for status in check.store.runways(now=now, default_cap=check.default_cap, tenants=sorted(admitted)):
            stops = [decision for decision in budget_decisions(status) if decision.action == "stop"]
            if not stops:
                continue
            message = f"budget stop: {stops[0].reason}"
            for workload in admitted.get(status.tenant, []):
                try:
                    self._send_back(check, workload, message, now, status.period_start)
                except Exception:  # this Workload is tried again at the next sweep; the others go on
                    self.metrics.errors.labels(reconciler="stops").inc()
                    continue
                sent.append(str(workload["metadata"]["name"]))
        return sent

    def _send_back(
        self, check: BudgetCheck, workload: dict[str, Any], message: str, now: datetime, period: datetime
    ) -> None:
        meta = workload["metadata"]
        for _attempt in range(3):
            entry = own_entry(workload, self.checks())
            if entry is None or entry.get("state") != "Ready" or ended(workload, entry):
                return  # no longer admitted: nothing to send back
            try:
                apply_check_entry(self.client, workload, entry_for(entry, "Retry", message, now, STOP_RETRY))
                break
            except ApiError as error:
                if error.status.code != 409:
                    raise
                workload = dict(self.client.get(Workload, meta["name"], namespace=meta["namespace"]))
        else:
            raise RuntimeError(f"workload {meta['namespace']}/{meta['name']} kept changing")
        request = subject_of(workload)
        if request is not None:
            decision = CheckDecision("Retry", message, request, requeue_after=STOP_RETRY)
            check.log(decision, now=now, version=f"stop:{period.isoformat()}:{admission_key(workload)}")
        self.metrics.decisions.labels(state="Retry").inc()
