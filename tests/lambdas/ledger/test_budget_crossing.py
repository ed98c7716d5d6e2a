"""Enforcement within 60 s: the budget guardrail arms a one-time Scheduler check at the instant a
tenant's spend reaches its limit, on a virtual clock, against moto and a real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from guardrail_fleet import (
    REGION,
    ROLE_ARN,
    STACK,
    TARGET_ARN,
    client_factory,
    create_deadline_group,
    create_pool,
    deadline_schedules,
    group_of,
    guardrail_settings,
    launch,
    managed_tags,
    states,
)
from ledger_streams import T0, at, ms, step, who

from guardrails import names
from guardrails.runway import Budget
from lambdas import launcher
from lambdas.aws.environment import ClientFactory
from lambdas.engines import budgeting
from lambdas.ledger.store import LedgerStore

CAP = timedelta(hours=12)
LIMIT = Decimal(100)
BUDGET_ARN = budgeting.budget_function_arn(TARGET_ARN, STACK)


def armed_at(clients: object, tenant: str) -> datetime:
    schedule = deadline_schedules(clients)[names.budget_crossing_schedule(tenant)]  # type: ignore[arg-type]
    assert schedule["Target"]["Arn"] == BUDGET_ARN
    assert schedule["Target"]["Input"] == '{"tenants": ["research"]}'
    expression = schedule["ScheduleExpression"]  # at(2036-05-05T13:03:08)
    return datetime.fromisoformat(expression[3:-1]).replace(tzinfo=UTC)


def first_second_over_the_limit(
    store: LedgerStore, start: datetime, end: datetime, limit: Decimal = LIMIT
) -> datetime:
    """The truth, found on the ledger itself: the first whole second whose spend reaches the limit."""
    low, high = int(start.timestamp()), int(end.timestamp())
    while low < high:
        middle = (low + high) // 2
        (status,) = store.runways(now=datetime.fromtimestamp(middle, UTC), default_cap=CAP)
        if status.spent_usd >= limit:
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
    enforcer = budgeting.AwsEnforcer(
        clients=clients, regions=["us-east-1"], topic_arn=None, spot_action="terminate",
        crossing=budgeting.CrossingTarget(names.deadline_schedule_group(STACK), BUDGET_ARN, ROLE_ARN),
    )  # fmt: skip
    run = budgeting.enforce_budgets(store, enforcer, now=at(1), default_cap=CAP)
    assert run.errors == []
    scheduled = armed_at(clients, "research")  # $100 at $32.7726 an hour: about 3 h 3 min
    crossing = first_second_over_the_limit(store, at(1), at(6 * 60))
    assert timedelta(0) <= scheduled - crossing <= timedelta(seconds=60)
    assert states(clients("ec2", None), [host]) == {host: "running"}
    # A second host starts: the burn doubles and the check moves earlier.
    store.append([step("r2", "i-second", "running", ms(30), p4d)], source="meter", received_at=T0)
    budgeting.enforce_budgets(store, enforcer, now=at(30), default_cap=CAP)
    moved = armed_at(clients, "research")
    assert moved < scheduled
    # Scheduler fires at the armed instant. A host in its first minute is already billed that minute,
    # so a check can come up to its share of a minute early: it then finds the limit not yet
    # reached and re-arms, now exactly. The stop call comes at most 60 s after the crossing.
    crossing = first_second_over_the_limit(store, at(30), at(6 * 60))
    fired_at = moved
    for _ in range(3):
        fired = budgeting.enforce_budgets(store, enforcer, now=fired_at, default_cap=CAP)
        if fired.stopped:
            break
        fired_at = armed_at(clients, "research")
    assert fired.stopped == [host]
    assert timedelta(0) <= fired_at - crossing <= timedelta(seconds=60)
    assert states(clients("ec2", None), [host]) == {host: "stopped"}


def crossing_enforcer(clients: ClientFactory) -> budgeting.AwsEnforcer:
    return budgeting.AwsEnforcer(
        clients=clients, regions=[REGION], topic_arn=None, spot_action="terminate",
        crossing=budgeting.CrossingTarget(names.deadline_schedule_group(STACK), BUDGET_ARN, ROLE_ARN),
    )  # fmt: skip


def test_a_budget_change_arms_moves_and_removes_the_crossing_check(aws: str, store: LedgerStore) -> None:
    clients = client_factory(aws)
    create_deadline_group(clients)
    enforcer = crossing_enforcer(clients)
    p4d = who("research", "training", "p4d.24xlarge", 12 * 60)
    store.append([step("r1", "i-one", "running", ms(0), p4d)], source="meter", received_at=T0)

    def rearm(minute: float) -> datetime | None:
        return budgeting.rearm_crossing(store, enforcer, tenant="research", now=at(minute), default_cap=CAP)

    # A budget set: armed where the spend reaches it ($100 at $32.7726 an hour: about 3 h 3 min).
    store.set_budget(Budget("research", LIMIT, "month", actions=frozenset({"stop"})))
    assert rearm(1) is not None
    first = armed_at(clients, "research")
    assert (
        timedelta(0) <= first - first_second_over_the_limit(store, at(1), at(6 * 60)) <= timedelta(seconds=1)
    )
    # Raised to $200: moved later, to the new crossing.
    store.set_budget(Budget("research", Decimal(200), "month", actions=frozenset({"stop"})))
    rearm(2)
    raised = armed_at(clients, "research")
    crossing = first_second_over_the_limit(store, at(2), at(12 * 60), Decimal(200))
    assert raised > first
    assert timedelta(0) <= raised - crossing <= timedelta(seconds=1)
    # Lowered below what is already spent: the check comes at once and it stops the host.
    store.set_budget(Budget("research", Decimal(5), "month", actions=frozenset({"stop"})))
    assert rearm(20) == at(20)
    assert armed_at(clients, "research") - at(20) <= timedelta(seconds=1)
    # Removed: nothing would cross, the check is deleted; removing again finds none and is harmless.
    assert store.remove_budget("research")
    assert rearm(21) is None
    assert names.budget_crossing_schedule("research") not in deadline_schedules(clients)
    assert rearm(22) is None
    # Without the stop action nothing is ever stopped: no check either.
    store.set_budget(Budget("research", LIMIT, "month", actions=frozenset({"notify"})))
    assert rearm(23) is None
    assert names.budget_crossing_schedule("research") not in deadline_schedules(clients)


def test_a_targeted_check_removes_the_crossing_once_nothing_burns(aws: str, store: LedgerStore) -> None:
    clients = client_factory(aws)
    create_deadline_group(clients)
    enforcer = crossing_enforcer(clients)
    p4d = who("research", "training", "p4d.24xlarge", 12 * 60)
    store.set_budget(Budget("research", LIMIT, "month", actions=frozenset({"stop"})))
    store.append([step("r1", "i-one", "running", ms(0), p4d)], source="meter", received_at=T0)
    budgeting.enforce_budgets(store, enforcer, now=at(1), default_cap=CAP, tenants=["research"])
    assert names.budget_crossing_schedule("research") in deadline_schedules(clients)
    store.append([step("s1", "i-one", "stopped", ms(10), p4d)], source="meter", received_at=T0)
    run = budgeting.enforce_budgets(store, enforcer, now=at(10), default_cap=CAP, tenants=["research"])
    assert run.armed == [{"tenant": "research", "at": None}]
    assert names.budget_crossing_schedule("research") not in deadline_schedules(clients)


def test_an_admission_by_the_launcher_arms_the_crossing_check(aws: str, store: LedgerStore) -> None:
    clients = client_factory(aws)
    create_deadline_group(clients)
    create_pool(
        clients("autoscaling", REGION), clients("ec2", REGION), pool="training", instance_type="g5.12xlarge",
        desired=0, max_size=3, group_tags=managed_tags(max_runtime="2h", tenant="research"),
    )  # fmt: skip
    clients("ssm", REGION).put_parameter(Name=names.park_parameter(STACK), Value="false", Type="String")
    store.set_budget(Budget("research", LIMIT, "month", actions=frozenset({"deny", "stop"})))
    gate = budgeting.LedgerBudgetGate(store, default_cap=CAP, enforcer=crossing_enforcer(clients))

    def start(minute: float, capacity: int) -> dict[str, object]:
        event = {"pool": "training", "capacity": capacity}
        return launcher.handle(
            event, settings=guardrail_settings(), clients=clients, gate=gate, now=at(minute)
        )

    # Nothing burns yet: the admission leaves no check (and removing none is harmless).
    assert start(0, 1)["started"] == 1
    assert names.budget_crossing_schedule("research") not in deadline_schedules(clients)
    # The first host runs (its `running` metered); the next admission arms the check at the crossing.
    g5 = who("research", "training", "g5.12xlarge", 120)
    store.append([step("r1", "i-pool-1", "running", ms(1), g5)], source="meter", received_at=T0)
    assert start(2, 2)["started"] == 1
    armed = armed_at(clients, "research")
    assert (
        timedelta(0) <= armed - first_second_over_the_limit(store, at(2), at(48 * 60)) <= timedelta(seconds=1)
    )
    # A later admission moves it to the crossing at the burn then (here: the same burn, the same instant).
    assert start(3, 3)["started"] == 1
    assert armed_at(clients, "research") == armed
    assert (
        group_of(clients("autoscaling", REGION), names.autoscaling_group(STACK, "training"))[
            "DesiredCapacity"
        ]
        == 3
    )
