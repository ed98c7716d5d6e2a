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


def admit_together(
    connection: psycopg.Connection[Any],
    requests: Sequence[AdmissionRequest],
    *,
    now: datetime,
    default_cap: timedelta,
    lease: timedelta,
) -> list[Admission]:
    """Reserve what each of ``requests``' hosts can cost, if its tenant's remaining budget covers it
    (LedgerStore.admit), in the caller's transaction, with a statement for each step instead of one
    per request. One request a tenant, so that no request's runway changes with another's
    reservation; the tenants' locks are taken in sorted order, so that two batches never wait on
    each other in a cycle (``pg_advisory_xact_lock`` waits and is held to the commit: PostgreSQL's
    manual, "Advisory Locks", explicit-locking.html)."""
    tenants = [request.tenant for request in requests]
    if len(set(tenants)) != len(tenants):
        raise ValueError(f"admitted together: one request per tenant, got {sorted(tenants)}")
    connection.execute(sql.LOCK_TENANTS, (sorted(tenants),))
    asked_hosts = [request.instance_id for request in requests if request.instance_id is not None]
    if asked_hosts:  # a host already running is committed in the runway: never counted twice
        running = {row[0] for row in connection.execute(sql.RUNNING_OF, (asked_hosts,)).fetchall()}
        requests = [replace(r, hosts=0) if r.instance_id in running else r for r in requests]
    keys = [request.price_key for request in requests]
    prices = [
        price for price, _, _ in connection.execute(sql.PRICES_AT, sql.price_key_parameters(keys, to_ms(now)))
    ]
    statuses = {
        status.tenant: status
        for status in runways(connection, now=now, default_cap=default_cap, tenants=tenants)
    }
    table = load_price_table()
    admissions = [
        decide_admission(
            request, statuses.get(request.tenant), price, table.accelerators(request.instance_type)
        )
        for request, price in zip(requests, prices, strict=True)
    ]
    reserving = [
        n
        for n, (request, admission, price) in enumerate(zip(requests, admissions, prices, strict=True))
        if admission.granted and price is not None and request.hosts > 0
    ]
    if not reserving:
        return admissions
    columns = list(zip(*(_reserve_row(requests[n], now, lease) for n in reserving), strict=True))
    reserved = connection.execute(sql.RESERVE_EACH, [list(column) for column in columns]).fetchall()
    for n, (reservation,) in zip(reserving, reserved, strict=True):
        admissions[n] = replace(admissions[n], reservation_id=reservation)
    return admissions


def _reserve_row(request: AdmissionRequest, now: datetime, lease: timedelta) -> tuple[Any, ...]:
    key = request.price_key
    return (
        request.tenant,
        key.instance_type,
        key.region,
        key.pricing_model,
        key.zone,
        request.hosts,
        request.cap // timedelta(milliseconds=1),
        to_ms(now),
        lease // timedelta(milliseconds=1),
    )


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
