"""The budget admission check: a Workload's reserved quota → the ledger's admission → the check's state.

``Ready`` when the ledger grants the reservation. ``Retry`` (with ``requeueAfterSeconds``, which Kueue
counts from the entry's lastTransitionTime: pkg/workload/admissionchecks.go) for what can pass later:
the runway short only because of money reserved for hosts still starting (after the lease, when
those reservations lapse or are claimed), or short because of what running hosts may still cost
(after the default cap, at most the period's end), or spent (at the period's end, when the budget
renews). ``Rejected`` — which deactivates the Workload for good (pkg/controller/core/
workload_controller.go) — only when the Workload alone costs more than the tenant's whole limit, so
no period could carry it. A ledger that cannot be reached decides nothing (``undecided``): the
controller leaves the check Pending and tries again.

The reservation is the ledger's own (:meth:`LedgerStore.admit`, the same one ``parkbrake ledger admit``
makes), keyed by the Workload's uid and its admission (``admission``: the quota reservation's
lastTransitionTime), so a requeued Workload's next admission is a new reservation, while deciding the
same admission again finds its reservation in the decision log and reserves nothing twice. Every
decision is logged with the Workload's namespace/name as its subject.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

import psycopg

from cli.k8s.workload import WorkloadRequest
from guardrails.decisions import Decision
from guardrails.durations import format_duration
from guardrails.launch import AdmissionRequest
from guardrails.ledger import from_ms
from guardrails.plurals import counted
from guardrails.runway import TenantRunway, period_bounds
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
# At most this many Workloads decided in one ledger transaction: as many as the default controller's
# workers (4 connections, four workers each), few enough that one failure retried alone costs little.
DECIDED_TOGETHER = 16


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
    undecided: bool = False  # the ledger could not be asked: nothing decided, the check stays Pending

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


UNREACHABLE = (LedgerUnavailable, psycopg.OperationalError, psycopg.InterfaceError)


def unreachable(request: WorkloadRequest, error: Exception) -> CheckDecision:
    """Nothing decided: the ledger could not be asked (fail closed, the check stays Pending)."""
    message = f"ledger unreachable, nothing admitted (fail closed): {str(error).strip().splitlines()[0]}"
    decision = CheckDecision("Retry", message, request, requeue_after=UNREACHABLE_RETRY, undecided=True)
    # The decision log is in the ledger that cannot be reached: the decision goes to stderr.
    print(json.dumps({"decision": decision.as_dict(), "logged": False}), file=sys.stderr)
    return decision


def check_state(
    request: WorkloadRequest,
    admission: Admission,
    runway: TenantRunway | None,
    *,
    lease: timedelta,
    default_cap: timedelta,
) -> CheckDecision:
    """The state for the ledger's answer (pure). ``runway``: the tenant's, read after a refusal (its
    limit, what it holds for hosts starting and running, its period)."""
    what = (
        f"{request.hosts} x {request.instance_type} ({counted(request.gpus, 'GPU')}) for "
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
    limit = runway.budget.limit_usd if runway is not None else None
    if limit is not None and admission.needed_usd > limit:
        message = (
            f"budget can never admit {what}: it alone costs ${admission.needed_usd:.2f}, more than tenant "
            f"{request.tenant}'s whole {runway.budget.period if runway else ''} limit of ${limit:.2f}; "
            "ask for fewer hosts or a shorter spec.maximumExecutionTimeSeconds"
        )
        return CheckDecision("Rejected", message, **common)
    after, why = retry_after(admission, runway, lease=lease, default_cap=default_cap)
    message = (
        f"budget short now for {what}: {admission.reason}; {why}, retrying after {format_duration(after)}"
    )
    return CheckDecision("Retry", message, requeue_after=after, **common)


def retry_after(
    admission: Admission, runway: TenantRunway | None, *, lease: timedelta, default_cap: timedelta
) -> tuple[timedelta, str]:
    """When a refused Workload can pass, and why then: after the lease when reservations for hosts
    starting alone stand in the way; when running hosts' worst cases do, money comes back only when
    one of them stops before its cap, which may be any moment: looked at again after the default cap,
    or when the first of them reaches its cap if sooner (its worst case is settled then); else at the
    period's end, when the budget renews. Never sooner than a minute, never past the period's end."""
    if runway is None:
        return lease, "no budget period to wait for"
    remaining = admission.remaining_usd or Decimal(0)
    period_end = period_bounds(runway.budget.period, runway.now, runway.budget.timezone)[1]
    to_period_end = max(period_end - runway.now, timedelta(minutes=1))
    if runway.reserved_usd > 0 and admission.needed_usd <= remaining + runway.reserved_usd:
        return min(lease, to_period_end), f"${runway.reserved_usd:.2f} is reserved for hosts starting"
    if admission.needed_usd <= remaining + runway.reserved_usd + runway.committed_usd:
        held = runway.reserved_usd + runway.committed_usd
        first = runway.totals.first_cap_end_ms
        until_first = default_cap if first is None else from_ms(first) - runway.now
        return (
            min(max(min(until_first, default_cap), timedelta(minutes=1)), to_period_end),
            f"${held:.2f} is held by hosts running or starting, the first of them capped in "
            f"{format_duration(max(until_first, timedelta(0)))}",
        )
    return to_period_end, f"the {runway.budget.period}'s budget renews at {period_end.isoformat()}"


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

    def decide(
        self, request: WorkloadRequest, *, now: datetime, version: str = "", admission: str = ""
    ) -> CheckDecision:
        """Admit ``request`` (or find this admission's reservation) and log the decision, in one
        transaction (on the store's single connection: the reservation and its decision commit
        together). ``version``: the Workload's resourceVersion, so that a Retry or Rejected decided
        again later is logged again; ``admission``: what tells this quota reservation from the
        Workload's earlier ones."""
        one = Asked(request, now, version, admission)
        (one.answer,) = self.decide_together([one])
        return one.outcome()

    def decide_together(self, asked: Sequence[Asked]) -> list[CheckDecision | Exception]:
        """Decide ``asked`` (one Workload a tenant) in one transaction, each step one statement for
        them all (the lookup, the ledger's admission, the log: :meth:`LedgerStore.admit_together`),
        and one commit: under a burst, the work a decision costs the ledger and this process shrinks
        with the batch. Each answer is what deciding it alone would give. When one of them fails,
        nothing of the batch is kept and each is decided again alone, so that the failure is that
        Workload's only (raised in its worker, tried again after its own backoff); a ledger that
        cannot be reached leaves each undecided."""
        try:
            with self.store.connections.connection() as connection, connection.transaction():
                return list(self._decide_all(asked))
        except UNREACHABLE as error:
            if len(asked) == 1:
                return [unreachable(asked[0].request, error)]
        except Exception as error:  # one Workload's failure, or a deadlock: each alone below
            if len(asked) == 1:
                return [error]
        return [answer for one in asked for answer in self.decide_together([one])]

    def _decide_all(self, asked: Sequence[Asked]) -> list[CheckDecision]:
        held = self.held_by_each([one.request for one in asked])
        decided: dict[int, CheckDecision] = {}
        admitting: list[int] = []
        for n, one in enumerate(asked):
            prior, prior_admission = held[n]
            if prior is not None and prior_admission == one.admission:
                message = f"budget admitted this Workload before: reservation {prior} (uid {one.request.uid})"
                decided[n] = CheckDecision("Ready", message, one.request, reservation=prior, repeated=True)
                continue
            if prior is not None:  # an earlier admission whose end was not seen: its money goes back
                self._release(one.request, prior, now=one.now, why="admitted again")
            admitting.append(n)
        if admitting:
            # One moment for the batch's ledger reads, the latest asked: their clocks differ by the
            # time they waited for a connection.
            now = max(asked[n].now for n in admitting)
            granted = self.store.admit_together(
                [self._ledger_request(asked[n].request) for n in admitting],
                now=now,
                default_cap=self.default_cap,
                lease=self.lease,
            )
            short = [
                asked[n].request.tenant for n, g in zip(admitting, granted, strict=True) if not g.granted
            ]
            runways = {
                runway.tenant: runway
                for runway in (
                    self.store.runways(now=now, default_cap=self.default_cap, tenants=short) if short else []
                )
            }
            for n, admission in zip(admitting, granted, strict=True):
                request = asked[n].request
                decided[n] = check_state(
                    request,
                    admission,
                    runways.get(request.tenant),
                    lease=self.lease,
                    default_cap=self.default_cap,
                )
            self._log_all([(decided[n], asked[n]) for n in admitting])
        return [decided[n] for n in range(len(asked))]

    def _ledger_request(self, request: WorkloadRequest) -> AdmissionRequest:
        return AdmissionRequest(
            request.tenant,
            request.instance_type,
            request.hosts,
            request.cap,
            region=self.region,
            pricing_model=request.pricing_model,
        )

    def reservation_of(self, request: WorkloadRequest) -> int | None:
        """The reservation a Ready decision made for this uid and no release gave back (None: none)."""
        return self.held_by_each([request])[0][0]

    def held_by_each(self, requests: Sequence[WorkloadRequest]) -> list[tuple[int | None, str | None]]:
        """For each request, the reservation a Ready decision made for its uid that no release gave
        back, and the admission it was made for ((None, None): none); one read for them all."""
        logged = self.decisions.read_each(
            sorted({request.subject for request in requests}),
            kinds=[KIND_OF_STATE["Ready"], RELEASED],
            limit=50,
        )
        found: list[tuple[int | None, str | None]] = []
        for request in requests:
            held: tuple[int | None, str | None] = (None, None)
            for entry in logged[request.subject]:
                details = entry.decision.details
                if details.get("uid") != request.uid:
                    continue
                if entry.decision.kind == KIND_OF_STATE["Ready"]:
                    held = (details.get("reservation"), str(details.get("admission", "")))
                elif details.get("reservation") == held[0]:
                    held = (None, None)
            found.append(held)
        return found

    def release(self, request: WorkloadRequest, *, now: datetime, why: str) -> int | None:
        """Give back the Workload's reservation (finished, evicted or deleted); which one, or None."""
        reservation = self.reservation_of(request)
        if reservation is None:
            return None
        return self._release(request, reservation, now=now, why=why)

    def _release(self, request: WorkloadRequest, reservation: int, *, now: datetime, why: str) -> int:
        released = self.store.release(reservation, now=now)
        reason = f"{request.namespace}/{request.name} {why}: reservation {reservation} " + (
            "released" if released else "already claimed or released"
        )
        details = {"uid": request.uid, "reservation": reservation, "released": released, "why": why}
        self.decisions.append(
            [Decision(RELEASED, ACTOR, reason, now, request.subject, request.tenant, details)],
            origin=f"k8s:{request.uid}:release:{reservation}",
        )
        return reservation

    def log(self, decision: CheckDecision, *, now: datetime, version: str, admission: str = "") -> None:
        """``decision`` in the log, made at ``now`` (a decision made outside :meth:`decide`: a stop)."""
        self._log_all([(decision, Asked(decision.request, now, version, admission))])

    def _log_all(self, decided: Sequence[tuple[CheckDecision, Asked]]) -> None:
        """Each decision in the log, keyed by its admission (Ready) or the Workload's version (Retry,
        Rejected: decided again later, logged again); one append for them all."""
        made: list[tuple[Decision, str]] = []
        for decision, asked in decided:
            request = decision.request
            details = {
                key: value
                for key, value in decision.as_dict().items()
                if key not in {"message", "tenant", "workload"}
            } | {
                "uid": request.uid,
                "namespace": request.namespace,
                "name": request.name,
                "admission": asked.admission,
            }
            origin = (
                f"k8s:{request.uid}:{asked.admission}"
                if decision.state == "Ready"
                else f"k8s:{request.uid}:{asked.version}"
            )
            kind = KIND_OF_STATE[decision.state]
            made.append(
                (
                    Decision(
                        kind, ACTOR, decision.message, asked.now, request.subject, request.tenant, details
                    ),
                    origin,
                )
            )
        self.decisions.append_each(made)


@dataclass(eq=False)
class Asked:
    """One Workload's decision, waiting for a ledger connection; ``answer`` once decided."""

    request: WorkloadRequest
    now: datetime
    version: str
    admission: str
    answer: CheckDecision | Exception | None = None

    def outcome(self) -> CheckDecision:
        if isinstance(self.answer, Exception):
            raise self.answer
        if self.answer is None:
            raise RuntimeError("read before it was decided")
        return self.answer


class CheckPool:
    """The workers' BudgetChecks, each lent for one ledger call: a worker holds a ledger connection
    only while it asks the ledger, not while it writes the Workload's entry to the API server, so
    the controller runs more workers than connections (``WORKERS_PER_CONNECTION``) and a connection
    is not left idle through each write. Never more connections than checks.

    Decisions waiting for a connection are decided together (``BudgetCheck.decide_together``): the
    worker that gets a connection takes the decisions waiting then, the oldest first, one a tenant
    and up to ``together`` (its own among them, unless a worker before it took it), decides them
    and hands each worker its answer. Under a burst the ledger's statements and commits serve
    several Workloads at once; a Workload alone is decided in a transaction of its own."""

    def __init__(self, checks: Sequence[BudgetCheck], *, together: int = DECIDED_TOGETHER) -> None:
        self.changed = threading.Condition()
        self.free = list(checks)
        self.asked: list[Asked] = []
        self.together = together

    @contextmanager
    def lent(self) -> Iterator[BudgetCheck]:
        with self.changed:
            self.changed.wait_for(lambda: bool(self.free))
            check = self.free.pop()
        try:
            yield check
        finally:
            with self.changed:
                self.free.append(check)
                self.changed.notify_all()

    def decide(
        self, request: WorkloadRequest, *, now: datetime, version: str = "", admission: str = ""
    ) -> CheckDecision:
        mine = Asked(request, now, version, admission)
        with self.changed:
            self.asked.append(mine)
        while (taken := self._take(mine)) is not None:
            self._answer(*taken)
        return mine.outcome()

    def _take(self, mine: Asked) -> tuple[BudgetCheck, list[Asked]] | None:
        """A connection and the decisions waiting (up to ``together``, the oldest first), once one is
        free; None once ``mine`` is answered (by this worker or another)."""
        with self.changed:
            self.changed.wait_for(lambda: mine.answer is not None or bool(self.free and self.asked))
            if mine.answer is not None:
                return None
            taken: dict[str, Asked] = {}  # one a tenant: the ledger admits a batch tenant by tenant
            for waiting in self.asked:
                if len(taken) < self.together:
                    taken.setdefault(waiting.request.tenant, waiting)
            chosen = {id(waiting) for waiting in taken.values()}
            self.asked = [waiting for waiting in self.asked if id(waiting) not in chosen]
            return self.free.pop(), list(taken.values())

    def _answer(self, check: BudgetCheck, taken: list[Asked]) -> None:
        answers: list[CheckDecision | Exception] = []
        try:
            answers = check.decide_together(taken)
        finally:
            with self.changed:
                self.free.append(check)
                for asked, answer in zip(taken, answers, strict=False):
                    asked.answer = answer
                for asked in taken[len(answers) :]:  # decide_together itself failed (interrupted)
                    asked.answer = RuntimeError("the ledger call was interrupted; decided again later")
                self.changed.notify_all()

    def release(self, request: WorkloadRequest, *, now: datetime, why: str) -> int | None:
        with self.lent() as check:
            return check.release(request, now=now, why=why)
