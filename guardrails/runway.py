"""Budgets and runway per tenant, and what the budget guardrail does about them.

For each tenant and budget period:
- *spent*: what AWS bills for the tenant's hosts from the period's start (60 s minimums included);
- *committed*: what its running hosts will still cost if each runs to its cap;
- *remaining* = limit − spent − committed;
- *burn rate*: USD per hour of the hosts running now, at today's prices;
- *runway* = remaining ÷ burn rate: how long until the limit at the current burn.

Soft thresholds and the limit are measured on spent + committed, so warnings and refusals come
before the money is gone. Stopping hosts is destructive, so it waits until *spent* reaches the limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal, Protocol, get_args
from zoneinfo import ZoneInfo

from guardrails.ledger import MS_PER_HOUR, Interval, PriceBook, usd

Period = Literal["day", "week", "month"]
Action = Literal["notify", "deny", "stop"]
PERIODS: tuple[Period, ...] = get_args(Period)
ACTIONS: tuple[Action, ...] = get_args(Action)
DEFAULT_ACTIONS: frozenset[Action] = frozenset({"notify", "deny"})
DEFAULT_SOFT_THRESHOLDS = (Decimal("0.5"), Decimal("0.8"), Decimal("0.9"))
ADJECTIVE: dict[Period, str] = {"day": "daily", "week": "weekly", "month": "monthly"}


DEFAULT_TIMEZONE = "UTC"


def period_bounds(period: Period, now: datetime, zone: str = DEFAULT_TIMEZONE) -> tuple[datetime, datetime]:
    """``[start, end)`` of the budget period containing ``now`` in ``zone``, in UTC: from a local
    midnight to the next (day), Monday to Monday (ISO week), the 1st to the 1st (month). A day
    across a DST change is 23 or 25 hours; a midnight that a DST change skips starts at the first
    instant the day has."""
    where = ZoneInfo(zone)
    first = now.astimezone(where).date()
    if period == "week":
        first -= timedelta(days=first.weekday())
    elif period == "month":
        first = first.replace(day=1)
    if period == "day":
        after = first + timedelta(days=1)
    elif period == "week":
        after = first + timedelta(days=7)
    else:
        after = first.replace(year=first.year + first.month // 12, month=first.month % 12 + 1)
    return _local_midnight(first, where), _local_midnight(after, where)


def _local_midnight(day: date, where: ZoneInfo) -> datetime:
    # fold=0 maps a skipped midnight with the offset before the gap: the first instant after it.
    return datetime.combine(day, time(), where).astimezone(UTC)


def period_start(period: Period, now: datetime, zone: str = DEFAULT_TIMEZONE) -> datetime:
    """Start of the budget period containing ``now`` in ``zone`` (UTC), as :func:`period_bounds`."""
    return period_bounds(period, now, zone)[0]


@dataclass(frozen=True)
class Budget:
    tenant: str
    limit_usd: Decimal | None  # None: no budget (usage is still reported, nothing is enforced)
    period: Period = "month"
    soft_thresholds: tuple[Decimal, ...] = DEFAULT_SOFT_THRESHOLDS
    actions: frozenset[Action] = DEFAULT_ACTIONS
    timezone: str = DEFAULT_TIMEZONE  # IANA: where the tenant's days, weeks and months begin
    gpu_hours: Decimal | None = None  # a second limit: accelerator-hours per period (None: none)
    source: str = "hand"  # who set it last: "hand" (ledger budget) or "stack" (Pulumi.<stack>.yaml)


@dataclass(frozen=True)
class RunwayTotals:
    """The sums a runway is made of; computed by the database, or by :func:`runway_totals`."""

    spent_usd_hour_ms: Decimal = Decimal(0)
    committed_usd_hour_ms: Decimal = Decimal(0)
    burn_usd_per_hour: Decimal = Decimal(0)
    running_hosts: int = 0
    running_accelerators: int = 0
    reserved_usd_hour_ms: Decimal = Decimal(0)  # live reservations for hosts not yet running
    unpriced_hosts: int = 0  # running hosts the ledger has no price for: their burn is unknown
    # Accelerator-milliseconds, read only for a budget with a GPU-hour limit: used since the
    # period's start, committed by running hosts up to their caps, held by live reservations.
    spent_accelerator_ms: int = 0
    committed_accelerator_ms: int = 0
    reserved_accelerator_ms: int = 0
    # When the first running host reaches its cap (its worst case ends): the earliest moment a
    # budget held by running hosts can free anything (None: no host running).
    first_cap_end_ms: int | None = None


def runway_totals(
    intervals: Iterable[Interval],
    prices: PriceBook,
    *,
    period_start_ms: int,
    now_ms: int,
    default_cap_ms: int,
) -> RunwayTotals:
    """The totals of one tenant's intervals (the pure twin of the ledger store's runway query)."""
    spent = committed = burn = Decimal(0)
    hosts = accelerators = 0
    cap_ends: list[int] = []
    for interval in intervals:
        who = interval.attribution
        billed_until_ms = interval.billed_until_ms(now_ms)
        spent += prices.usd_hour_ms(who, max(interval.started_ms, period_start_ms), billed_until_ms)
        if interval.is_open:
            cap_end_ms = interval.projected_until_ms(now_ms, default_cap_ms)
            committed += prices.usd_hour_ms(who, billed_until_ms, cap_end_ms)
            cap_ends.append(cap_end_ms)
            burn += prices.usd_per_hour_at(who, now_ms)
            hosts += 1
            accelerators += interval.attribution.accelerators
    return RunwayTotals(
        spent, committed, burn, hosts, accelerators, first_cap_end_ms=min(cap_ends, default=None)
    )


@dataclass(frozen=True)
class TenantRunway:
    budget: Budget
    now: datetime
    totals: RunwayTotals = field(default_factory=RunwayTotals)
    # Where the ledger started the period, when not at the zone's own start: a month after a closed
    # one starts where that one ended (its zone may have been another).
    start: datetime | None = None

    @property
    def tenant(self) -> str:
        return self.budget.tenant

    @property
    def period_start(self) -> datetime:
        return self.start or period_start(self.budget.period, self.now, self.budget.timezone)

    @property
    def spent_usd(self) -> Decimal:
        return usd(self.totals.spent_usd_hour_ms)

    @property
    def committed_usd(self) -> Decimal:
        return usd(self.totals.committed_usd_hour_ms)

    @property
    def reserved_usd(self) -> Decimal:
        return usd(self.totals.reserved_usd_hour_ms)

    @property
    def used_usd(self) -> Decimal:
        """Spent, committed and reserved: what the budget's thresholds are measured against."""
        return self.spent_usd + self.committed_usd + self.reserved_usd

    @property
    def remaining_usd(self) -> Decimal | None:
        limit = self.budget.limit_usd
        return None if limit is None else limit - self.used_usd

    @property
    def runway(self) -> timedelta | None:
        """Time to the limit at the current burn; None when unbounded (no budget, or nothing burning)."""
        remaining = self.remaining_usd
        if remaining is None:
            return None
        if remaining <= 0:
            return timedelta(0)
        if self.totals.burn_usd_per_hour <= 0:
            return None
        ms = Fraction(remaining) * MS_PER_HOUR / Fraction(self.totals.burn_usd_per_hour)
        return timedelta(milliseconds=int(ms))

    @property
    def gpu_hours_spent(self) -> Decimal:
        return _hours(self.totals.spent_accelerator_ms)

    @property
    def gpu_hours_used(self) -> Decimal:
        """Spent, committed and reserved accelerator-hours: what a GPU-hour limit is measured against."""
        totals = self.totals
        return _hours(
            totals.spent_accelerator_ms + totals.committed_accelerator_ms + totals.reserved_accelerator_ms
        )

    @property
    def gpu_hours_remaining(self) -> Decimal | None:
        limit = self.budget.gpu_hours
        return None if limit is None or self.budget.limit_usd is None else limit - self.gpu_hours_used

    def as_dict(self) -> dict[str, Any]:
        runway = self.runway
        gpu_hours = self.budget.gpu_hours is not None and self.budget.limit_usd is not None
        return {
            "tenant": self.tenant,
            "period": self.budget.period,
            "period_start": self.period_start.isoformat(),
            "timezone": self.budget.timezone,
            "limit_usd": _number(self.budget.limit_usd),
            "spent_usd": _number(self.spent_usd),
            "committed_usd": _number(self.committed_usd),
            "reserved_usd": _number(self.reserved_usd),
            "remaining_usd": _number(self.remaining_usd),
            "burn_usd_per_hour": _number(self.totals.burn_usd_per_hour),
            "runway_seconds": None if runway is None else runway.total_seconds(),
            "running_hosts": self.totals.running_hosts,
            "running_accelerators": self.totals.running_accelerators,
            "unpriced_hosts": self.totals.unpriced_hosts,
            "actions": sorted(self.budget.actions),
            "budget_source": None if self.budget.limit_usd is None else self.budget.source,
            "gpu_hours_limit": _number(self.budget.gpu_hours) if gpu_hours else None,
            "gpu_hours_spent": _number(self.gpu_hours_spent) if gpu_hours else None,
            "gpu_hours_committed": _number(_hours(self.totals.committed_accelerator_ms))
            if gpu_hours
            else None,
            "gpu_hours_reserved": _number(_hours(self.totals.reserved_accelerator_ms)) if gpu_hours else None,
            "gpu_hours_remaining": _number(self.gpu_hours_remaining),
        }


