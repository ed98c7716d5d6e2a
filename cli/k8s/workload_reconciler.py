"""The Workload reconciler: decide each Workload whose quota is reserved and whose entry of one of this
controller's AdmissionChecks is Pending, write that entry (and only it), and give back the
reservation of every admission that ended (finished, evicted, deleted).

Kueue's contract (kubernetes-sigs/kueue v0.19.2; docs/kubernetes.md cites each rule):

- an entry is written by server-side apply with this controller's field manager, so Kueue's fields of
  it (``retryCount``, ``podSetUpdates``) and every other entry stay as they are
  (apis/kueue/v1beta2/workload_types.go: ``admissionChecks`` is a list-map keyed by name);
- ``lastTransitionTime`` moves only when the state does (pkg/workload/patching/patching.go,
  SetAdmissionCheckState), because Kueue counts a Retry's ``requeueAfterSeconds`` from it
  (pkg/workload/admissionchecks.go, GetMaxRetryTime);
- the write carries the resourceVersion decided from: a 409 re-reads the Workload and decides again on
  what it is now (an eviction meanwhile releases instead of writing Ready);
- Kueue resets the entries to Pending on every eviction (pkg/workload/evict/evict.go), and the next quota
  reservation is a new admission: a new reservation, keyed by the reservation's own condition.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from lightkube import ApiError

from cli.k8s.kube import Workload, apply_check_entry, workload_event
from cli.k8s.workload import WorkloadError, condition, listed, mapping, subject_of, workload_request
from guardrails.plurals import counted

if TYPE_CHECKING:
    from lightkube import Client

    from cli.k8s.admission import BudgetCheck, CheckDecision, CheckPool
    from cli.k8s.informer import Informer
    from cli.k8s.metrics import ControllerMetrics
    from guardrails.pricing import PriceTable
    from stacks.config import StackConfig

Key = tuple[str, str]  # (namespace, name)
CONFLICT_ATTEMPTS = 5
QUOTA_RETRY = timedelta(minutes=5)


class Undecided(Exception):
    """The ledger could not be asked: the Workload is tried again after a backoff."""


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def own_entry(workload: Mapping[str, Any], checks: set[str]) -> dict[str, Any] | None:
    """The Workload's entry of one of this controller's AdmissionChecks (None: none gates it)."""
    for entry in listed(mapping(workload.get("status")).get("admissionChecks")):
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str) and entry["name"] in checks:
            return dict(entry)
    return None


def admission_key(workload: Mapping[str, Any]) -> str:
    """What tells this quota reservation from the Workload's earlier ones: the QuotaReserved condition's
    lastTransitionTime and Kueue's requeue count (status.requeueState.count)."""
    status = mapping(workload.get("status"))
    moment = next(
        (
            c.get("lastTransitionTime")
            for c in listed(status.get("conditions"))
            if isinstance(c, Mapping) and c.get("type") == "QuotaReserved"
        ),
        "",
    )
    requeue = status.get("requeueState")
    count = requeue.get("count", 0) if isinstance(requeue, Mapping) else 0
    return f"reserved {moment} requeue {count}"


def ended(workload: Mapping[str, Any], entry: Mapping[str, Any]) -> str | None:
    """Why the Workload's admission ended (None: it has not)."""
    if condition(workload, "Finished"):
        return "finished"
    status = mapping(workload.get("status"))
    if not condition(workload, "QuotaReserved") or "admission" not in status:
        return "evicted"
    # Evicted counts while the entry is past Pending: Kueue resets it to Pending when it evicts.
    if condition(workload, "Evicted") and entry.get("state") != "Pending":
        return "evicted"
    return None


def entry_for(
    current: Mapping[str, Any], state: str, message: str, now: datetime, requeue: timedelta | None
) -> dict[str, Any]:
    """The entry to apply: lastTransitionTime kept unless the state changes."""
    moved = current.get("state") != state or not current.get("lastTransitionTime")
    entry: dict[str, Any] = {
        "name": current["name"],
        "state": state,
        "message": message[:32768],
        "lastTransitionTime": stamp(now) if moved else current["lastTransitionTime"],
    }
    if requeue is not None:
        entry["requeueAfterSeconds"] = max(1, int(requeue.total_seconds()))
    return entry


