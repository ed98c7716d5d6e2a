"""Workloads decided together (``BudgetCheck.decide_together``, the batches ``CheckPool`` forms when
workers wait for a connection) against a real ledger: each answer is what deciding it alone gives,
one Workload's failure is its own, and concurrent workers grant exactly what each budget covers."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

import psycopg
import pytest

from cli.k8s.admission import Asked, BudgetCheck, CheckDecision, CheckPool
from cli.k8s.workload import WorkloadRequest, workload_request
from guardrails.pricing import PriceTable
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore
from stacks.config import StackConfig
from tests.cli.k8s.conftest import set_budget
from tests.cli.k8s.workloads import workload

NOW = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)
ONE_HOUR_G5 = "5.672"  # one g5.12xlarge host for its one-hour cap


def asked_of(base: WorkloadRequest, tenant: str, name: str) -> WorkloadRequest:
    return replace(base, tenant=tenant, namespace=tenant, name=name, uid=f"uid-{tenant}-{name}")


@pytest.fixture
def base(eks: StackConfig, prices: PriceTable) -> WorkloadRequest:
    return workload_request(workload(max_seconds=3600), eks, prices)


def answers(decided: list[CheckDecision | Exception]) -> list[tuple[str, str, bool]]:
    return [
        (d.state, d.request.name, d.reservation is not None)
        if isinstance(d, CheckDecision)
        else ("error", "", False)
        for d in decided
    ]


def test_a_batch_answers_each_workload_as_deciding_it_alone_would(
    check: BudgetCheck, store: LedgerStore, base: WorkloadRequest
) -> None:
    set_budget(store, "alpha", "10")  # one hour of g5 fits
    set_budget(store, "beta", "1")  # it does not: more than the whole limit, Rejected
    requests = [asked_of(base, "alpha", "a"), asked_of(base, "beta", "b"), asked_of(base, "gamma", "c")]
    together = check.decide_together([Asked(r, NOW, "7", "reserved 1") for r in requests])
    assert answers(together) == [("Ready", "a", True), ("Rejected", "b", False), ("Ready", "c", True)]
    # Decided again (a worker retrying after its write failed): the same admissions found, nothing new.
    again = check.decide_together([Asked(r, NOW, "7", "reserved 1") for r in requests])
    assert [getattr(d, "repeated", None) for d in again] == [True, False, True]
    assert [getattr(d, "reservation", None) for d in again] == [
        getattr(d, "reservation", None) for d in together
    ]
    runways = {r.tenant: r.reserved_usd for r in store.runways(now=NOW, default_cap=base.cap)}
    assert runways["alpha"] == runways["gamma"] == Decimal(ONE_HOUR_G5)
    # The repeat logged nothing new: a Ready by its admission, a Rejected by the same version.
    logged = DecisionLedger.of(store).read(kinds=["workload-ready", "workload-rejected"])
    assert Counter(entry.decision.kind for entry in logged) == {"workload-ready": 2, "workload-rejected": 1}


def test_one_workload_the_ledger_cannot_take_fails_alone_and_the_batch_is_decided(
    check: BudgetCheck, store: LedgerStore, base: WorkloadRequest
) -> None:
    """A name PostgreSQL cannot store (a NUL byte) fails the batch's transaction: each Workload is
    decided again alone, so only that one gets the error, raised in its own worker."""
    set_budget(store, "alpha", "100")
    bad = asked_of(base, "beta", "bad\x00name")
    requests = [asked_of(base, "alpha", "a"), bad, asked_of(base, "gamma", "c")]
    decided = check.decide_together([Asked(r, NOW, "1", "reserved 1") for r in requests])
    assert answers(decided)[0::2] == [("Ready", "a", True), ("Ready", "c", True)]
    assert isinstance(decided[1], psycopg.DataError)
    assert "NUL" in str(decided[1])
    (alpha,) = store.runways(now=NOW, default_cap=base.cap, tenants=["alpha"])
    assert alpha.reserved_usd == Decimal(ONE_HOUR_G5)  # once: the failed batch undone


def test_concurrent_workers_on_few_connections_grant_exactly_what_each_budget_covers(
    store: LedgerStore, ledger_url: str, eks: StackConfig, base: WorkloadRequest
) -> None:
    """Sixteen workers, two connections, six tenants whose budgets each cover two of their three
    Workloads: batches form while workers wait, and each tenant gets exactly two Ready."""
    tenants = [f"tenant-{n}" for n in range(6)]
    for tenant in tenants:
        set_budget(store, tenant, "11.35")  # two hours of g5 at $5.672, not three
    stores = [LedgerStore.connect(ledger_url) for _ in range(2)]
    try:
        pool = CheckPool(
            [
                BudgetCheck(s, default_cap=eks.guardrails.default_max_runtime, region=eks.region)
                for s in stores
            ]
        )
        requests = [asked_of(base, tenant, f"job-{n}") for tenant in tenants for n in range(3)]
        with ThreadPoolExecutor(16) as workers:
            decided = list(workers.map(lambda r: pool.decide(r, now=NOW, admission="reserved 1"), requests))
        assert len(pool.free) == 2  # every connection back
    finally:
        for s in stores:
            s.close()
    ready = Counter(d.request.tenant for d in decided if d.state == "Ready")
    assert ready == dict.fromkeys(tenants, 2)
    assert Counter(d.state for d in decided) == {"Ready": 12, "Retry": 6}
    for runway in store.runways(now=NOW, default_cap=base.cap, tenants=tenants):
        assert runway.reserved_usd == 2 * Decimal(ONE_HOUR_G5)