def _hours(ms: int) -> Decimal:
    """Accelerator-hours of ``ms`` accelerator-milliseconds, to the millisecond (six decimals)."""
    return (Decimal(ms) / MS_PER_HOUR).quantize(Decimal("0.000001"))


def _number(value: Decimal | None) -> str | None:
    """An amount as JSON carries every amount of parkbrake's: an exact decimal string
    (docs/ledger.md, "Amounts in JSON")."""
    return None if value is None else str(value)


def money(value: Decimal) -> str:
    return f"${value.quantize(Decimal('0.01')):,}"


def gpu_hour_refusal(status: TenantRunway, required_hours: Decimal) -> str | None:
    """Why new work using up to ``required_hours`` accelerator-hours must not start under the
    budget's GPU-hour limit, or None when it may (or there is no such limit, or no deny)."""
    remaining = status.gpu_hours_remaining
    if remaining is None or "deny" not in status.budget.actions or required_hours <= remaining:
        return None
    budget = status.budget
    return (
        f"the {ADJECTIVE[budget.period]} GPU-hour budget of tenant {status.tenant} is {budget.gpu_hours:,.2f} "
        f"accelerator-hours: {status.gpu_hours_used:,.2f} used (spent, committed to running hosts' caps and "
        f"reserved) leave {max(remaining, Decimal(0)):,.2f}, less than the {required_hours:,.2f} needed"
    )


