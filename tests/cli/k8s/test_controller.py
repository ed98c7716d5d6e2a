"""The controller against a FAKE API server (tests/cli/k8s/fake_api_server.py) and a real ledger: the
check's state written as Kueue's schema has it, the watch resumed after a dropped connection and
relisted after a 410, conflicts re-read, reservations released, a budget stop sending work back."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from cli.k8s.admission import BudgetCheck
from cli.k8s.api import WORKLOADS, ApiError, KubernetesApi
from cli.k8s.controller import Controller
from guardrails.pricing import PriceTable
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore
from stacks.config import StackConfig
from stacks.kubernetes_validation import validate_object
from tests.cli.k8s.conftest import set_budget
from tests.cli.k8s.fake_api_server import TOKEN, FakeApiServer, fake_api_server
from tests.cli.k8s.workloads import workload
from tests.lambdas.ledger.ledger_streams import T0, at, ms, step, who


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with fake_api_server() as server:
        yield server


@pytest.fixture
def api(fake: FakeApiServer) -> KubernetesApi:
    return KubernetesApi(fake.url, token=TOKEN, ca_file=str(fake.ca_file))


@pytest.fixture
def clock() -> list[datetime]:
    return [T0]


@pytest.fixture
def controller(
    api: KubernetesApi, eks: StackConfig, prices: PriceTable, ledger_url: str, clock: list[datetime]
) -> Iterator[Controller]:
    stores = [LedgerStore.connect(ledger_url) for _ in range(3)]
    checks = [BudgetCheck(s, default_cap=timedelta(minutes=90), region=eks.region) for s in stores]
    yield Controller(api, eks, prices, checks, clock=lambda: clock[0])
    for s in stores:
        s.close()


def wait_for(condition: Callable[[], Any], seconds: float = 30) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def entry(fake: FakeApiServer, name: str, namespace: str = "research") -> dict[str, Any]:
    (found,) = fake.get("workloads", namespace, name)["status"]["admissionChecks"]
    return dict(found)


def state_of(fake: FakeApiServer, name: str) -> Callable[[], str | None]:
    """The check's state once decided (None while Pending)."""

    def decided() -> str | None:
        state = str(entry(fake, name)["state"])
        return None if state == "Pending" else state

    return decided


def test_a_pending_workload_gets_a_schema_valid_ready_state(
    fake: FakeApiServer, controller: Controller, store: LedgerStore
) -> None:
    set_budget(store, "research", "1000")
    stored = fake.put("workloads", workload("train"))
    assert controller.handle(controller.workers[0], "ADDED", stored) == "Ready"
    written = entry(fake, "train")
    assert written["state"] == "Ready"
    assert written["lastTransitionTime"] == "2036-05-05T10:00:00Z"
    assert written["message"].startswith("budget admits 1 x g5.12xlarge (4 GPUs) for 1h, tenant research")
    document = fake.get("workloads", "research", "train")
    document["metadata"] = {"name": "train", "namespace": "research"}
    assert validate_object(document, "1.33").valid
    # Ready: seen again (its status event), nothing is decided twice
    assert (
        controller.handle(controller.workers[0], "MODIFIED", fake.get("workloads", "research", "train"))
        == "ready"
    )
    assert len(fake.patches) == 1


def test_a_stale_copy_is_reread_and_patched(
    fake: FakeApiServer, controller: Controller, store: LedgerStore
) -> None:
    set_budget(store, "research", "1000")
    stale = fake.put("workloads", workload("train"))
    fake.put("workloads", {**stale, "metadata": {**stale["metadata"], "labels": {"touched": "yes"}}})
    assert controller.handle(controller.workers[0], "ADDED", stale) == "Ready"
    assert entry(fake, "train")["state"] == "Ready"
    assert fake.get("workloads", "research", "train")["metadata"]["labels"] == {"touched": "yes"}


