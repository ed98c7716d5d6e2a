"""The nightly launcher's decision: start a pool's hosts, or refuse and say why.

Refusals, in the order they are checked: the stack is parked, or an organisation's hub parked its
account; the day is closed in the stack's
calendar of closed days; the pool is already at the capacity asked for; the ledger does not admit the hosts (the tenant's remaining budget cannot cover them
running up to their cap). An admission reserves that money until the hosts' `running` events claim
it, so two launches can never both spend the same remainder.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, Protocol

from guardrails.durations import format_duration
from guardrails.launch_report import LaunchReport
from guardrails.ledger import ON_DEMAND, PriceKey, billable_ms, usd
from guardrails.pricing import HOME_REGION
from guardrails.runway import TenantRunway, gpu_hour_refusal, refusal

RefusalKind = Literal["parked", "closed", "at-capacity", "budget"]
SECONDS_PER_HOUR = Decimal(3600)


@dataclass(frozen=True)
class AdmissionRequest:
    """Hosts about to start for a tenant, each able to run up to ``cap``."""

    tenant: str
    instance_type: str
    hosts: int
    cap: timedelta
    # The host asking for itself (``parkbrake run``): once the ledger has it running, its cost to
    # its cap is already committed and it is not counted again.
    instance_id: str | None = None
    # Where and how the hosts are bought: their price is the ledger's for this key. A spot request
    # rarely knows its zone in advance; without one it is reserved at the region's on-demand price.
    region: str = HOME_REGION
    pricing_model: str = ON_DEMAND
    zone: str | None = None

    @property
    def price_key(self) -> PriceKey:
        return PriceKey(self.instance_type, self.region, self.pricing_model, self.zone)


@dataclass(frozen=True)
class Admission:
    """The ledger's answer: granted (with the reservation that holds the money) or refused (why)."""

    granted: bool
    needed_usd: Decimal  # hosts x price x cap (billed per second, 60 s minimum)
    remaining_usd: Decimal | None  # before this admission; None: no budget
    reservation_id: int | None = None
    reason: str | None = None  # why it was refused

    def as_dict(self) -> dict[str, Any]:
        return {
            "granted": self.granted,
            "reservation_id": self.reservation_id,
            "needed_usd": str(self.needed_usd),
            "remaining_usd": None if self.remaining_usd is None else str(self.remaining_usd),
            "reason": self.reason,
        }


class BudgetGate(Protocol):
    """The ledger's admission: reserve what hosts about to start can cost, atomically per tenant."""

    def admit(self, request: AdmissionRequest, now: datetime) -> Admission:
        """Granted with a reservation when the tenant's remaining budget covers the request."""
        ...

    def release(self, reservation_id: int, now: datetime) -> None:
        """Give back a reservation whose hosts will not start."""
        ...


@dataclass(frozen=True)
class PoolState:
    pool: str
    group_name: str
    desired: int  # the Auto Scaling group's desired capacity now
    max_size: int
    # What the budget is admitted for: of the types the group may launch, the dearest, since the
    # group picks one (a fallback type when EC2 lacks capacity for the first) after the admission.
    instance_type: str
    tenant: str | None
    cap: timedelta
    instance_types: tuple[str, ...] = ()  # the group's types in order of preference (fallbacks after)


@dataclass(frozen=True)
class Refusal:
    kind: RefusalKind
    reason: str


@dataclass(frozen=True)
class LaunchDecision:
    pool: str
    target: int  # the desired capacity asked for
    start: int  # hosts to add; zero when refused
    required_usd: Decimal  # start x hourly price x cap hours: the most the started hosts can cost
    refusal: Refusal | None
    budget_checked: bool
    reservation_id: int | None = None  # the ledger's reservation for the hosts started
    instance_types: tuple[str, ...] = ()  # what the group may launch, in order of preference
    priced_as: str | None = None  # the type the hosts were priced (and admitted) at
    tenant: str | None = None  # who pays for the hosts: the group's parkbrake:tenant tag
    got: LaunchReport | None = None  # what the group launched once the launcher stopped waiting


def required_cost(hosts: int, usd_per_hour: Decimal, cap: timedelta) -> Decimal:
    """What ``hosts`` cost at most, each running its full cap."""
    return hosts * usd_per_hour * Decimal(int(cap.total_seconds())) / SECONDS_PER_HOUR


