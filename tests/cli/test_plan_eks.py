"""`parkbrake plan --stack eks` through the CLI: the Kubernetes stack's tree, verdicts and NodePool costs."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from guardrails.pricing import HOURS_PER_MONTH, load_price_table
from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def plan_json() -> dict[str, Any]:
    result = CliRunner().invoke(
        parkbrake, ["plan", "--stack", "eks", "--project-dir", str(REPO_ROOT), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.output)
    return document


def items(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in plan["cost"]["items"]}


def test_worst_case_of_each_node_pool_is_its_gpu_limit_times_the_price_all_month(
    plan_json: dict[str, Any],
) -> None:
    prices = load_price_table()
    costs = items(plan_json)

    for name, instance_type, nodes in (
        ("research-training", "g5.12xlarge", 4),  # 16 GPU ÷ 4 per node
        ("research-large", "p4d.24xlarge", 1),
        ("product-inference", "g5.xlarge", 3),
    ):
        price = prices.on_demand(instance_type, "us-east-1").usd_per_hour
        expected = (nodes * price * HOURS_PER_MONTH).quantize(Decimal("0.01"))
        assert costs[name]["kind"] == "gpu-pool"
        assert Decimal(str(costs[name]["worst_case"])) == expected, name
        assert costs[name]["parked"] == 0


def test_unparked_pays_only_for_the_nodes_always_on_pods_need(plan_json: dict[str, Any]) -> None:
    costs = items(plan_json)
    price = load_price_table().on_demand("g5.xlarge", "us-east-1").usd_per_hour

    # One inference replica × one GPU: one g5.xlarge all month; training pools wait for admitted jobs.
    assert Decimal(str(costs["product-inference"]["unparked"])) == (price * HOURS_PER_MONTH).quantize(
        Decimal("0.01")
    )
    assert costs["research-training"]["unparked"] == 0
    assert costs["database-cluster"]["kind"] == "database"
    assert costs["cache-replication-group"]["kind"] == "cache"


def test_the_kubernetes_rules_run_and_pass_with_the_aws_ones(plan_json: dict[str, Any]) -> None:
    verdicts = {verdict["policy"]: verdict["passed"] for verdict in plan_json["policies"]}

    assert verdicts["gpu-node-pools-expire"] is True
    assert verdicts["gpu-queues-gated-by-budget"] is True
    assert verdicts["gpu-deployments-have-a-revision"] is True
    assert all(verdicts.values()), verdicts
    types = {resource["type"] for resource in plan_json["resources"]}
    assert {
        "parkbrake:k8s:GpuNodePool",
        "parkbrake:k8s:TenantQueues",
        "kubernetes:karpenter.sh/v1:NodePool",
    } <= types


def test_text_plan_shows_the_node_pools_in_the_cost_table() -> None:
    result = CliRunner().invoke(
        parkbrake, ["plan", "--stack", "eks", "--project-dir", str(REPO_ROOT), "--tree"]
    )

    assert result.exit_code == 0, result.output
    assert "parkbrake:k8s:GpuNodePool research-training" in result.output
    assert "Karpenter NodePool" in result.output
