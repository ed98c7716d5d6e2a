"""Least privilege, proven: the eks stack's rendered roles ENFORCED by the FAKE API server
(tests/cli/k8s/rbac.py, Kubernetes' RBAC rules), then every request ``park``/``unpark --now`` and the
budget controller make: none may be forbidden (a 403 on a real API server) and no grant may go unused."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from lightkube import Client

from cli.k8s.admission import BudgetCheck
from cli.k8s.api import NODE_CLAIMS, ApiError, KubernetesApi, workload_path
from cli.k8s.controller import Controller
from cli.k8s.park import park_now
from cli.k8s.window import apply_window
from cli.k8s.workload_reconciler import Undecided
from guardrails.pricing import PriceTable
from lambdas.ledger.store import LedgerStore
from stacks.config import NightlyConfig, StackConfig
from stacks.kubernetes_objects import kubernetes_objects
from tests.cli.k8s.conftest import admission_check, set_budget, wait_for
from tests.cli.k8s.fake_api_server import FakeApiServer, fake_api_server
from tests.cli.k8s.rbac import Authorizer, Grant, bound_grants, grants_of, request_attributes
from tests.cli.k8s.test_controller import claim, entry
from tests.cli.k8s.test_k8s_park import put_cluster
from tests.cli.k8s.workloads import workload

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
NAMESPACE = "parkbrake"  # Pulumi.eks.yaml's kubernetes.namespace


@pytest.fixture(scope="module")
def rendered(eks: StackConfig) -> list[dict[str, Any]]:
    return kubernetes_objects(eks)


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with fake_api_server() as server:
        put_cluster(server)
        yield server


def api_of(fake: FakeApiServer) -> KubernetesApi:
    return KubernetesApi(fake.url, token=fake.token_file.read_text(), ca_file=str(fake.ca_file))


def enforce(fake: FakeApiServer, rendered: list[dict[str, Any]], account: str) -> Authorizer:
    fake.rbac = Authorizer(bound_grants(rendered, account, NAMESPACE))
    return fake.rbac


def test_park_unpark_and_the_window_ask_for_exactly_what_the_brakes_roles_grant(
    fake: FakeApiServer, rendered: list[dict[str, Any]], eks: StackConfig, prices: PriceTable
) -> None:
    rbac = enforce(fake, rendered, "parkbrake-park")
    api = api_of(fake)

    results = [
        park_now(api, eks, parking=True, dry_run=True),
        park_now(api, eks, parking=True, dry_run=False),
        park_now(api, eks, parking=False, dry_run=False),
    ]
    # the nightly window's CronJob runs as the same account: open, then closed (its nodes deleted)
    with_nightly = dataclasses.replace(eks, nightly=NightlyConfig("training", "0 2 * * *", "UTC", 2))
    for now in ("2025-01-14T03:00:00+00:00", "2025-01-14T12:00:00+00:00"):
        results.append(apply_window(api, with_nightly, prices, datetime.fromisoformat(now), dry_run=False)[1])

    assert [result.errors for result in results] == [[]] * 5
    assert [str(request) for request in rbac.forbidden] == []  # no 403
    assert rbac.unused() == []  # no grant the brake does not use
    assert fake.get("nodepools", "", "research-training")["spec"]["limits"] == {"nvidia.com/gpu": "0"}


def test_the_running_controller_asks_for_exactly_what_its_role_grants(
    fake: FakeApiServer,
    *,
    rendered: list[dict[str, Any]],
    controller: Controller,
    client: Client,
    store: LedgerStore,
    eks: StackConfig,
    prices: PriceTable,
) -> None:
    """The controller's own code, its loops running, under its rendered role ENFORCED: its
    AdmissionCheck found and kept Active, its watches, a Workload decided, a 409 read again and decided
    again, a NodeClaim past its cap deleted, and a decision the ledger cannot make reported as an
    Event. Every request is allowed (no 403), and every grant is used by one of them."""
    rbac = enforce(fake, rendered, "parkbrake-budget-controller")
    set_budget(store, "research", "1000")
    fake.put("admissionchecks", admission_check())
    for name in ("train", "conflicted"):
        fake.put("workloads", workload(name))
    fake.put("nodeclaims", claim("research-training-0001", "research-training", "2036-05-05T01:29:00Z"))
    fake.fail("PATCH", "/workloads/conflicted/status", 409)  # the controller reads it again
    stop = threading.Event()
    controller.start(stop)
    try:
        wait_for(lambda: all(entry(fake, name)["state"] == "Ready" for name in ("train", "conflicted")))
        wait_for(lambda: fake.get("admissionchecks", "", "parkbrake-budget").get("status"))
        assert controller.nodeclaim_reconciler.reconcile(controller.sweeper) == ["research-training-0001"]
    finally:
        stop.set()
        fake.drop_watches()
    down = LedgerStore.connect("postgresql://parkbrake@127.0.0.1:1/ledger?connect_timeout=1")
    check = BudgetCheck(down, default_cap=timedelta(minutes=90), region=eks.region)
    reporting = Controller(client, eks, prices, [check, check], undecided_after=timedelta(0))
    fake.put("workloads", workload("undecided"))
    reporting.sync()
    with pytest.raises(Undecided):
        reporting.handle(check, ("research", "undecided"))
    assert [event["reason"] for event in fake.events] == ["BudgetCheckUndecided"]
    assert [str(request) for request in rbac.forbidden] == []  # no 403
    assert rbac.unused() == []  # no grant the controller does not use


def test_neither_account_may_do_the_others_work(fake: FakeApiServer, rendered: list[dict[str, Any]]) -> None:
    rbac = enforce(fake, rendered, "parkbrake-budget-controller")
    with pytest.raises(ApiError) as refused:
        api_of(fake).merge_patch(f"{KUEUE}/clusterqueues/research", {"spec": {"stopPolicy": "Hold"}})
    assert refused.value.status == 403
    assert [str(request) for request in rbac.forbidden] == ["patch kueue.x-k8s.io/clusterqueues"]

    rbac = enforce(fake, rendered, "parkbrake-park")
    with pytest.raises(ApiError) as refused:
        api_of(fake).merge_patch(workload_path("research", "job-a", status=True), {"status": {}})
    assert refused.value.status == 403
    # The brake's Deployments grant is its namespace's alone.
    with pytest.raises(ApiError) as refused:
        api_of(fake).merge_patch("/apis/apps/v1/namespaces/research/deployments/trainer", {"spec": {}})
    assert refused.value.status == 403


def test_a_forbidden_patch_fails_that_object_and_the_brake_goes_on(
    fake: FakeApiServer, rendered: list[dict[str, Any]], eks: StackConfig
) -> None:
    grants = [
        grant
        for grant in bound_grants(rendered, "parkbrake-park", NAMESPACE)
        if (grant.resource, grant.verb) != ("nodepools", "patch")
    ]
    fake.rbac = Authorizer(grants)

    result = park_now(api_of(fake), eks, parking=True, dry_run=False)

    failed = {item.name for item in result.objects if item.status == "failed"}
    assert failed == {"product-inference", "research-training"}
    assert all("403" in (item.error or "") for item in result.objects if item.status == "failed")
    assert fake.get("clusterqueues", "", "research")["spec"]["stopPolicy"] == "HoldAndDrain"
    assert fake.get("deployments", NAMESPACE, "inference")["spec"]["replicas"] == 0
    assert sorted(fake.deleted) == ["product-inference-a1b2c", "research-training-x7k2p"]


# The model itself, rule by rule (tests/cli/k8s/rbac.py names the upstream files).


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", f"{KUEUE}/workloads", "list kueue.x-k8s.io/workloads"),
        ("GET", f"{KUEUE}/workloads?watch=true", "watch kueue.x-k8s.io/workloads"),
        ("GET", f"{KUEUE}/namespaces/a/workloads/w", "get kueue.x-k8s.io/workloads in a"),
        ("PATCH", f"{KUEUE}/namespaces/a/workloads/w/status", "patch kueue.x-k8s.io/workloads/status in a"),
        ("PUT", f"{KUEUE}/clusterqueues/q", "update kueue.x-k8s.io/clusterqueues"),
        ("DELETE", f"{NODE_CLAIMS}", "deletecollection karpenter.sh/nodeclaims"),
        ("POST", "/api/v1/namespaces/a/events", "create core/events in a"),
        ("GET", "/api/v1/namespaces/a", "get core/namespaces"),
    ],
)
def test_request_attributes_follow_requestinfo(method: str, path: str, expected: str) -> None:
    assert str(request_attributes(method, path)) == expected


def role(*rules: dict[str, list[str]]) -> dict[str, Any]:
    return {"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": list(rules)}


def allowed(grants: list[Grant], method: str, path: str) -> bool:
    return Authorizer(grants).authorize(method, path)


def test_a_grant_on_a_resource_does_not_cover_its_subresource_and_update_is_not_patch() -> None:
    grants = grants_of(role({"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "clusterqueues"],
                             "verbs": ["get", "update"]}))  # fmt: skip
    assert allowed(grants, "GET", f"{KUEUE}/namespaces/a/workloads/w")
    assert not allowed(grants, "GET", f"{KUEUE}/namespaces/a/workloads/w/status")
    assert not allowed(grants, "PATCH", f"{KUEUE}/clusterqueues/q")  # the 403 issue 33 found
    assert not allowed(grants, "GET", "/apis/other.io/v1/namespaces/a/workloads/w")  # another group


def test_wildcards_names_and_a_bindings_namespace() -> None:
    star = grants_of(role({"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["*"]}))
    assert allowed(star, "PATCH", f"{KUEUE}/namespaces/a/workloads/w/status")
    assert not allowed(star, "PATCH", f"{KUEUE}/namespaces/a/workloads/w")
    named = grants_of(role({"apiGroups": ["karpenter.sh"], "resources": ["nodepools"], "verbs": ["patch"],
                            "resourceNames": ["mine"]}))  # fmt: skip
    assert allowed(named, "PATCH", "/apis/karpenter.sh/v1/nodepools/mine")
    assert not allowed(named, "PATCH", "/apis/karpenter.sh/v1/nodepools/theirs")
    local = grants_of(role({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}), "a")
    assert allowed(local, "GET", "/apis/apps/v1/namespaces/a/deployments")
    assert not allowed(local, "GET", "/apis/apps/v1/namespaces/b/deployments")
    assert not allowed(local, "GET", "/apis/apps/v1/deployments")  # across namespaces: cluster-wide only