def decide_launch(
    pool: PoolState,
    *,
    parked: bool,
    target: int,
    usd_per_hour: Decimal,
    gate: BudgetGate | None,
    now: datetime,
    closed: str | None = None,
    organisation_parked: str | None = None,
) -> LaunchDecision:
    """``closed``: why the calendar closes the day of this start (None: open, or no calendar);
    ``organisation_parked``: why an organisation's park switch in the account refuses it (None: off,
    or no organisation)."""
    start = max(target - pool.desired, 0)
    required = required_cost(start, usd_per_hour, pool.cap)

    def decision(
        refusal: Refusal | None, *, budget_checked: bool = False, reservation_id: int | None = None
    ) -> LaunchDecision:
        return LaunchDecision(
            pool.pool,
            target,
            0 if refusal else start,
            required,
            refusal,
            budget_checked,
            reservation_id,
            pool.instance_types or (pool.instance_type,),
            pool.instance_type,
            pool.tenant,
        )

    if organisation_parked is not None and not parked:
        return decision(Refusal("parked", organisation_parked))
    if (refusal := _not_tonight(pool, parked=parked, closed=closed, start=start, target=target)) is not None:
        return decision(refusal)
    if gate is None:
        return decision(None)
    if pool.tenant is None:
        # Without a tenant nobody pays, and the budget cannot be checked: refuse rather than guess.
        return decision(
            Refusal(
                "budget", f"group {pool.group_name} has no parkbrake:tenant tag; nobody's budget to check"
            ),
            budget_checked=True,
        )
    admission = gate.admit(AdmissionRequest(pool.tenant, pool.instance_type, start, pool.cap), now)
    if not admission.granted:
        return decision(
            Refusal(
                "budget",
                f"tenant {pool.tenant} cannot cover {start} x {pool.instance_type} for "
                f"{format_duration(pool.cap)} (${admission.needed_usd:.2f}): {admission.reason}",
            ),
            budget_checked=True,
        )
    return decision(None, budget_checked=True, reservation_id=admission.reservation_id)


def _not_tonight(
    pool: PoolState, *, parked: bool, closed: str | None, start: int, target: int
) -> Refusal | None:
    """Why nothing starts, whatever the budget: a parked stack, a closed day, a group already full."""
    if parked:
        return Refusal("parked", "the stack is parked; unpark it to run the nightly pools")
    if closed is not None:
        return Refusal("closed", closed)
    if start == 0:
        return Refusal(
            "at-capacity", f"group {pool.group_name} already wants {pool.desired} hosts (asked for {target})"
        )
    return None


def decide_admission(
    request: AdmissionRequest,
    status: TenantRunway | None,
    usd_per_hour: Decimal | None,
    accelerators: int | None = None,
) -> Admission:
    """Whether ``status`` (the tenant's runway, None for a tenant the ledger has never seen) covers
    ``request`` at ``usd_per_hour`` (None: the ledger has no price for the type), in dollars and, for
    a budget with a GPU-hour limit, in accelerator-hours (``accelerators`` per host: each host
    counted for its whole cap)."""
    remaining = status.remaining_usd if status is not None else None
    cap_ms = request.cap // timedelta(milliseconds=1)
    if usd_per_hour is None:
        enforced = status is not None and remaining is not None and "deny" in status.budget.actions
        unpriced = (
            f"the ledger has no price for {request.instance_type} in {request.region}, so its cost cannot be reserved against "
            f"tenant {request.tenant}'s budget; record one (`parkbrake ledger migrate` after "
            "`parkbrake pricing refresh`)"
        )
        return Admission(not enforced, Decimal(0), remaining, reason=unpriced if enforced else None)
    needed = usd(request.hosts * usd_per_hour * billable_ms(cap_ms)) if request.hosts else Decimal(0)
    reason = refusal(status, needed) if status is not None else None
    if reason is None and status is not None and request.hosts:
        hours = Decimal(request.hosts * (accelerators or 0) * cap_ms) / 3_600_000
        reason = gpu_hour_refusal(status, hours.quantize(Decimal("0.000001")))
    return Admission(reason is None, needed, remaining, reason=reason)
