"""A FAKE of Kueue v0.19.2: a small model of the rules the budget controller depends on, acting on the
objects of the fake API server (tests/cli/k8s/fake_api_server.py) as Kueue's controllers would.

Not Kueue: no quota arithmetic, no preemption policy, no scheduling cycles. Each rule below names the
upstream file (kubernetes-sigs/kueue at v0.19.2) it models; docs/kubernetes.md lists the tests that
hold each. The model runs on its own thread after every change to the fake's objects (and on a timer
for requeues) with its own clock, which tests advance (:meth:`KueueFake.advance`).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.cli.k8s.fake_api_server import FakeApiServer

GPU = "nvidia.com/gpu"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
FLAVOR_ANNOTATION = "fake.kueue/flavor"  # which ResourceFlavor the fake assigns the GPUs (tests choose)


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def conditions_true(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def set_condition(status: dict[str, Any], kind: str, value: bool, reason: str, now: datetime) -> None:
    """apimachinery's meta.SetStatusCondition: lastTransitionTime moves only when the status does."""
    conditions = status.setdefault("conditions", [])
    text = "True" if value else "False"
    for condition in conditions:
        if condition["type"] == kind:
            if condition["status"] != text:
                condition.update(status=text, lastTransitionTime=stamp(now))
            condition.update(reason=reason, message=reason)
            return
    conditions.append(
        {"type": kind, "status": text, "reason": reason, "message": reason, "lastTransitionTime": stamp(now)}
    )


