"""The budget admission check: a Workload's reserved quota → the ledger's admission → the check's state.

``Ready`` when the ledger grants the reservation; ``Retry`` (with ``requeueAfterSeconds``) when the
tenant's runway is short only because of money reserved for hosts still starting (those reservations
lapse or are claimed within their lease) or when the ledger cannot be reached (fail closed: nothing
starts unaccounted); ``Rejected`` when the budget denies (what remains after spending and running caps
cannot cover the Workload). The reservation is the ledger's own (:meth:`LedgerStore.admit`, the same
one ``parkbrake ledger admit`` makes), keyed by the Workload's uid through the decision log: deciding
a Workload again finds its reservation there and reserves nothing twice. Every decision is logged with
the Workload's namespace/name as its subject.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

import psycopg

from cli.k8s.workload import WorkloadRequest
from guardrails.decisions import Decision
from guardrails.durations import format_duration
from guardrails.launch import AdmissionRequest
from lambdas.ledger.connections import LedgerUnavailable
from lambdas.ledger.decisions import DecisionLedger

if TYPE_CHECKING:
    from guardrails.launch import Admission
    from lambdas.ledger.store import LedgerStore

State = Literal["Ready", "Retry", "Rejected"]
ACTOR = "k8s-budget-check"
KIND_OF_STATE: dict[State, str] = {
    "Ready": "workload-ready",
    "Retry": "workload-retry",
    "Rejected": "workload-rejected",
}
RELEASED = "workload-released"
UNREACHABLE_RETRY = timedelta(minutes=1)
DEFAULT_LEASE = timedelta(minutes=30)


@dataclass(frozen=True)
class CheckDecision:
    """The check's state for one Workload, and what the ledger said."""

    state: State
    message: str
    request: WorkloadRequest
    reservation: int | None = None
    needed_usd: Decimal | None = None
    remaining_usd: Decimal | None = None
    requeue_after: timedelta | None = None
    repeated: bool = False  # an earlier decision's reservation, found by uid: nothing reserved now

    def as_dict(self) -> dict[str, Any]:
        request = self.request
        return {
            "state": self.state,
            "message": self.message,
            "tenant": request.tenant,
            "instance_type": request.instance_type,
            "hosts": request.hosts,
            "gpus": request.gpus,
            "cap_seconds": int(request.cap.total_seconds()),
            "pool": request.pool,
            "reservation": self.reservation,
            "needed_usd": None if self.needed_usd is None else str(self.needed_usd),
            "remaining_usd": None if self.remaining_usd is None else str(self.remaining_usd),
            "requeue_after_seconds": None
            if self.requeue_after is None
            else int(self.requeue_after.total_seconds()),
            "workload": {"namespace": request.namespace, "name": request.name, "uid": request.uid},
            "repeated": self.repeated,
        }


def check_state(
    request: WorkloadRequest, admission: Admission, reserved_usd: Decimal, *, lease: timedelta
) -> CheckDecision:
    """The state for the ledger's answer (pure). ``reserved_usd``: what the tenant's runway holds for
    hosts still starting; a refusal that those reservations alone cause is a Retry after the lease."""
    what = (
        f"{request.hosts} x {request.instance_type} ({request.gpus} GPUs) for "
        f"{format_duration(request.cap)}, tenant {request.tenant}"
    )
    common: dict[str, Any] = {
        "request": request,
        "needed_usd": admission.needed_usd,
        "remaining_usd": admission.remaining_usd,
    }
    if admission.granted:
        held = (
            f"reservation {admission.reservation_id}"
            if admission.reservation_id
            else "nothing reserved (no price or no budget)"
        )
        message = f"budget admits {what}: ${admission.needed_usd:.2f}, {held}"
        return CheckDecision("Ready", message, reservation=admission.reservation_id, **common)
    remaining = admission.remaining_usd or Decimal(0)
    if reserved_usd > 0 and admission.needed_usd <= remaining + reserved_usd:
        message = (
            f"runway short for {what}: ${admission.needed_usd:.2f} needed, ${max(remaining, Decimal(0)):.2f} "
            f"left while ${reserved_usd:.2f} is reserved for hosts starting; retrying after "
            f"{format_duration(lease)}"
        )
        return CheckDecision("Retry", message, requeue_after=lease, **common)
    return CheckDecision("Rejected", f"budget denies {what}: {admission.reason}", **common)