def test_the_watch_decides_releases_and_survives_drops_and_compaction(
    fake: FakeApiServer, controller: Controller, store: LedgerStore, clock: list[datetime]
) -> None:
    set_budget(store, "research", "60")
    fake.put("workloads", workload("before-start", pods=8))  # found by the first list
    stop = threading.Event()
    controller.start(stop, stop_every=timedelta(hours=1))
    try:
        assert wait_for(state_of(fake, "before-start")) == "Ready"
        fake.put("workloads", workload("too-long", pods=4, max_seconds=8 * 3600))
        assert wait_for(state_of(fake, "too-long")) == "Rejected"
        fake.drop_watches()  # the watch reconnects from its resourceVersion
        fake.put("workloads", workload("waits", pods=4))
        assert wait_for(state_of(fake, "waits")) == "Retry"
        assert entry(fake, "waits")["requeueAfterSeconds"] == 1800
        fake.compact()  # 410 Gone: listed again, nothing decided twice
        fake.put("workloads", workload("unknown-flavor", flavor="g4dn-xlarge"))
        assert wait_for(state_of(fake, "unknown-flavor")) == "Rejected"
        assert "unreadable Workload" in entry(fake, "unknown-flavor")["message"]
        # the first one finishes: its reservation is given back, and the waiting one fits
        finished = fake.get("workloads", "research", "before-start")
        finished["status"]["conditions"].append(
            {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done",
             "lastTransitionTime": "2036-05-05T10:30:00Z"}
        )  # fmt: skip
        fake.put("workloads", finished)
        released = lambda: [  # noqa: E731
            e
            for e in DecisionLedger.of(store).read(kinds=["workload-released"])
            if e.decision.details["released"]
        ]
        wait_for(released)
        waiting = fake.get("workloads", "research", "waits")
        waiting["status"]["admissionChecks"][0]["state"] = "Pending"  # Kueue requeued it after the Retry
        fake.put("workloads", waiting)
        assert wait_for(lambda: entry(fake, "waits")["state"] == "Ready")
    finally:
        stop.set()
        fake.drop_watches()
        controller.stop()
    names = [e.decision.instance_id for e in DecisionLedger.of(store).read(tenant="research")]
    assert names.count("workload/research/before-start") == 2  # ready, released — once each
    assert sum(1 for (_, path, _) in fake.patches if "/before-start/" in path) == 1


def test_a_budget_stop_sends_the_tenants_admitted_workloads_back(
    fake: FakeApiServer, controller: Controller, store: LedgerStore, clock: list[datetime]
) -> None:
    set_budget(store, "research", "50", "deny", "stop")
    fake.put(
        "workloads",
        workload("other", queue="product", namespace="product", flavor="g5-xlarge", gpus_per_pod=1),
    )
    for name in ("a", "b"):
        stored = fake.put("workloads", workload(name, pods=1, max_seconds=600))
        assert controller.handle(controller.workers[0], "ADDED", stored) == "Ready"
        controller.handle(controller.workers[0], "MODIFIED", fake.get("workloads", "research", name))
    other = fake.get("workloads", "product", "other")
    assert controller.handle(controller.workers[1], "ADDED", other) == "Ready"
    controller.handle(controller.workers[1], "MODIFIED", fake.get("workloads", "product", "other"))
    assert controller.enforce_stops() == []  # nothing spent yet
    # a p4d of the tenant's runs two hours: $65.55 spent of $50, and the stop action fires
    store.append([step("run-1", "i-1", "running", ms(0), who("research", "training", "p4d.24xlarge", 600))],
                 source="meter", received_at=T0)  # fmt: skip
    clock[0] = at(120)
    assert sorted(controller.enforce_stops()) == ["a", "b"]
    assert entry(fake, "a")["state"] == "Retry"
    assert entry(fake, "a")["requeueAfterSeconds"] == 3600
    assert "budget stop" in entry(fake, "b")["message"]
    assert entry(fake, "other", "product")["state"] == "Ready"  # another tenant's work is left alone
    kinds = [e.decision.kind for e in DecisionLedger.of(store).read(instance_id="workload/research/a")]
    assert kinds == ["workload-ready", "workload-retry"]


def test_an_unreachable_ledger_writes_retry(
    fake: FakeApiServer, api: KubernetesApi, eks: StackConfig, prices: PriceTable
) -> None:
    down = [
        LedgerStore.connect("postgresql://parkbrake@127.0.0.1:1/ledger?connect_timeout=1") for _ in range(2)
    ]
    checks = [BudgetCheck(s, default_cap=timedelta(minutes=90), region=eks.region) for s in down]
    controller = Controller(api, eks, prices, checks)
    stored = fake.put("workloads", workload("train"))
    assert controller.handle(checks[0], "ADDED", stored) == "Retry"
    assert entry(fake, "train")["requeueAfterSeconds"] == 60
    assert "fail closed" in entry(fake, "train")["message"]


