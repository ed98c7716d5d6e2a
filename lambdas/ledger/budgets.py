"""Budgets in the ledger: every tenant's runway, admissions that reserve money before hosts start,
and the budget guardrail's action log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, cast

import psycopg

from guardrails.launch import Admission, AdmissionRequest, decide_admission
from guardrails.ledger import to_ms
from guardrails.runway import Budget, BudgetDecision, Period, RunwayTotals, TenantRunway, period_bounds_ms
from lambdas.ledger import queries as sql


def admit(
    connection: psycopg.Connection[Any],
    request: AdmissionRequest,
    *,
    now: datetime,
    default_cap: timedelta,
    lease: timedelta,
) -> Admission:
    """Reserve what ``request``'s hosts can cost, in the caller's transaction (see LedgerStore.admit)."""
    connection.execute(sql.LOCK_TENANT, (request.tenant,))
    if request.instance_id is not None:
        (running,) = connection.execute(sql.IS_RUNNING, (request.instance_id,)).fetchone() or (False,)
        if running:  # already committed in the runway: never counted twice
            request = replace(request, hosts=0)
    ((_, price, _),) = connection.execute(
        sql.PRICES_AT, {"types": [request.instance_type], "at_ms": to_ms(now)}
    ).fetchall()
    statuses = runways(connection, now=now, default_cap=default_cap, tenants=[request.tenant])
    admission = decide_admission(request, statuses[0] if statuses else None, price)
    if not admission.granted or price is None or request.hosts == 0:
        return admission
    reserved = connection.execute(
        sql.RESERVE,
        (
            request.tenant,
            request.instance_type,
            request.hosts,
            request.cap // timedelta(milliseconds=1),
            to_ms(now),
            lease // timedelta(milliseconds=1),
        ),
    ).fetchone()
    return replace(admission, reservation_id=reserved[0] if reserved else None)


def runways(
    connection: psycopg.Connection[Any],
    *,
    now: datetime,
    default_cap: timedelta,
    tenants: Sequence[str] | None,
) -> list[TenantRunway]:
    """Every known tenant's (or just ``tenants'``) budget and runway at ``now``."""
    starts = period_bounds_ms(now)
    parameters = {
        "now_ms": to_ms(now),
        "default_cap_ms": default_cap // timedelta(milliseconds=1),
        "tenants": list(tenants) if tenants is not None else None,
        "day_ms": starts["day"],
        "week_ms": starts["week"],
        "month_ms": starts["month"],
    }
    found = []
    for row in connection.execute(sql.RUNWAYS, parameters).fetchall():
        (
            tenant,
            actions,
            limit,
            period,
            thresholds,
            spent,
            committed,
            burn,
            hosts,
            gpus,
            reserved,
            unpriced,
        ) = row
        if limit is None:  # no budget: usage is shown against the calendar month
            budget = Budget(tenant, None, actions=frozenset(actions))
        else:
            budget = Budget(tenant, limit, cast(Period, period), tuple(thresholds), frozenset(actions))
        totals = RunwayTotals(
            Decimal(spent),
            Decimal(committed),
            Decimal(burn),
            int(hosts),
            int(gpus),
            Decimal(reserved),
            int(unpriced),
        )
        found.append(TenantRunway(budget, now, totals))
    return found


def action_row(decision: BudgetDecision, now: datetime, period_start: datetime | None) -> dict[str, Any]:
    """The guardrail_actions row of a budget decision."""
    return {
        "at": now,
        "guardrail": "budget",
        "action": decision.action,
        "tenant": decision.tenant,
        "reason": decision.reason,
        "period_start": period_start,
        "threshold": decision.threshold,
        "once_key": decision.once_key,
    }