class BudgetCheck:
    """Decides Workloads against one ledger connection (one per controller worker)."""

    def __init__(
        self, store: LedgerStore, *, default_cap: timedelta, region: str, lease: timedelta = DEFAULT_LEASE
    ) -> None:
        self.store = store
        self.decisions = DecisionLedger.of(store)
        self.default_cap = default_cap
        self.region = region
        self.lease = lease

    def decide(self, request: WorkloadRequest, *, now: datetime, version: str = "") -> CheckDecision:
        """Admit ``request`` (or find its earlier reservation) and log the decision. ``version``: the
        Workload's resourceVersion, so that a Retry or Rejected decided again later is logged again."""
        try:
            prior = self.reservation_of(request)
            if prior is not None:
                message = f"budget admitted this Workload before: reservation {prior} (uid {request.uid})"
                return CheckDecision("Ready", message, request, reservation=prior, repeated=True)
            admission = self.store.admit(
                AdmissionRequest(
                    request.tenant,
                    request.instance_type,
                    request.hosts,
                    request.cap,
                    region=self.region,
                    pricing_model=request.pricing_model,
                ),
                now=now,
                default_cap=self.default_cap,
                lease=self.lease,
            )
            reserved = Decimal(0)
            if not admission.granted:
                runways = self.store.runways(now=now, default_cap=self.default_cap, tenants=[request.tenant])
                reserved = runways[0].reserved_usd if runways else Decimal(0)
            decision = check_state(request, admission, reserved, lease=self.lease)
            self._log(decision, now=now, version=version)
            return decision
        except (LedgerUnavailable, psycopg.OperationalError, psycopg.InterfaceError) as error:
            message = (
                f"ledger unreachable, nothing admitted (fail closed): {str(error).strip().splitlines()[0]}"
            )
            decision = CheckDecision("Retry", message, request, requeue_after=UNREACHABLE_RETRY)
            # The decision log is in the ledger that cannot be reached: the decision goes to stderr.
            print(json.dumps({"decision": decision.as_dict(), "logged": False}), file=sys.stderr)
            return decision

    def reservation_of(self, request: WorkloadRequest) -> int | None:
        """The reservation a Ready decision made for this uid and no release gave back (None: none)."""
        held: int | None = None
        for logged in self.decisions.read(
            instance_id=request.subject, kinds=[KIND_OF_STATE["Ready"], RELEASED], limit=50
        ):
            if logged.decision.details.get("uid") != request.uid:
                continue
            reservation = logged.decision.details.get("reservation")
            held = reservation if logged.decision.kind == KIND_OF_STATE["Ready"] else None
        return held

    def release(self, request: WorkloadRequest, *, now: datetime, why: str) -> int | None:
        """Give back the Workload's reservation (finished, evicted or deleted); which one, or None."""
        reservation = self.reservation_of(request)
        if reservation is None:
            return None
        released = self.store.release(reservation, now=now)
        reason = f"{request.namespace}/{request.name} {why}: reservation {reservation} " + (
            "released" if released else "already claimed or released"
        )
        details = {"uid": request.uid, "reservation": reservation, "released": released, "why": why}
        self.decisions.append(
            [Decision(RELEASED, ACTOR, reason, now, request.subject, request.tenant, details)],
            origin=f"k8s:{request.uid}",
        )
        return reservation

    def _log(self, decision: CheckDecision, *, now: datetime, version: str) -> None:
        request = decision.request
        details = {
            key: value
            for key, value in decision.as_dict().items()
            if key not in {"message", "tenant", "workload"}
        } | {"uid": request.uid, "namespace": request.namespace, "name": request.name}
        origin = f"k8s:{request.uid}" if decision.state == "Ready" else f"k8s:{request.uid}:{version}"
        self.decisions.append(
            [
                Decision(
                    KIND_OF_STATE[decision.state],
                    ACTOR,
                    decision.message,
                    now,
                    request.subject,
                    request.tenant,
                    details,
                )
            ],
            origin=origin,
        )