def test_a_wrong_token_is_refused_by_name(fake: FakeApiServer) -> None:
    intruder = KubernetesApi(fake.url, token="not-the-token", ca_file=str(fake.ca_file))
    with pytest.raises(ApiError, match="401"):
        intruder.list(WORKLOADS)


def claim(name: str, nodepool: str, created: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {"karpenter.sh/nodepool": nodepool},
        "creationTimestamp": created,
    }
    if deleting:
        meta["deletionTimestamp"] = "2036-05-05T09:59:00Z"
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta,
            "status": {"providerID": f"aws:///us-east-1a/i-{name[-4:]}"}}  # fmt: skip


def test_a_node_past_its_cap_and_drain_is_reclaimed_by_deleting_its_nodeclaim(
    fake: FakeApiServer, controller: Controller, store: LedgerStore
) -> None:
    # research-training: cap 8h, drain 30m; now is 2036-05-05T10:00Z
    fake.put("nodeclaims", claim("research-training-0001", "research-training", "2036-05-05T01:29:00Z"))
    fake.put("nodeclaims", claim("research-training-0002", "research-training", "2036-05-05T01:31:00Z"))
    fake.put(
        "nodeclaims",
        claim("research-training-0003", "research-training", "2036-05-05T00:00:00Z", deleting=True),
    )
    fake.put("nodeclaims", claim("system-0004", "system", "2036-05-01T00:00:00Z"))
    assert controller.reclaim_nodes() == ["research-training-0001"]
    assert fake.deleted == ["research-training-0001"]
    (logged,) = DecisionLedger.of(store).read(instance_id="i-0001")
    assert (logged.decision.kind, logged.decision.tenant) == ("stop", "research")
    assert logged.decision.details["action"] == "delete-nodeclaim"
    assert "past its 8h cap and 30m of drain" in logged.decision.reason


def test_in_a_pod_the_service_accounts_token_and_ca_reach_the_api_server(
    fake: FakeApiServer, tmp_path: Any
) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "ca.crt").write_bytes(fake.ca_file.read_bytes())
    port = fake.url.rsplit(":", 1)[1]
    api = KubernetesApi.in_cluster(
        {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}, tmp_path
    )
    fake.put("workloads", workload("seen"))
    items, version = api.list(WORKLOADS)
    assert [item["metadata"]["name"] for item in items] == ["seen"]
    assert version == "1"


def test_outside_a_pod_without_a_server_is_one_line_naming_the_flags(tmp_path: Any) -> None:
    from guardrails.errors import InputError

    with pytest.raises(InputError, match="--server: not given and not in a pod"):
        KubernetesApi.in_cluster({}, tmp_path)


def test_an_evicted_workload_gives_its_reservation_back_and_is_decided_again_when_requeued(
    fake: FakeApiServer, controller: Controller, store: LedgerStore
) -> None:
    set_budget(store, "research", "1000")
    worker = controller.workers[0]
    assert controller.handle(worker, "ADDED", fake.put("workloads", workload("train"))) == "Ready"
    evicted = fake.get("workloads", "research", "train")
    evicted["status"]["conditions"].append(
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "preempted",
         "lastTransitionTime": "2036-05-05T10:10:00Z"}
    )  # fmt: skip
    assert controller.handle(worker, "MODIFIED", fake.put("workloads", evicted)).startswith(
        "evicted, released"
    )
    # Kueue reserves quota again and resets the check to Pending: decided anew, a new reservation
    requeued = fake.get("workloads", "research", "train")
    requeued["status"]["admissionChecks"][0]["state"] = "Pending"
    assert controller.handle(worker, "MODIFIED", fake.put("workloads", requeued)) == "Ready"
    (runway,) = store.runways(now=T0, default_cap=timedelta(hours=1), tenants=["research"])
    assert runway.reserved_usd == Decimal("5.672")  # the first reservation given back, one held
