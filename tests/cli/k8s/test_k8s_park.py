"""``parkbrake k8s park --now`` against the FAKE API server: the stack's ClusterQueues HoldAndDrain and
its NodeClaims deleted, others' left alone; --unpark restores each queue's stopPolicy as it was."""

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


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with fake_api_server() as server:
        server.put("clusterqueues", queue("research"))
        server.put("clusterqueues", queue("product", "Hold"))
        server.put("clusterqueues", queue("another-team"))
        server.put("nodeclaims", claim("research-training-x7k2p", "research-training"))
        server.put("nodeclaims", claim("product-inference-a1b2c", "product-inference"))
        server.put("nodeclaims", claim("system-abcde", "system"))
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


def test_park_needs_now_and_a_kubernetes_stack(fake: FakeApiServer) -> None:
    result = CliRunner().invoke(
        parkbrake, ["k8s", "park", "--stack", "eks", "--project-dir", str(REPOSITORY)]
    )
    assert result.exit_code == 2
    assert "--now" in result.output
    result = CliRunner().invoke(
        parkbrake,
        ["k8s", "park", "--stack", "dev", "--project-dir", str(REPOSITORY), "--now", "--server", fake.url],
    )
    assert result.exit_code == 2
    assert "parkbrake:kubernetes" in result.output
