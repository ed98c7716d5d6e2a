"""The nightly launcher's decision: start a pool's hosts, or refuse and say why.

Refusals, in the order they are checked: the stack is parked; the pool is already at the capacity
asked for; the tenant's runway cannot pay for the hosts to be started running up to their cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Literal, Protocol

from guardrails.durations import format_duration

RefusalKind = Literal["parked", "at-capacity", "budget"]
SECONDS_PER_HOUR = Decimal(3600)


class BudgetGate(Protocol):
    """The ledger's answer to "may this tenant commit this much money now?"."""

    def refusal_for(self, tenant: str, required_usd: Decimal, now: datetime) -> str | None:
        """None when the tenant's runway covers ``required_usd``; otherwise why not, for people."""
        ...


@dataclass(frozen=True)
class PoolState:
    pool: str
    group_name: str
    desired: int  # the Auto Scaling group's desired capacity now
    max_size: int
    instance_type: str
    tenant: str | None
    cap: timedelta


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
) -> LaunchDecision:
    start = max(target - pool.desired, 0)
    required = required_cost(start, usd_per_hour, pool.cap)

    def decision(refusal: Refusal | None, *, budget_checked: bool = False) -> LaunchDecision:
        return LaunchDecision(pool.pool, target, 0 if refusal else start, required, refusal, budget_checked)

    if parked:
        return decision(Refusal("parked", "the stack is parked; unpark it to run the nightly pools"))
    if start == 0:
        return decision(
            Refusal(
                "at-capacity",
                f"group {pool.group_name} already wants {pool.desired} hosts (asked for {target})",
            )
        )
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
    refusal = gate.refusal_for(pool.tenant, required, now)
    if refusal is not None:
        return decision(
            Refusal(
                "budget",
                f"tenant {pool.tenant} cannot cover {start} x {pool.instance_type} for "
                f"{format_duration(pool.cap)} (${required:.2f}): {refusal}",
            ),
            budget_checked=True,
        )
    return decision(None, budget_checked=True)
