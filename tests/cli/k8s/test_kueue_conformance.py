"""The scenarios of scripts/kind_check.sh, run in CI: the controller (its loops, as deployed) against
the FAKE API server and the FAKE of Kueue v0.19.2's rules (tests/cli/k8s/kueue_fake.py, each rule
citing its upstream file), and a real ledger. What only a real cluster shows is in docs/kubernetes.md."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from lightkube import Client

from cli.k8s.admission import BudgetCheck
from cli.k8s.controller import Controller
from guardrails.pricing import PriceTable
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore
from stacks.config import StackConfig
from tests.cli.k8s.conftest import admission_check, cluster_queue, set_budget, wait_for
from tests.cli.k8s.fake_api_server import FakeApiServer
from tests.cli.k8s.kueue_fake import KueueFake, conditions_true, kueue_fake
from tests.cli.k8s.workloads import workload
from tests.lambdas.ledger.ledger_streams import T0, ms, step, who


@pytest.fixture
def kueue(fake: FakeApiServer) -> Iterator[KueueFake]:
    fake.put("admissionchecks", admission_check())
    fake.put("clusterqueues", cluster_queue("research", "parkbrake-budget"))
    fake.put("clusterqueues", cluster_queue("product", "parkbrake-budget"))
    with kueue_fake(fake, T0) as model:
        yield model


@pytest.fixture
def build(
    client: Client, eks: StackConfig, prices: PriceTable, ledger_url: str, kueue: KueueFake
) -> Iterator[Callable[[], Controller]]:
    """Controllers on the Kueue fake's clock, their loops not started, their ledger connections closed
    at the end."""
    built: list[Controller] = []

    def make() -> Controller:
        stores = [LedgerStore.connect(ledger_url) for _ in range(3)]
        checks = [BudgetCheck(s, default_cap=timedelta(minutes=90), region=eks.region) for s in stores]
        built.append(
            Controller(client, eks, prices, checks, clock=kueue.clock, max_backoff=0.2, watch_seconds=5)
        )
        return built[-1]

    yield make
    for controller in built:
        controller.stop()
        for check in [*controller.workers, controller.sweeper]:
            check.store.close()


@contextmanager
def running(controller: Controller, fake: FakeApiServer) -> Iterator[Controller]:
    stop = threading.Event()
    controller.start(stop)
    try:
        yield controller
    finally:
        stop.set()
        controller.stop()
        fake.drop_watches()


@pytest.fixture
def controller(build: Callable[[], Controller], fake: FakeApiServer) -> Iterator[Controller]:
    with running(build(), fake) as started:
        yield started


def submit(fake: FakeApiServer, name: str, *, owner: str | None = None, **shape: Any) -> None:
    """A Workload as Kueue's job integration creates it: no status yet, waiting in its queue."""
    document = workload(name, **shape)
    document["status"] = {}
    if owner:
        document["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner,
                                                    "uid": "job-uid", "controller": True}]  # fmt: skip
    fake.put("workloads", document)


def current(fake: FakeApiServer, name: str, namespace: str = "research") -> dict[str, Any]:
    return fake.get("workloads", namespace, name)


def own(fake: FakeApiServer, name: str) -> dict[str, Any] | None:
    entries = current(fake, name).get("status", {}).get("admissionChecks") or []
    return dict(entries[0]) if entries else None


def state(fake: FakeApiServer, name: str) -> str | None:
    return (own(fake, name) or {}).get("state")


def admitted(fake: FakeApiServer, name: str) -> bool:
    return conditions_true(current(fake, name), "Admitted")


def kinds(store: LedgerStore, name: str) -> list[str]:
    return [e.decision.kind for e in DecisionLedger.of(store).read(instance_id=f"workload/research/{name}")]


