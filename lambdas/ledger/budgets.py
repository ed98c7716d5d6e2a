"""Budgets in the ledger: every tenant's runway, admissions that reserve money before hosts start,
and the budget guardrail's action log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, cast

import psycopg

from guardrails.errors import ParkbrakeError
from guardrails.launch import Admission, AdmissionRequest, decide_admission
from guardrails.ledger import from_ms, to_ms
from guardrails.pricing import load_price_table
from guardrails.runway import Budget, BudgetDecision, Period, RunwayTotals, TenantRunway, period_start
from lambdas.ledger import queries as sql
from lambdas.ledger.connections import joined_transaction


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
    key = request.price_key
    ((price, _, _),) = connection.execute(
        sql.PRICES_AT, sql.price_key_parameters([key], to_ms(now))
    ).fetchall()
    statuses = runways(connection, now=now, default_cap=default_cap, tenants=[request.tenant])
    accelerators = load_price_table().accelerators(request.instance_type)
    admission = decide_admission(request, statuses[0] if statuses else None, price, accelerators)
    if not admission.granted or price is None or request.hosts == 0:
        return admission
    reserved = connection.execute(
        sql.RESERVE,
        (
            request.tenant,
            key.instance_type,
            key.region,
            key.pricing_model,
            key.zone,
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
    """Every known tenant's (or just ``tenants'``) budget and runway at ``now``.

    Each tenant's period starts in its budget's time zone (guardrails.runway.period_start): the
    starts of the (period, zone) pairs the budgets use are computed here and passed in. A budget
    changed to a new pair between the two reads comes back without a start: it is computed and the
    runway read again."""
    tenant_list = list(tenants) if tenants is not None else None
    with joined_transaction(connection):  # SET LOCAL below: a transaction's, the caller's if in one
        # Planning the runway query costs several times running it (3–5 ms against 0.5 at a million
        # events): one generic plan per session, prepared at the first call, serves every tenant.
        connection.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        pairs = set(connection.execute(sql.BUDGET_PERIODS, {"tenants": tenant_list}).fetchall())
        for _ in range(3):
            ordered = sorted(pairs)
            parameters = {
                "now_ms": to_ms(now),
                "default_cap_ms": default_cap // timedelta(milliseconds=1),
                "tenants": tenant_list,
                "periods": [period for period, _ in ordered],
                "zones": [zone for _, zone in ordered],
                "starts_ms": [
                    to_ms(period_start(cast(Period, period), now, zone)) for period, zone in ordered
                ],
            }
            rows = connection.execute(sql.RUNWAYS, parameters, prepare=True).fetchall()
            missing = {(row[3], row[12]) for row in rows if row[13] is None}
            if not missing:
                return [_with_gpu_hours(connection, _runway(row, now), row, default_cap) for row in rows]
            pairs |= missing
    raise ParkbrakeError("the budgets kept changing while their runway was read; try again")


def _runway(row: Sequence[Any], now: datetime) -> TenantRunway:
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
        zone,
    ) = row[:13]
    gpu_hours, source, first_cap_end_ms = row[14:17]
    if limit is None:  # no budget: usage is shown against the calendar month
        budget = Budget(tenant, None, actions=frozenset(actions))
    else:
        budget = Budget(
            tenant,
            limit,
            cast(Period, period),
            tuple(thresholds),
            frozenset(actions),
            zone,
            gpu_hours,
            source,
        )
    totals = RunwayTotals(
        Decimal(spent),
        Decimal(committed),
        Decimal(burn),
        int(hosts),
        int(gpus),
        Decimal(reserved),
        int(unpriced),
        first_cap_end_ms=None if first_cap_end_ms is None else int(first_cap_end_ms),
    )
    start = (
        from_ms(row[13])
        if limit is not None and row[13] != to_ms(period_start(budget.period, now, zone))
        else None
    )
    return TenantRunway(budget, now, totals, start)


def _with_gpu_hours(
    connection: psycopg.Connection[Any], status: TenantRunway, row: Sequence[Any], default_cap: timedelta
) -> TenantRunway:
    """``status`` with its accelerator-milliseconds, read only when its budget has a GPU-hour limit."""
    if status.budget.gpu_hours is None or status.budget.limit_usd is None:
        return status
    spent, committed, reserved = accelerator_ms(
        connection, status.tenant, start_ms=row[13], now=status.now, default_cap=default_cap
    )
    totals = replace(
        status.totals,
        spent_accelerator_ms=spent,
        committed_accelerator_ms=committed,
        reserved_accelerator_ms=reserved,
    )
    return replace(status, totals=totals)


def accelerator_ms(
    connection: psycopg.Connection[Any], tenant: str, *, start_ms: int, now: datetime, default_cap: timedelta
) -> tuple[int, int, int]:
    """``tenant``'s accelerator-milliseconds since ``start_ms``: used, committed to running hosts' caps,
    and held by its live reservations (each type's accelerators from the price table)."""
    parameters = {
        "tenant": tenant,
        "start_ms": start_ms,
        "now_ms": to_ms(now),
        "default_cap_ms": default_cap // timedelta(milliseconds=1),
    }
    spent, committed = connection.execute(sql.GPU_MS, parameters).fetchone() or (0, 0)
    table = load_price_table()
    reserved = sum(
        (table.accelerators(instance_type) or 0) * int(host_ms)
        for instance_type, host_ms in connection.execute(sql.RESERVED_HOSTS, parameters).fetchall()
    )
    return int(spent), int(committed), reserved


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
