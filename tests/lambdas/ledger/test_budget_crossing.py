"""Enforcement within 60 s: the budget guardrail arms a one-time Scheduler check at the instant a
tenant's spend reaches its limit, on a virtual clock, against moto and a real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from guardrail_fleet import (
    ROLE_ARN,
    STACK,
    TARGET_ARN,
    client_factory,
    create_deadline_group,
    deadline_schedules,
    launch,
    managed_tags,
    states,
)
from ledger_streams import T0, at, ms, step, who

from guardrails import names
from guardrails.runway import Budget
from lambdas import budget
from lambdas.ledger.store import LedgerStore

CAP = timedelta(hours=12)
LIMIT = Decimal(100)
BUDGET_ARN = budget.budget_function_arn(TARGET_ARN, STACK)


def armed_at(clients: object, tenant: str) -> datetime:
    schedule = deadline_schedules(clients)[names.budget_crossing_schedule(tenant)]  # type: ignore[arg-type]
    assert schedule["Target"]["Arn"] == BUDGET_ARN
    assert schedule["Target"]["Input"] == '{"tenants": ["research"]}'
    expression = schedule["ScheduleExpression"]  # at(2036-05-05T13:03:08)
    return datetime.fromisoformat(expression[3:-1]).replace(tzinfo=UTC)


def first_second_over_the_limit(store: LedgerStore, start: datetime, end: datetime) -> datetime:
    """The truth, found on the ledger itself: the first whole second whose spend reaches the limit."""
    low, high = int(start.timestamp()), int(end.timestamp())
    while low < high:
        middle = (low + high) // 2
        (status,) = store.runways(now=datetime.fromtimestamp(middle, UTC), default_cap=CAP)
        if status.spent_usd >= LIMIT:
            high = middle
        else:
            low = middle + 1
    return datetime.fromtimestamp(low, UTC)


def test_the_crossing_is_checked_within_60_seconds_and_the_hosts_are_stopped(
    aws: str, store: LedgerStore
) -> None:
    clients = client_factory(aws)
    create_deadline_group(clients)
    (host,) = launch(clients("ec2", None), "p4d.24xlarge", managed_tags(tenant="research", max_runtime="12h"))
    store.set_budget(Budget("research", LIMIT, "month", actions=frozenset({"stop"})))
    p4d = who("research", "training", "p4d.24xlarge", 12 * 60)
    store.append([step("r1", host, "running", ms(0), p4d)], source="meter", received_at=T0)
    enforcer = budget.AwsEnforcer(
        clients=clients, regions=["us-east-1"], topic_arn=None, spot_action="terminate",
        crossing=budget.CrossingTarget(STACK, BUDGET_ARN, ROLE_ARN),
    )  # fmt: skip
    run = budget.enforce_budgets(store, enforcer, now=at(1), default_cap=CAP)
    assert run.errors == []
    scheduled = armed_at(clients, "research")  # $100 at $32.7726 an hour: about 3 h 3 min
    crossing = first_second_over_the_limit(store, at(1), at(6 * 60))
    assert timedelta(0) <= scheduled - crossing <= timedelta(seconds=60)
    assert states(clients("ec2", None), [host]) == {host: "running"}
    # A second host starts: the burn doubles and the check moves earlier.
    store.append([step("r2", "i-second", "running", ms(30), p4d)], source="meter", received_at=T0)
    budget.enforce_budgets(store, enforcer, now=at(30), default_cap=CAP)
    moved = armed_at(clients, "research")
    assert moved < scheduled
    # Scheduler fires at the armed instant. A host in its first minute is already billed that minute,
    # so a check can come up to its share of a minute early: it then finds the limit not yet
    # reached and re-arms, now exactly. The stop call comes at most 60 s after the crossing.
    crossing = first_second_over_the_limit(store, at(30), at(6 * 60))
    fired_at = moved
    for _ in range(3):
        fired = budget.enforce_budgets(store, enforcer, now=fired_at, default_cap=CAP)
        if fired.stopped:
            break
        fired_at = armed_at(clients, "research")
    assert fired.stopped == [host]
    assert timedelta(0) <= fired_at - crossing <= timedelta(seconds=60)
    assert states(clients("ec2", None), [host]) == {host: "stopped"}