def test_within_budget_admitted_once_the_check_is_active(
    fake: FakeApiServer, kueue: KueueFake, build: Callable[[], Controller], store: LedgerStore
) -> None:
    set_budget(store, "research", "30")
    submit(fake, "small", max_seconds=3600)
    queue = wait_for(lambda: fake.get("clusterqueues", "", "research").get("status"))
    assert queue["conditions"][0]["reason"] == "AdmissionCheckInactive"  # no controller: Kueue admits nothing
    assert "admission" not in current(fake, "small")["status"]
    with running(build(), fake):
        assert wait_for(lambda: admitted(fake, "small"))
        assert state(fake, "small") == "Ready"
        assert fake.get("clusterqueues", "", "research")["status"]["conditions"][0]["status"] == "True"
    assert kinds(store, "small") == ["workload-ready"]


def test_held_past_budget_through_two_requeue_cycles_then_admitted(
    fake: FakeApiServer, kueue: KueueFake, controller: Controller, store: LedgerStore
) -> None:
    set_budget(store, "research", "400")
    # a p4d runs with a 10h cap: its worst case is committed, what is left does not cover 8h of 4 g5s
    store.append([step("run-1", "i-1", "running", ms(0), who("research", "large", "p4d.24xlarge", 600))],
                 source="meter", received_at=T0)  # fmt: skip
    submit(fake, "large", pods=4, max_seconds=8 * 3600)
    for cycle in (1, 2):
        assert wait_for(lambda c=cycle: (own(fake, "large") or {}).get("retryCount") == c)
        entry = own(fake, "large") or {}
        assert (entry["state"], entry["requeueAfterSeconds"]) == ("Pending", 5400)  # reset by the eviction
        assert "admission" not in current(fake, "large")["status"]  # its quota released while it waits
        kueue.advance(5401)  # requeueAt passes: Kueue reserves again, the controller decides again
    assert wait_for(lambda: (own(fake, "large") or {}).get("retryCount") == 3)  # a third Retry
    stopped = (kueue.now - T0).total_seconds() / 60  # the p4d stops: its committed worst case is freed
    p4d = who("research", "large", "p4d.24xlarge", 600)
    store.append([step("stop-1", "i-1", "stopped", ms(stopped), p4d)], source="meter", received_at=kueue.now)
    kueue.advance(5401)
    assert wait_for(lambda: admitted(fake, "large"))
    assert kinds(store, "large") == ["workload-retry"] * 3 + ["workload-ready"]
    assert current(fake, "large")["spec"].get("active", True) is True  # never deactivated


def test_a_preemption_racing_a_decision_reserves_for_the_admission_that_runs(
    fake: FakeApiServer, kueue: KueueFake, build: Callable[[], Controller], store: LedgerStore
) -> None:
    set_budget(store, "research", "1000")
    manual = build()  # its loops not started: one step at a time
    manual.sync()
    manual.check_reconciler.reconcile("parkbrake-budget")
    submit(fake, "train")
    wait_for(lambda: "admission" in current(fake, "train")["status"])
    manual.sync()  # the controller's copy: quota reserved, check Pending
    kueue.advance(1)  # the next quota reservation is a second later: a new admission
    kueue.preempt("research", "train")  # evicted while it is being decided
    manual.handle(manual.workers[0], ("research", "train"))  # decided on the fresh object, not the copy
    wait_for(lambda: "admission" in current(fake, "train")["status"])  # Kueue requeues it at once
    manual.sync()
    assert manual.handle(manual.workers[0], ("research", "train")) in {"Ready", "ready"}
    assert wait_for(lambda: admitted(fake, "train"))
    logged = kinds(store, "train")
    assert logged.count("workload-ready") == 2
    assert logged.count("workload-released") == 1
    (runway,) = store.runways(now=T0, default_cap=timedelta(hours=1), tenants=["research"])
    assert runway.reserved_usd == Decimal("5.672")  # one admission's reservation held, not two


def test_hold_and_drain_evicts_and_releases_and_leaves_the_inference_deployment(
    fake: FakeApiServer, kueue: KueueFake, controller: Controller, store: LedgerStore
) -> None:
    set_budget(store, "research", "1000")
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "inference", "namespace": "product"},
                  "spec": {"replicas": 1}}  # fmt: skip
    fake.put("deployments", deployment)
    submit(fake, "train")
    assert wait_for(lambda: admitted(fake, "train"))
    fake.put("clusterqueues", cluster_queue("research", "parkbrake-budget", stop="HoldAndDrain"))
    wait_for(lambda: "workload-released" in kinds(store, "train"))
    assert "admission" not in current(fake, "train")["status"]
    submit(fake, "while-held")
    kueue.advance(1)
    assert "admission" not in current(fake, "while-held")["status"]  # nothing new while held
    assert fake.get("deployments", "product", "inference")["spec"] == {"replicas": 1}
    fake.put("clusterqueues", cluster_queue("research", "parkbrake-budget"))
    assert wait_for(lambda: admitted(fake, "train") and admitted(fake, "while-held"))


