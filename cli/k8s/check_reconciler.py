"""The AdmissionCheck reconciler: every AdmissionCheck whose ``spec.controllerName`` is
``parkbrake.dev/budget`` (whatever its name) is this controller's, and is kept ``Active=True`` while
the controller runs.

Kueue treats a ClusterQueue that references a check without ``Active=True`` as inactive and admits
nothing through it (pkg/cache/scheduler/clusterqueue.go, updateWithAdmissionChecks and inactiveReason,
reason AdmissionCheckInactive; pkg/cache/scheduler/cache.go reads the condition); a check's own
controller sets the condition, as Kueue's provisioning controller does for its checks
(pkg/controller/admissionchecks/provisioning/admissioncheck_reconciler.go: condition ``Active``,
written only when its status changes).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cli.k8s.kube import CONTROLLER_NAME, apply_check_active
from cli.k8s.workload_reconciler import stamp

if TYPE_CHECKING:
    from lightkube import Client

    from cli.k8s.informer import Informer

ACTIVE_REASON = "ControllerRunning"


def active_condition(check: Mapping[str, Any]) -> dict[str, Any] | None:
    conditions = (check.get("status") or {}).get("conditions") or []
    return next((dict(c) for c in conditions if isinstance(c, Mapping) and c.get("type") == "Active"), None)


class CheckReconciler:
    def __init__(
        self,
        client: Client,
        informer: Informer,
        *,
        clock: Callable[[], datetime],
        on_change: Callable[[], None],
    ) -> None:
        self.client, self.informer, self.clock, self.on_change = client, informer, clock, on_change
        self.lock = threading.Lock()
        self.names: set[str] = set()

    def checks(self) -> set[str]:
        """The names of this controller's AdmissionChecks."""
        with self.lock:
            return set(self.names)

    def refresh(self) -> None:
        """Recount this controller's checks from the cache; a change re-decides every Workload."""
        names = {
            str(check["metadata"]["name"])
            for check in self.informer.items()
            if (check.get("spec") or {}).get("controllerName") == CONTROLLER_NAME
        }
        with self.lock:
            changed, self.names = names != self.names, names
        if changed:
            self.on_change()

    def reconcile(self, name: str) -> str:
        """Keep the check ``Active=True``; raises an API error for the queue to try again."""
        self.refresh()
        check = self.informer.get(("", name))
        if check is None or (check.get("spec") or {}).get("controllerName") != CONTROLLER_NAME:
            return "not ours"
        current = active_condition(check)
        if current is not None and current.get("status") == "True" and current.get("reason") == ACTIVE_REASON:
            return "active"
        moved = current is None or current.get("status") != "True"
        condition = {
            "type": "Active",
            "status": "True",
            "reason": ACTIVE_REASON,
            "message": "the parkbrake budget controller is running and deciding this check",
            "lastTransitionTime": stamp(self.clock()) if moved else current["lastTransitionTime"],  # type: ignore[index]
            "observedGeneration": int((check.get("metadata") or {}).get("generation") or 0),
        }
        apply_check_active(self.client, name, condition)
        return "activated"