class WorkloadReconciler:
    def __init__(
        self,
        client: Client,
        config: StackConfig,
        prices: PriceTable,
        informer: Informer,
        *,
        checks: Callable[[], set[str]],
        metrics: ControllerMetrics,
        clock: Callable[[], datetime],
        undecided_after: timedelta,
    ) -> None:
        self.client, self.config, self.prices = client, config, prices
        self.informer, self.checks, self.metrics = informer, checks, metrics
        self.clock, self.undecided_after = clock, undecided_after
        self.lock = threading.Lock()
        self.tombstones: dict[Key, dict[str, Any]] = {}  # deleted Workloads, until reconciled
        self.holding: dict[str, tuple[str, int]] = {}  # uid → (tenant, GPUs) of Workloads seen admitted
        self.tenant_locks: dict[str, threading.Lock] = {}
        self.looked_up: set[str] = set()  # uids whose reservation the ledger was asked about
        self.undecided_since: dict[Key, datetime] = {}
        self.reported: set[Key] = set()  # undecided Workloads already given an Event
        from stacks.kubernetes_config import kubernetes_config

        self.quotas = {name: t.gpu_quota for name, t in kubernetes_config(config).tenants.items()}

    def deleted(self, workload: dict[str, Any]) -> None:
        meta = workload.get("metadata") or {}
        with self.lock:
            self.tombstones[(str(meta.get("namespace")), str(meta.get("name")))] = workload

    def reconcile(self, check: BudgetCheck | CheckPool, key: Key) -> str:
        """Bring one Workload's entry to what the ledger decides; what was done (for logs and tests).
        Raises (Undecided, an API error) for the work queue to try again after a backoff."""
        workload = self.informer.get(key)
        if workload is None:
            with self.lock:
                tombstone = self.tombstones.pop(key, None)
            return self._release(check, tombstone, "deleted") if tombstone else "gone"
        for _attempt in range(CONFLICT_ATTEMPTS):
            try:
                return self._reconcile_once(check, key, workload)
            except ApiError as error:
                if error.status.code == 404:
                    return "deleted meanwhile"
                if error.status.code != 409:
                    raise
                self.metrics.conflicts.inc()
                workload = dict(self.client.get(Workload, key[1], namespace=key[0]))  # decide again on it
        raise RuntimeError(f"workload {key[0]}/{key[1]} kept changing: {CONFLICT_ATTEMPTS} conflicts")

    def _reconcile_once(self, check: BudgetCheck | CheckPool, key: Key, workload: dict[str, Any]) -> str:
        entry = own_entry(workload, self.checks())
        if entry is None:
            return "not gated"
        why = ended(workload, entry)
        uid = str((workload.get("metadata") or {}).get("uid", ""))
        if why == "evicted" and not condition(workload, "Evicted") and uid not in self.holding:
            return "waiting for quota"  # never admitted (no eviction seen or recorded): nothing to give back
        if why is not None:
            self._settled(key)
            return self._release(check, workload, why)
        if entry.get("state") == "Ready":
            if uid not in self.holding:
                try:
                    found = workload_request(workload, self.config, self.prices)
                except WorkloadError:
                    return "ready"
                with self.lock:
                    self.holding[uid] = (found.tenant, found.gpus)
            return "ready"
        if entry.get("state") != "Pending":
            return f"left {entry.get('state')}"
        return self._decide(check, key, workload, entry)

    def _decide(
        self, check: BudgetCheck | CheckPool, key: Key, workload: dict[str, Any], entry: dict[str, Any]
    ) -> str:
        now = self.clock()
        try:
            request = workload_request(workload, self.config, self.prices)
        except WorkloadError as error:
            apply_check_entry(
                self.client,
                workload,
                entry_for(entry, "Rejected", f"unreadable Workload: {error}", now, None),
            )
            self._settled(key)
            self.metrics.decisions.labels(state="Rejected").inc()
            return "Rejected"
        with self.lock:
            tenant_lock = self.tenant_locks.setdefault(request.tenant, threading.Lock())
        with tenant_lock:  # the quota counted and this Workload added to it, one Workload at a time
            over = self._over_quota(request.tenant, request.gpus, request.uid)
            if over is not None:
                apply_check_entry(self.client, workload, entry_for(entry, "Retry", over, now, QUOTA_RETRY))
                self.metrics.decisions.labels(state="Retry").inc()
                return "Retry"
            version = str(workload["metadata"].get("resourceVersion", ""))
            decision = check.decide(request, now=now, version=version, admission=admission_key(workload))
            if decision.state == "Ready" and not decision.undecided:
                with self.lock:
                    self.holding[request.uid] = (request.tenant, request.gpus)
        if decision.undecided:
            self._undecided(key, workload, decision, now)
            raise Undecided(decision.message)
        apply_check_entry(
            self.client,
            workload,
            entry_for(entry, decision.state, decision.message, now, decision.requeue_after),
        )
        self._settled(key)
        self.metrics.decisions.labels(state=decision.state).inc()
        return decision.state

    def _over_quota(self, tenant: str, gpus: int, uid: str) -> str | None:
        """The tenant's gpu_quota, a total across every flavor (Kueue caps each flavor only: kueue
        #3215): the GPUs of its admitted Workloads and this one's, if more than the quota."""
        quota = self.quotas.get(tenant)
        if quota is None:
            return None
        with self.lock:
            admitted = sum(
                n for other, (owner, n) in self.holding.items() if owner == tenant and other != uid
            )
        if admitted + gpus <= quota:
            return None
        return (
            f"tenant {tenant}'s gpu_quota is {counted(quota, 'GPU')} across all GPU types: {admitted} are admitted, "
            f"this Workload asks {gpus}; retrying when admitted work ends"
        )

    def _release(self, check: BudgetCheck | CheckPool, workload: Mapping[str, Any], why: str) -> str:
        uid = str((workload.get("metadata") or {}).get("uid", ""))
        with self.lock:
            if uid not in self.holding and uid in self.looked_up:
                return f"{why}, nothing held"
        request = subject_of(workload)
        released = check.release(request, now=self.clock(), why=why) if request else None
        with self.lock:
            self.holding.pop(uid, None)
            self.looked_up.add(uid)
        return f"{why}, released {released}" if released is not None else f"{why}, nothing held"

    def _undecided(self, key: Key, workload: dict[str, Any], decision: CheckDecision, now: datetime) -> None:
        """A Workload the ledger could not decide: past ``undecided_after``, an Event and the gauge."""
        with self.lock:
            since = self.undecided_since.setdefault(key, now)
            report = now - since >= self.undecided_after and key not in self.reported
            if report:
                self.reported.add(key)
            self.metrics.undecided.set(len(self.reported))
        if report:
            message = f"budget check undecided for {now - since}: {decision.message}"
            try:
                workload_event(self.client, workload, "BudgetCheckUndecided", message, stamp(now))
            except ApiError:
                self.metrics.errors.labels(reconciler="workloads").inc()

    def _settled(self, key: Key) -> None:
        with self.lock:
            self.undecided_since.pop(key, None)
            self.reported.discard(key)
            self.metrics.undecided.set(len(self.reported))