def test_a_budget_stop_has_kueue_suspend_the_job(
    fake: FakeApiServer, kueue: KueueFake, build: Callable[[], Controller], store: LedgerStore
) -> None:
    set_budget(store, "research", "50", "deny", "stop")
    fake.put("jobs", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "research"},
                      "spec": {"suspend": True}})  # fmt: skip
    sweeping = build()
    sweeping.sweep_every = timedelta(seconds=0.2)
    with running(sweeping, fake):
        submit(fake, "train-wl", owner="train", pods=1, max_seconds=600)
        assert wait_for(lambda: fake.suspensions == [("train", False)])  # admitted: the Job runs
        store.append([step("run-1", "i-1", "running", ms(0), who("research", "large", "p4d.24xlarge", 600))],
                     source="meter", received_at=T0)  # fmt: skip
        kueue.advance(7200)  # two hours of a p4d: $65.55 of $50, and the stop action fires
        assert wait_for(lambda: fake.suspensions == [("train", False), ("train", True)])  # stopped: suspended
        # sent back, and its reservation given back when Kueue evicted it
        wait_for(lambda: {"workload-retry", "workload-released"} <= set(kinds(store, "train-wl")))
    assert kinds(store, "train-wl")[0] == "workload-ready"


def test_the_loops_survive_every_way_a_watch_or_a_write_can_fail(
    fake: FakeApiServer, kueue: KueueFake, controller: Controller, store: LedgerStore
) -> None:
    set_budget(store, "research", "1000")
    submit(fake, "first")
    assert wait_for(lambda: admitted(fake, "first"))
    for n, failure in enumerate((fake.cut_watches, fake.drop_watches, fake.compact)):
        failure()
        fake.fail("GET", "/workloads", 500)  # and the list after it fails once
        submit(fake, f"after-{n}")
        assert wait_for(lambda n=n: admitted(fake, f"after-{n}"))
    fake.fail("PATCH", "/workloads/flaky/status", 503, times=3)  # retried after its backoff
    submit(fake, "flaky")
    assert wait_for(lambda: admitted(fake, "flaky"))
    assert controller.workloads.failures >= 2
    assert controller.alive()


def test_a_resync_queues_every_pending_workload(
    fake: FakeApiServer, kueue: KueueFake, build: Callable[[], Controller]
) -> None:
    manual = build()
    manual.sync()
    manual.check_reconciler.reconcile("parkbrake-budget")
    submit(fake, "a")
    submit(fake, "b")
    wait_for(lambda: "admission" in current(fake, "b")["status"])
    manual.sync()
    while (key := manual.queue.get(timeout=0.01)) is not None:  # drain what the list queued
        manual.queue.done(key)
    assert manual.resync_pending() == 2
    assert len(manual.queue) == 2


def test_a_job_no_period_could_carry_is_rejected_and_deactivated_for_good(
    fake: FakeApiServer, kueue: KueueFake, controller: Controller, store: LedgerStore
) -> None:
    set_budget(store, "research", "30")
    submit(fake, "large", pods=4, max_seconds=8 * 3600)  # $45.38 > the whole $30
    assert wait_for(lambda: current(fake, "large")["spec"].get("active") is False)
    assert "admission" not in current(fake, "large")["status"]  # its quota released
    (rejected,) = DecisionLedger.of(store).read(instance_id="workload/research/large")
    assert "can never admit" in rejected.decision.reason
    kueue.advance(3600 * 24)
    assert "admission" not in current(fake, "large")["status"]  # never requeued
    assert kinds(store, "large") == ["workload-rejected"]