def refusal(status: TenantRunway, required_usd: Decimal) -> str | None:
    """Why new work costing up to ``required_usd`` must not start, or None when it may."""
    remaining = status.remaining_usd
    if remaining is None or "deny" not in status.budget.actions or required_usd <= remaining:
        return None
    budget = status.budget
    assert budget.limit_usd is not None  # remaining is None without a limit
    reserved = f", {money(status.reserved_usd)} reserved for hosts starting" if status.reserved_usd else ""
    return (
        f"the {ADJECTIVE[budget.period]} budget of tenant {status.tenant} is {money(budget.limit_usd)}: "
        f"{money(status.spent_usd)} spent and {money(status.committed_usd)} committed to running hosts' caps"
        f"{reserved} leave {money(max(remaining, Decimal(0)))}, less than the {money(required_usd)} needed"
    )


@dataclass(frozen=True)
class BudgetDecision:
    """One thing the budget guardrail should do for a tenant now."""

    action: Action
    tenant: str
    reason: str
    threshold: Decimal | None = None  # the fraction of the limit crossed (notify)
    once_key: str | None = None  # claimed in the ledger so the action happens once per period


def budget_decisions(status: TenantRunway) -> list[BudgetDecision]:
    """What a tenant's budget calls for now; ``once_key`` deduplicates across runs and processes."""
    budget = status.budget
    limit = budget.limit_usd
    if limit is None:
        return []
    period_key = f"budget:{status.tenant}:{budget.period}:{status.period_start.isoformat()}"
    summary = (
        f"{money(status.used_usd)} of {money(limit)} ({money(status.spent_usd)} spent, "
        f"{money(status.committed_usd)} committed) in the {budget.period} from {status.period_start:%Y-%m-%d}"
    )
    decisions: list[BudgetDecision] = []
    if "notify" in budget.actions:
        for threshold in sorted({*budget.soft_thresholds, Decimal(1)}):
            if status.used_usd >= limit * threshold:
                decisions.append(
                    BudgetDecision(
                        "notify",
                        status.tenant,
                        f"tenant {status.tenant!r} reached {threshold:.0%} of its budget: {summary}",
                        threshold,
                        f"{period_key}:notify:{threshold.normalize()}",
                    )
                )
    if "deny" in budget.actions and status.used_usd >= limit:
        decisions.append(
            BudgetDecision(
                "deny",
                status.tenant,
                f"tenant {status.tenant!r} has no budget left; new work is refused: {summary}",
                once_key=f"{period_key}:deny",
            )
        )
    if "stop" in budget.actions and status.spent_usd >= limit and status.totals.running_hosts:
        decisions.append(
            BudgetDecision(
                "stop",
                status.tenant,
                f"tenant {status.tenant!r} spent its budget; stopping its running hosts: {summary}",
            )
        )
    return decisions


