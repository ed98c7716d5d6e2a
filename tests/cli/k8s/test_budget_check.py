"""The budget check against a real ledger: Ready reserves, Retry when reservations hold the runway or
the ledger is down, Rejected when the Workload alone exceeds the limit; one reservation per admission;
releases; the decision log."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import psycopg

from cli.k8s.admission import BudgetCheck, CheckPool
from cli.k8s.workload import workload_request
from guardrails.launch import AdmissionRequest
from guardrails.pricing import PriceTable
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore
from stacks.config import StackConfig
from tests.cli.k8s.conftest import set_budget
from tests.cli.k8s.workloads import workload
from tests.lambdas.ledger.ledger_streams import T0, at, ms, step, who

NOW = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)


def test_a_workload_within_budget_is_ready_with_its_reservation_once(
    check: BudgetCheck, store: LedgerStore, eks: StackConfig, prices: PriceTable
) -> None:
    set_budget(store, "research", "1000")
    request = workload_request(workload(pods=2, gpus_per_pod=4, max_seconds=3600), eks, prices)
    first = check.decide(request, now=NOW)
    assert first.state == "Ready"
    assert first.reservation is not None
    assert first.needed_usd == Decimal("11.344000")  # 2 x g5.12xlarge at $5.672 for one hour
    again = check.decide(request, now=NOW + timedelta(seconds=5))
    assert (again.state, again.reservation, again.repeated) == ("Ready", first.reservation, True)
    (runway,) = store.runways(now=NOW, default_cap=timedelta(hours=1), tenants=["research"])
    assert runway.reserved_usd == Decimal("11.344")  # reserved once, not twice
    logged = DecisionLedger.of(store).read(instance_id="workload/research/job-train-1")
    assert [entry.decision.kind for entry in logged] == ["workload-ready"]
    assert logged[0].decision.details["reservation"] == first.reservation
    assert logged[0].decision.details["uid"] == request.uid


def test_a_workload_the_budget_cannot_cover_is_rejected(
    check: BudgetCheck, store: LedgerStore, eks: StackConfig, prices: PriceTable
) -> None:
    set_budget(store, "research", "10")
    request = workload_request(workload(pods=8, gpus_per_pod=4), eks, prices)
    decision = check.decide(request, now=NOW)
    assert decision.state == "Rejected"
    assert decision.reservation is None
    assert (
        "it alone costs $45.38, more than tenant research's whole month limit of $10.00" in decision.message
    )
    (logged,) = DecisionLedger.of(store).read(instance_id=request.subject)
    assert (logged.decision.kind, logged.decision.tenant) == ("workload-rejected", "research")


def test_money_held_for_starting_hosts_is_a_retry_and_its_release_admits_the_next(
    check: BudgetCheck, store: LedgerStore, eks: StackConfig, prices: PriceTable
) -> None:
    set_budget(store, "research", "50")
    big = workload_request(workload("big", pods=8, gpus_per_pod=4), eks, prices)
    small = workload_request(workload("small", pods=1, gpus_per_pod=4), eks, prices)
    assert check.decide(big, now=NOW).state == "Ready"
    waiting = check.decide(small, now=NOW, version="7")
    assert waiting.state == "Retry"
    assert waiting.requeue_after == timedelta(minutes=30)
    assert "is reserved for hosts starting, retrying after 30m" in waiting.message
    assert check.release(big, now=NOW, why="finished") is not None
    assert check.release(big, now=NOW, why="finished") is None  # given back once
    assert check.decide(small, now=NOW, version="9").state == "Ready"
    # a released uid decided again reserves anew rather than reusing what it gave back
    assert check.decide(big, now=NOW).state == "Retry"
    kinds = [entry.decision.kind for entry in DecisionLedger.of(store).read(tenant="research")]
    assert kinds == [
        "workload-ready",
        "workload-retry",
        "workload-released",
        "workload-ready",
        "workload-retry",
    ]


def test_an_unreachable_ledger_is_a_retry_and_admits_nothing(eks: StackConfig, prices: PriceTable) -> None:
    down = LedgerStore.connect("postgresql://parkbrake@127.0.0.1:1/ledger?connect_timeout=1")
    check = BudgetCheck(down, default_cap=timedelta(minutes=90), region=eks.region)
    decision = check.decide(workload_request(workload(), eks, prices), now=NOW)
    assert decision.state == "Retry"
    assert decision.requeue_after == timedelta(minutes=1)
    assert decision.message.startswith("ledger unreachable, nothing admitted (fail closed)")
    assert decision.reservation is None


def test_a_tenant_without_a_budget_is_ready(check: BudgetCheck, eks: StackConfig, prices: PriceTable) -> None:
    decision = check.decide(workload_request(workload(gpus_per_pod=1), eks, prices), now=NOW)  # no budget set
    assert decision.state == "Ready"
    assert decision.request.instance_type == "g5.12xlarge"


def test_money_held_by_running_hosts_is_retried_when_the_first_of_them_reaches_its_cap(
    check: BudgetCheck, store: LedgerStore, eks: StackConfig, prices: PriceTable
) -> None:
    set_budget(store, "research", "20")
    store.append(
        [
            step("run-1", "i-1", "running", ms(0), who("research", "training", "g5.12xlarge", 120)),
            step("run-2", "i-2", "running", ms(0), who("research", "training", "g5.12xlarge", 60)),
        ],
        source="meter",
        received_at=T0,
    )  # $1.89 spent by minute 10, $15.13 still committed to the two caps: $2.98 left
    request = workload_request(workload(pods=1, gpus_per_pod=4, max_seconds=3600), eks, prices)
    decision = check.decide(request, now=at(10))
    assert decision.state == "Retry"
    assert decision.requeue_after == timedelta(minutes=50)  # i-2's cap ends at minute 60, not the default cap
    assert "held by hosts running or starting, the first of them capped in 50m" in decision.message


def test_the_admit_joins_the_callers_transaction_and_commits_alone_without_one(
    check: BudgetCheck, store: LedgerStore, eks: StackConfig, prices: PriceTable
) -> None:
    """The admit joins a caller's transaction (the budget check's decision) rather than opening a
    savepoint: undone with it; outside one it commits by itself."""
    set_budget(store, "research", "1000")
    request = workload_request(workload(max_seconds=3600), eks, prices)
    admission = AdmissionRequest("research", request.instance_type, 1, request.cap, region=eks.region)
    cap, lease = eks.guardrails.default_max_runtime, timedelta(minutes=30)
    with store.connections.connection() as connection, connection.transaction():
        inside = store.admit(admission, now=NOW, default_cap=cap, lease=lease)
        assert inside.reservation_id is not None
        raise psycopg.Rollback()  # the caller's transaction undone: its admit with it
    (runway,) = store.runways(now=NOW, default_cap=cap, tenants=["research"])
    assert runway.reserved_usd == 0
    alone = store.admit(admission, now=NOW, default_cap=cap, lease=lease)
    (runway,) = store.runways(now=NOW, default_cap=cap, tenants=["research"])
    assert (alone.granted, runway.reserved_usd) == (True, Decimal("5.672"))


def test_workers_sharing_one_ledger_connection_each_decide_alone(
    check: BudgetCheck, store: LedgerStore, eks: StackConfig, prices: PriceTable
) -> None:
    """The controller's worker threads outnumber its connections: each ledger call borrows one."""
    set_budget(store, "research", "1000")
    requests = [
        workload_request(workload(f"job-{n}", uid=f"uid-{n}", max_seconds=3600), eks, prices)
        for n in range(8)
    ]
    lender = CheckPool([check])
    with ThreadPoolExecutor(8) as pool:
        decisions = list(pool.map(lambda request: lender.decide(request, now=NOW, admission="a"), requests))
    assert [decision.state for decision in decisions] == ["Ready"] * 8
    assert len({decision.reservation for decision in decisions}) == 8
    (runway,) = store.runways(now=NOW, default_cap=timedelta(hours=1), tenants=["research"])
    assert runway.reserved_usd == 8 * Decimal("5.672")
    assert lender.free == [check]  # the one check back, lent to no one