class KueueFake:
    def __init__(self, fake: FakeApiServer, now: datetime) -> None:
        self.fake = fake
        self.now = now
        self.stop = threading.Event()
        self.steps = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def advance(self, seconds: float) -> None:
        with self.fake.lock:
            self.now += timedelta(seconds=seconds)
            self.fake.lock.notify_all()

    def clock(self) -> datetime:
        return self.now

    def _run(self) -> None:
        seen = -1
        while not self.stop.is_set():
            with self.fake.lock:
                if self.fake.version == seen:
                    self.fake.lock.wait(0.05)
                self.step()
                seen = self.fake.version

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)

    # --- the rules, each applied to every object (under the fake's lock) ----------------------------

    def step(self) -> None:
        self.steps += 1
        checks = {
            obj["metadata"]["name"]: obj
            for (resource, _, _), obj in self.fake.objects.items()
            if resource == "admissionchecks"
        }
        queues = {}
        for (resource, _, name), queue in list(self.fake.objects.items()):
            if resource == "clusterqueues":
                queues[name] = self._queue_activity(queue, checks)
        for (resource, namespace, name), workload in list(self.fake.objects.items()):
            if resource == "workloads":
                self._workload(namespace, name, copy.deepcopy(workload), queues)

    def _queue_activity(self, queue: dict[str, Any], checks: dict[str, Any]) -> tuple[bool, str, list[str]]:
        """pkg/cache/scheduler/clusterqueue.go (updateWithAdmissionChecks, inactiveReason): a ClusterQueue
        referencing an AdmissionCheck that is missing or not ``Active=True`` is inactive (reason
        AdmissionCheckInactive); pkg/cache/scheduler/cache.go reads Active from the check's condition.
        A stopPolicy other than None stops it too (apis/kueue/v1beta2/clusterqueue_types.go)."""
        spec = queue.get("spec") or {}
        names = [
            rule["name"] for rule in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        ]
        inactive = [
            name for name in names if name not in checks or not conditions_true(checks[name], "Active")
        ]
        stop = spec.get("stopPolicy") or "None"
        active = not inactive and stop == "None"
        reason = "AdmissionCheckInactive" if inactive else "Stopped" if stop != "None" else "Ready"
        status = copy.deepcopy(queue.get("status") or {})
        set_condition(status, "Active", active, reason, self.now)
        if status != (queue.get("status") or {}):
            meta = queue["metadata"]
            self.fake.update_status("clusterqueues", "", meta["name"], status)
        return active, stop, names

    def _workload(
        self,
        namespace: str,
        name: str,
        workload: dict[str, Any],
        queues: dict[str, tuple[bool, str, list[str]]],
    ) -> None:
        status = workload.setdefault("status", {})
        queue = (workload.get("spec") or {}).get("queueName")
        if queue not in queues or conditions_true(workload, "Finished"):
            return
        active, stop, names = queues[queue]
        before = copy.deepcopy(status)
        reserved = conditions_true(workload, "QuotaReserved")
        if reserved:
            self._reserved(workload, stop)
        elif (workload.get("spec") or {}).get("active", True) and active and self._requeue_due(workload):
            self._reserve(workload, queue, names)
        if workload["status"] != before:
            self.fake.update_status("workloads", namespace, name, workload["status"])
        self._job(namespace, workload)
        if (workload.get("spec") or {}).get("active", True) is False:
            stored = self.fake.objects[("workloads", namespace, name)]
            if (stored.get("spec") or {}).get("active", True):
                self.fake._store(
                    "workloads", ("workloads", namespace, name),
                    {**stored, "spec": {**stored["spec"], "active": False}}, "MODIFIED",
                )  # fmt: skip

    def _job(self, namespace: str, workload: dict[str, Any]) -> None:
        """pkg/controller/jobframework/reconciler.go (ReconcileGenericJob, startJob, stopJob): the Job
        that owns the Workload runs (``spec.suspend: false``) while its Workload is admitted and is
        suspended again when it is not (the PATCH an execution-time policy must let through)."""
        owner = next(
            (ref for ref in workload["metadata"].get("ownerReferences") or [] if ref.get("kind") == "Job"),
            None,
        )
        job = self.fake.objects.get(("jobs", namespace, owner["name"])) if owner else None
        if job is None:
            return
        suspend = not conditions_true(workload, "Admitted")
        if job["spec"].get("suspend") != suspend:
            self.fake.suspensions.append((job["metadata"]["name"], suspend))
            self.fake._store("jobs", ("jobs", namespace, job["metadata"]["name"]),
                             {**job, "spec": {**job["spec"], "suspend": suspend}}, "MODIFIED")  # fmt: skip

    def _requeue_due(self, workload: dict[str, Any]) -> bool:
        """pkg/cache/queue/cluster_queue.go: a Workload whose requeueState.requeueAt is in the future
        waits until then."""
        at = ((workload["status"].get("requeueState") or {}).get("requeueAt")) or None
        return at is None or parse(at) <= self.now

    def _reserve(self, workload: dict[str, Any], queue: str, names: list[str]) -> None:
        """pkg/scheduler/scheduler.go (admit) and pkg/workload/workload.go (SetQuotaReservation): quota
        reserved, status.admission written, a past Evicted condition set False; the Workload
        controller then adds a Pending entry for each of the ClusterQueue's checks
        (pkg/controller/core/workload_controller.go, syncAdmissionCheckConditions)."""
        status = workload["status"]
        flavor = (
            (workload["metadata"].get("annotations") or {}).get(FLAVOR_ANNOTATION)
        ) or "research-training"
        assignments = []
        for pod_set in workload["spec"]["podSets"]:
            count = int(pod_set.get("count", 1))
            container = pod_set["template"]["spec"]["containers"][0]
            gpus = int((container.get("resources") or {}).get("requests", {}).get(GPU, 0))
            assignments.append(
                {"name": pod_set["name"], "count": count, "flavors": {GPU: flavor},
                 "resourceUsage": {GPU: str(gpus * count)}}
            )  # fmt: skip
        status["admission"] = {"clusterQueue": queue, "podSetAssignments": assignments}
        set_condition(status, "QuotaReserved", True, "QuotaReserved", self.now)
        if conditions_true(workload, "Evicted"):  # pkg/workload/workload.go (SetQuotaReservation) resets it
            set_condition(status, "Evicted", False, "QuotaReserved", self.now)
        status.pop("requeueState", None)
        entries = {entry["name"]: entry for entry in status.get("admissionChecks") or []}
        for check in names:
            entries.setdefault(
                check,
                {"name": check, "state": "Pending", "message": "", "lastTransitionTime": stamp(self.now)},
            )
        status["admissionChecks"] = sorted(entries.values(), key=lambda entry: entry["name"])

    def _reserved(self, workload: dict[str, Any], stop: str) -> None:
        status = workload["status"]
        states = [entry.get("state") for entry in status.get("admissionChecks") or []]
        if "Rejected" in states:
            # pkg/controller/core/workload_controller.go (reconcileCheckBasedEviction): a Rejected check
            # deactivates the Workload (SetDeactivationTarget), which is then evicted and never requeued.
            workload["spec"]["active"] = False
            self.evict(workload, "Deactivated")
        elif "Retry" in states:
            # pkg/workload/admissionchecks.go (GetMaxRetryTime, NeedsRequeueAtUpdate): requeueAt is the
            # latest lastTransitionTime + requeueAfterSeconds of the Retry checks; then evicted.
            requeue_at = max(
                parse(entry["lastTransitionTime"]) + timedelta(seconds=entry.get("requeueAfterSeconds", 0))
                for entry in status["admissionChecks"] if entry.get("state") == "Retry"
            )  # fmt: skip
            status["requeueState"] = {
                "requeueAt": stamp(requeue_at),
                "count": 1 + int((status.get("requeueState") or {}).get("count", 0)),
            }
            self.evict(workload, "AdmissionCheck")
        elif stop == "HoldAndDrain" or (stop == "Hold" and not conditions_true(workload, "Admitted")):
            # apis/kueue/v1beta2/clusterqueue_types.go (StopPolicy): HoldAndDrain evicts admitted
            # Workloads; both cancel reservations not yet admitted.
            self.evict(workload, "ClusterQueueStopped")
        elif (
            states and all(state == "Ready" for state in states) and not conditions_true(workload, "Admitted")
        ):
            # pkg/workload/admissionchecks.go (SyncAdmittedCondition): quota and every check Ready → Admitted.
            set_condition(status, "Admitted", True, "Admitted", self.now)

    def evict(self, workload: dict[str, Any], reason: str) -> None:
        """pkg/workload/evict/evict.go (prepareForEviction, resetChecksOnEviction): Evicted=True, quota
        released (QuotaReserved=False, status.admission removed), each check not Pending reset to
        Pending, a Retry one with retryCount+1, requeueAfterSeconds kept."""
        status = workload["status"]
        set_condition(status, "Evicted", True, reason, self.now)
        set_condition(status, "QuotaReserved", False, "Pending", self.now)
        set_condition(status, "Admitted", False, "NoReservation", self.now)
        status.pop("admission", None)
        for index, entry in enumerate(status.get("admissionChecks") or []):
            if entry.get("state") == "Pending":
                continue
            reset = {
                "name": entry["name"], "state": "Pending", "lastTransitionTime": stamp(self.now),
                "message": f"Reset to Pending after eviction. Previously: {entry.get('state')}",
            }  # fmt: skip
            if "requeueAfterSeconds" in entry:
                reset["requeueAfterSeconds"] = entry["requeueAfterSeconds"]
            if entry.get("state") == "Retry":
                reset["retryCount"] = int(entry.get("retryCount", 0)) + 1
            status["admissionChecks"][index] = reset

    # --- what tests do as Kueue's other controllers or a person would ------------------------------

    def preempt(self, namespace: str, name: str) -> None:
        """Another Workload preempts this one (pkg/scheduler/preemption calls evict.go's Evict)."""
        with self.fake.lock:
            workload = copy.deepcopy(self.fake.objects[("workloads", namespace, name)])
            self.evict(workload, "Preempted")
            self.fake.update_status("workloads", namespace, name, workload["status"])

    def finish(self, namespace: str, name: str) -> None:
        with self.fake.lock:
            workload = copy.deepcopy(self.fake.objects[("workloads", namespace, name)])
            set_condition(workload["status"], "Finished", True, "Succeeded", self.now)
            self.fake.update_status("workloads", namespace, name, workload["status"])


@contextmanager
def kueue_fake(fake: FakeApiServer, now: datetime) -> Iterator[KueueFake]:
    model = KueueFake(fake, now)
    try:
        yield model
    finally:
        model.close()


WaitFor = Callable[[Callable[[], Any]], Any]
