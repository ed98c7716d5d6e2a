"""``parkbrake k8s park --now`` against the FAKE API server: the stack's ClusterQueues HoldAndDrain, its
NodePools' GPU limits "0", its GPU Deployments at 0 replicas and its NodeClaims deleted, others' left
alone; --unpark restores each as it was, and leaves a value changed since parking (drift)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from tests.cli.k8s.conftest import REPOSITORY
from tests.cli.k8s.fake_api_server import FakeApiServer, fake_api_server


def queue(name: str, stop_policy: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": []}
    if stop_policy:
        spec["stopPolicy"] = stop_policy
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def claim(name: str, nodepool: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": nodepool}},
    }  # fmt: skip


def nodepool(name: str, gpu_limit: str | None) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {"template": {"spec": {}}, **({"limits": {"nvidia.com/gpu": gpu_limit}} if gpu_limit else {})},
    }  # fmt: skip


def deployment(name: str, namespace: str, replicas: int, *, gpus: int = 0) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {"requests": {"cpu": "1"}}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": name, "resources": resources}]}}},
    }  # fmt: skip


def put_cluster(server: FakeApiServer) -> None:
    """The eks stack's objects as a cluster holds them, beside another team's."""
    server.put("clusterqueues", queue("research"))
    server.put("clusterqueues", queue("product", "Hold"))
    server.put("clusterqueues", queue("another-team"))
    server.put("nodepools", nodepool("research-training", "16"))
    server.put("nodepools", nodepool("product-inference", None))  # no GPU limit at all
    server.put("nodepools", nodepool("system", "8"))
    server.put("deployments", deployment("inference", "parkbrake", 2, gpus=1))
    server.put("deployments", deployment("control-plane", "parkbrake", 2))
    server.put("deployments", deployment("trainer", "research", 3, gpus=4))  # another namespace's
    server.put("nodeclaims", claim("research-training-x7k2p", "research-training"))
    server.put("nodeclaims", claim("product-inference-a1b2c", "product-inference"))
    server.put("nodeclaims", claim("system-abcde", "system"))


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with fake_api_server() as server:
        put_cluster(server)
        yield server


def run(fake: FakeApiServer, *extra: str) -> tuple[int, Any]:
    result = CliRunner().invoke(
        parkbrake,
        ["k8s", "park", "--stack", "eks", "--project-dir", str(REPOSITORY), "--now", "--server", fake.url,
         "--token-file", str(fake.token_file), "--ca-file", str(fake.ca_file), "-o", "json", *extra],
    )  # fmt: skip
    return result.exit_code, json.loads(result.output) if result.exit_code in (0, 1) else result.output


def policy(fake: FakeApiServer, name: str) -> str | None:
    return fake.get("clusterqueues", "", name)["spec"].get("stopPolicy")


def gpu_limits(fake: FakeApiServer) -> dict[str, str | None]:
    return {
        name: (fake.get("nodepools", "", name)["spec"].get("limits") or {}).get("nvidia.com/gpu")
        for name in ("research-training", "product-inference", "system")
    }


def replicas(fake: FakeApiServer) -> dict[str, int]:
    return {
        name: fake.get("deployments", namespace, name)["spec"]["replicas"]
        for namespace, name in (
            ("parkbrake", "inference"),
            ("parkbrake", "control-plane"),
            ("research", "trainer"),
        )
    }


def annotations(fake: FakeApiServer, resource: str, namespace: str, name: str) -> dict[str, str]:
    return fake.get(resource, namespace, name)["metadata"].get("annotations") or {}


def test_park_now_holds_and_drains_and_deletes_the_stacks_nodeclaims(fake: FakeApiServer) -> None:
    code, dry = run(fake, "--dry-run")
    assert code == 0
    assert dry["nodeclaims_deleted"] == ["product-inference-a1b2c", "research-training-x7k2p"]
    assert policy(fake, "research") is None  # a dry run changes nothing
    code, parked = run(fake)
    assert code == 0
    assert parked["clusterqueues"] == [
        {"name": "product", "before": "Hold", "after": "HoldAndDrain"},
        {"name": "research", "before": "None", "after": "HoldAndDrain"},
    ]
    assert (policy(fake, "research"), policy(fake, "product"), policy(fake, "another-team")) == (
        "HoldAndDrain", "HoldAndDrain", None,
    )  # fmt: skip
    assert sorted(fake.deleted) == ["product-inference-a1b2c", "research-training-x7k2p"]
    run(fake)  # parking twice keeps what was before the first
    code, unparked = run(fake, "--unpark")
    assert code == 0
    assert (policy(fake, "research"), policy(fake, "product")) == ("None", "Hold")
    assert "parkbrake.dev/stop-policy-before-park" not in (
        fake.get("clusterqueues", "", "product")["metadata"].get("annotations") or {}
    )
    assert unparked["nodeclaims_deleted"] == []


def test_park_now_stops_gpu_launches_and_unpark_now_restores_exactly_what_it_found(
    fake: FakeApiServer,
) -> None:
    before = (gpu_limits(fake), replicas(fake))
    code, parked = run(fake)

    assert code == 0, parked
    # Karpenter launches nothing for the evicted pods: every NodePool of the stack's at "0".
    assert gpu_limits(fake) == {"research-training": "0", "product-inference": "0", "system": "8"}
    assert replicas(fake) == {"inference": 0, "control-plane": 2, "trainer": 3}
    assert parked["nodepools"] == [
        {"name": "product-inference", "before": "", "after": "0"},
        {"name": "research-training", "before": "16", "after": "0"},
    ]
    assert parked["deployments"] == [{"name": "inference", "before": "2", "after": "0"}]
    assert annotations(fake, "nodepools", "", "research-training") == {
        "parkbrake.dev/gpu-limit-before-park": "16"
    }
    code, _ = run(fake)  # parking twice keeps the record of the first
    assert code == 0
    assert annotations(fake, "deployments", "parkbrake", "inference") == {
        "parkbrake.dev/replicas-before-park": "2"
    }

    code, unparked = run(fake, "--unpark")

    assert code == 0, unparked
    assert (gpu_limits(fake), replicas(fake)) == before  # a limit that was absent is absent again
    assert annotations(fake, "nodepools", "", "product-inference") == {}
    assert annotations(fake, "deployments", "parkbrake", "inference") == {}


def test_unpark_now_leaves_a_value_changed_since_parking_and_exits_1(fake: FakeApiServer) -> None:
    run(fake)
    fake.put(
        "nodepools",
        {**fake.get("nodepools", "", "research-training"), "spec": {"limits": {"nvidia.com/gpu": "4"}}},
    )

    code, unparked = run(fake, "--unpark")

    assert code == 1
    assert gpu_limits(fake)["research-training"] == "4"  # a person's change is never overwritten
    assert unparked["errors"] == [
        "nodepool research-training: GPU limit is 4, not the parked 0: set it by hand"
    ]
    assert replicas(fake)["inference"] == 2  # the others are restored all the same
