"""The controller's reconcilers against a FAKE API server (tests/cli/k8s/fake_api_server.py) and a real
ledger: one Workload reconciled at a time (``Controller.handle``) so each contract point is shown on
its own. The loops (watch, resync, backoff) and Kueue's answers are in test_kueue_conformance.py."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client

from cli.k8s.admission import BudgetCheck
from cli.k8s.controller import Controller
from cli.k8s.kube import client_from_options
from cli.k8s.metrics import serve_health
from cli.k8s.workload_reconciler import Undecided, entry_for
from guardrails.errors import InputError
from guardrails.pricing import PriceTable
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore
from stacks.config import StackConfig
from stacks.kubernetes_validation import validate_object
from tests.cli.k8s.conftest import admission_check, set_budget
from tests.cli.k8s.fake_api_server import FakeApiServer
from tests.cli.k8s.workloads import workload
from tests.lambdas.ledger.ledger_streams import T0, at, ms, step, who

KEY = ("research", "train")


def entry(
    fake: FakeApiServer, name: str, namespace: str = "research", check: str = "parkbrake-budget"
) -> dict[str, Any]:
    entries = fake.get("workloads", namespace, name)["status"]["admissionChecks"]
    return dict(next(e for e in entries if e["name"] == check))


def ready(controller: Controller, fake: FakeApiServer, *documents: dict[str, Any]) -> None:
    fake.put("admissionchecks", admission_check())
    for document in documents:
        fake.put("workloads", document)
    controller.sync()


def reserved_usd(store: LedgerStore, tenant: str = "research") -> Decimal:
    (runway,) = store.runways(now=T0, default_cap=timedelta(hours=1), tenants=[tenant])
    return runway.reserved_usd


def test_the_controllers_checks_are_found_by_controller_name_and_kept_active(
    fake: FakeApiServer, controller: Controller
) -> None:
    fake.put("admissionchecks", admission_check("any-name-at-all"))
    fake.put("admissionchecks", admission_check("provisioning", "kueue.x-k8s.io/provisioning-request"))
    controller.sync()
    assert controller.check_reconciler.checks() == {"any-name-at-all"}
    assert controller.check_reconciler.reconcile("any-name-at-all") == "activated"
    assert controller.check_reconciler.reconcile("provisioning") == "not ours"
    (active,) = fake.get("admissionchecks", "", "any-name-at-all")["status"]["conditions"]
    assert (active["type"], active["status"], active["reason"]) == ("Active", "True", "ControllerRunning")
    assert active["lastTransitionTime"] == "2036-05-05T10:00:00Z"
    assert "status" not in fake.get("admissionchecks", "", "provisioning")
    controller.sync()
    assert controller.check_reconciler.reconcile("any-name-at-all") == "active"  # nothing written again
    assert sum(1 for _, path, _ in fake.patches if "any-name-at-all" in path) == 1


def test_only_its_own_entry_is_written_keeping_kueues_fields_and_other_checks(
    fake: FakeApiServer, controller: Controller, store: LedgerStore
) -> None:
    set_budget(store, "research", "1000")
    document = workload("train")
    document["status"]["admissionChecks"][0].update(
        retryCount=2, podSetUpdates=[{"name": "main", "labels": {"zone": "a"}}]
    )
    document["status"]["admissionChecks"].append({"name": "other-check", "state": "Pending", "message": "",
                                                  "lastTransitionTime": "2026-12-02T05:00:00Z"})  # fmt: skip
    ready(controller, fake, document)
    assert controller.handle(controller.workers[0], KEY) == "Ready"
    written = entry(fake, "train")
    assert (written["state"], written["retryCount"]) == ("Ready", 2)
    assert written["podSetUpdates"] == [{"name": "main", "labels": {"zone": "a"}}]
    assert written["lastTransitionTime"] == "2036-05-05T10:00:00Z"
    assert written["message"].startswith("budget admits 1 x g5.12xlarge (4 GPUs) for 1h, tenant research")
    assert entry(fake, "train", check="other-check")["state"] == "Pending"
    (_, path, body) = fake.patches[-1]
    assert path.endswith("/workloads/train/status?force=true&fieldManager=parkbrake-budget")
    assert body["status"]["admissionChecks"][0]["name"] == "parkbrake-budget"
    stored = fake.get("workloads", "research", "train")
    stored["metadata"] = {"name": "train", "namespace": "research"}
    assert validate_object(stored, "1.33").valid
    controller.sync()
    assert controller.handle(controller.workers[0], KEY) == "ready"  # its own write seen: nothing again
    assert len(fake.patches) == 1


def test_last_transition_time_moves_only_when_the_state_does() -> None:
    current = {"name": "c", "state": "Retry", "lastTransitionTime": "2036-05-05T09:00:00Z"}
    assert entry_for(current, "Retry", "again", at(10), timedelta(minutes=5))["lastTransitionTime"] == (
        "2036-05-05T09:00:00Z"
    )
    assert entry_for(current, "Ready", "now", at(10), None)["lastTransitionTime"] == "2036-05-05T10:10:00Z"
    assert "requeueAfterSeconds" not in entry_for(current, "Ready", "now", at(10), None)


def test_a_conflict_decides_again_on_the_fresh_object_and_never_writes_ready_onto_an_eviction(
    fake: FakeApiServer, controller: Controller, store: LedgerStore
) -> None:
    set_budget(store, "research", "1000")
    ready(controller, fake, workload("train"))  # the cache holds it Pending with quota
    evicted = fake.get("workloads", "research", "train")
    evicted["status"]["conditions"] = [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "evicted",
         "lastTransitionTime": "2036-05-05T10:00:00Z"}
    ]  # fmt: skip
    del evicted["status"]["admission"]
    fake.put("workloads", evicted)  # Kueue evicts it before the decision is written
    outcome = controller.handle(controller.workers[0], KEY)
    assert outcome.startswith("evicted, released")
    assert entry(fake, "train")["state"] == "Pending"
    assert reserved_usd(store) == 0
    kinds = [e.decision.kind for e in DecisionLedger.of(store).read(instance_id="workload/research/train")]
    assert kinds == ["workload-ready", "workload-released"]


def test_each_admission_has_its_own_reservation_and_release(
    fake: FakeApiServer, controller: Controller, store: LedgerStore
) -> None:
    set_budget(store, "research", "1000")
    ready(controller, fake, workload("train"))
    worker = controller.workers[0]
    assert controller.handle(worker, KEY) == "Ready"
    for minute, condition in ((10, "False"), (20, "True")):  # evicted, then its quota reserved again
        again = fake.get("workloads", "research", "train")
        again["status"]["conditions"][0].update(
            status=condition, lastTransitionTime=f"2036-05-05T10:{minute}:00Z"
        )
        again["status"]["admissionChecks"][0].update(state="Pending")
        if condition == "False":
            del again["status"]["admission"]
        else:
            again["status"]["admission"] = workload("train")["status"]["admission"]
        fake.put("workloads", again)
        controller.sync()
        outcome = controller.handle(worker, KEY)
        assert outcome.startswith("evicted, released") if condition == "False" else outcome == "Ready"
    logged = DecisionLedger.of(store).read(instance_id="workload/research/train")
    assert [e.decision.kind for e in logged] == ["workload-ready", "workload-released", "workload-ready"]
    first, second = logged[0].decision.details["reservation"], logged[2].decision.details["reservation"]
    assert first != second
    assert logged[1].decision.details["reservation"] == first
    assert reserved_usd(store) == Decimal("5.672")  # the first given back, the second held
    done = fake.get("workloads", "research", "train")
    done["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Succeeded",
                                         "message": "", "lastTransitionTime": "2036-05-05T11:00:00Z"})  # fmt: skip
    fake.put("workloads", done)
    controller.sync()
    assert controller.handle(worker, KEY) == f"finished, released {second}"
    assert reserved_usd(store) == 0


def test_a_budget_short_now_is_retry_until_the_period_ends_and_rejected_only_past_the_limit(
    fake: FakeApiServer, controller: Controller, store: LedgerStore
) -> None:
    set_budget(store, "research", "30")
    ready(
        controller, fake,
        workload("fits", max_seconds=3600),  # $5.67
        workload("later", pods=4, max_seconds=3600 * 2),  # $45.38 when $24.33 is left... and the limit is $30
        workload("waits", pods=3, max_seconds=3600),  # $17.02 of $24.33: fits; then the next does not
        workload("short", pods=2, max_seconds=3600),  # $11.34 of $7.31 left
    )  # fmt: skip
    worker = controller.workers[0]
    assert controller.handle(worker, ("research", "fits")) == "Ready"
    assert controller.handle(worker, ("research", "later")) == "Rejected"
    assert "can never admit" in entry(fake, "later")["message"]
    assert "more than tenant research's whole month limit of $30.00" in entry(fake, "later")["message"]
    assert controller.handle(worker, ("research", "waits")) == "Ready"
    assert controller.handle(worker, ("research", "short")) == "Retry"
    short = entry(fake, "short")
    # held by admitted work (reservations of hosts not yet running) → after the 30m lease
    assert short["requeueAfterSeconds"] == 1800
    assert "retrying after 30m" in short["message"]


def test_a_spent_budget_retries_when_its_period_renews(
    fake: FakeApiServer, controller: Controller, store: LedgerStore, clock: list[datetime]
) -> None:
    set_budget(store, "research", "60")
    store.append([step("run-1", "i-1", "running", ms(0), who("research", "training", "p4d.24xlarge", 600))],
                 source="meter", received_at=T0)  # fmt: skip
    store.append([step("run-1", "i-1", "stopped", ms(100))], source="meter", received_at=at(100))
    clock[0] = at(120)
    ready(controller, fake, workload("train"))
    assert controller.handle(controller.workers[0], KEY) == "Retry"
    # 2036-05-05T12:00Z → the month renews 2036-06-01T00:00Z: 26 days 12 hours
    assert entry(fake, "train")["requeueAfterSeconds"] == (26 * 24 + 12) * 3600
    assert "budget renews" in entry(fake, "train")["message"]


def test_the_tenants_gpu_quota_is_a_total_across_gpu_types(
    fake: FakeApiServer, controller: Controller, store: LedgerStore
) -> None:
    set_budget(store, "research", "100000")
    documents = [workload(f"g5-{n}", pods=1) for n in range(4)]  # 4 x 4 GPUs of g5.12xlarge
    documents.append(workload("p4d", flavor="research-large", gpus_per_pod=8))  # 8 more: 24, the quota
    documents.append(workload("over", pods=1))
    ready(controller, fake, *documents)
    worker = controller.workers[0]
    outcomes = [controller.handle(worker, ("research", d["metadata"]["name"])) for d in documents]
    assert outcomes == ["Ready"] * 5 + ["Retry"]
    assert (
        "gpu_quota is 24 GPUs across all GPU types: 24 are admitted, this Workload asks 4"
        in (entry(fake, "over")["message"])
    )


def test_an_unreadable_workload_is_rejected_naming_the_field(
    fake: FakeApiServer, controller: Controller
) -> None:
    ready(controller, fake, workload("train", flavor="g4dn-xlarge"))
    assert controller.handle(controller.workers[0], KEY) == "Rejected"
    assert entry(fake, "train")["message"].startswith(
        "unreadable Workload: status.admission.podSetAssignments[].flavors['nvidia.com/gpu']: flavor 'g4dn-xlarge'"
    )


def test_an_unreachable_ledger_decides_nothing_and_is_reported_past_the_time_given(
    fake: FakeApiServer, client: Client, eks: StackConfig, prices: PriceTable, clock: list[datetime]
) -> None:
    down = [
        LedgerStore.connect("postgresql://parkbrake@127.0.0.1:1/ledger?connect_timeout=1") for _ in range(2)
    ]
    checks = [BudgetCheck(s, default_cap=timedelta(minutes=90), region=eks.region) for s in down]
    controller = Controller(
        client, eks, prices, checks, clock=lambda: clock[0], undecided_after=timedelta(minutes=5)
    )
    ready(controller, fake, workload("train"))
    with pytest.raises(Undecided, match="ledger unreachable"):
        controller.handle(checks[0], KEY)
    assert entry(fake, "train")["state"] == "Pending"
    assert (fake.patches, fake.events) == ([], [])
    clock[0] = at(6)
    with pytest.raises(Undecided):
        controller.handle(checks[0], KEY)
    (event,) = fake.events
    assert (event["reason"], event["type"], event["involvedObject"]["name"]) == (
        "BudgetCheckUndecided",
        "Warning",
        "train",
    )
    assert "undecided for 0:06:00" in event["message"]
    assert controller.metrics.undecided._value.get() == 1
    with pytest.raises(Undecided):
        controller.handle(checks[0], KEY)
    assert len(fake.events) == 1  # reported once


def test_one_workloads_failed_write_never_stops_the_others_budget_stop(
    fake: FakeApiServer, controller: Controller, store: LedgerStore, clock: list[datetime]
) -> None:
    set_budget(store, "research", "50", "deny", "stop")
    ready(controller, fake, *(workload(name, pods=1, max_seconds=600) for name in ("a", "b", "c")))
    for name in ("a", "b", "c"):
        assert controller.handle(controller.workers[0], ("research", name)) == "Ready"
    controller.sync()
    assert controller.stop_reconciler.reconcile(controller.sweeper) == []  # nothing spent yet
    store.append([step("run-1", "i-1", "running", ms(0), who("research", "training", "p4d.24xlarge", 600))],
                 source="meter", received_at=T0)  # fmt: skip
    clock[0] = at(120)
    fake.fail("PATCH", "/workloads/a/status", 422)
    assert sorted(controller.stop_reconciler.reconcile(controller.sweeper)) == ["b", "c"]
    assert entry(fake, "a")["state"] == "Ready"
    assert (entry(fake, "b")["state"], entry(fake, "b")["requeueAfterSeconds"]) == ("Retry", 3600)
    controller.sync()
    assert controller.stop_reconciler.reconcile(controller.sweeper) == ["a"]  # the next sweep
    kinds = [e.decision.kind for e in DecisionLedger.of(store).read(instance_id="workload/research/a")]
    assert kinds == ["workload-ready", "workload-retry"]


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
    assert controller.nodeclaim_reconciler.reconcile(controller.sweeper) == ["research-training-0001"]
    assert fake.deleted == ["research-training-0001"]
    (logged,) = DecisionLedger.of(store).read(instance_id="i-0001")
    assert (logged.decision.kind, logged.decision.tenant) == ("stop", "research")
    assert "past its 8h cap and 30m of drain" in logged.decision.reason


def test_outside_a_pod_without_a_server_is_one_line_naming_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(InputError, match="--server: not given and not in a pod"):
        client_from_options(None, None, None)
    with pytest.raises(InputError, match="--server: 'ftp://x' is not an https:// URL"):
        client_from_options("ftp://x", None, None)


def test_a_wrong_token_is_refused(fake: FakeApiServer, tmp_path: Path) -> None:
    from lightkube import ApiError

    from cli.k8s.kube import Workload

    (tmp_path / "token").write_text("not-the-token")
    intruder = client_from_options(fake.url, tmp_path / "token", fake.ca_file)
    with pytest.raises(ApiError) as raised:
        list(intruder.list(Workload, namespace="*"))
    assert raised.value.status.code == 401


def test_healthz_fails_once_a_loop_has_died(controller: Controller, fake: FakeApiServer) -> None:
    server = serve_health(0, controller.alive, controller.metrics, host="127.0.0.1")
    url = f"http://127.0.0.1:{server.server_address[1]}"
    stop = threading.Event()
    controller.start(stop)
    try:
        with urllib.request.urlopen(f"{url}/healthz") as answer:
            assert answer.status == 200
        with urllib.request.urlopen(f"{url}/metrics") as answer:
            assert b"parkbrake_k8s_check_undecided_workloads 0.0" in answer.read()
        controller.stop()  # the workers end: the process is up, its loops are not
        for thread in controller.threads:
            if thread.name.startswith("worker"):
                thread.join(timeout=5)
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(f"{url}/healthz")
        assert raised.value.code == 503
    finally:
        stop.set()
        fake.drop_watches()
        server.shutdown()