@dataclass
class StopReport:
    acted: list[str] = field(default_factory=list)  # hosts taken off the bill (or that would be)
    errors: list[dict[str, str]] = field(default_factory=list)


class Enforcer(Protocol):
    """How a budget's actions reach the platform: AWS today, a Kueue ClusterQueue's stopPolicy later
    (deny: ``Hold``, stop: ``HoldAndDrain``)."""

    def notify(self, tenant: str, subject: str, message: str) -> None: ...

    def deny(self, tenant: str, reason: str) -> None: ...

    def stop(self, tenant: str, reason: str, *, dry_run: bool) -> StopReport: ...

    def arm_crossing(self, tenant: str, at: datetime | None) -> None:
        """Check ``tenant``'s budget again at ``at``, when its spend reaches the limit; None: remove
        the check (nothing would cross)."""
        ...


def budget_notice(decisions: Sequence[BudgetDecision]) -> tuple[str, str]:
    """Subject and message for newly crossed thresholds: one notice, for the highest of them."""
    top = max(decisions, key=lambda decision: decision.threshold or Decimal(0))
    subject = f"parkbrake: {top.tenant} at {top.threshold or 0:.0%} of budget"
    return subject[:100], top.reason


def crossing_at(status: TenantRunway) -> datetime | None:
    """When the tenant's *spent* reaches its limit at the current burn (now if it has), for the budget
    guardrail to arm a one-time check there; None when nothing would stop (no limit, no ``stop``
    action, nothing burning)."""
    limit = status.budget.limit_usd
    if limit is None or "stop" not in status.budget.actions or not status.totals.running_hosts:
        return None
    left = limit - status.spent_usd
    if left <= 0:
        return status.now
    if status.totals.burn_usd_per_hour <= 0:
        return None
    ms = Fraction(left) * MS_PER_HOUR / Fraction(status.totals.burn_usd_per_hour)
    return status.now + timedelta(milliseconds=int(ms))
