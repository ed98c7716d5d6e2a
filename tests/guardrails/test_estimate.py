"""The monthly estimate, checked against figures computed by hand from prices.json."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from guardrails.estimate import estimate_monthly_cost, runs_per_month
from guardrails.pricing import PriceNotFound
from guardrails.schedules import eventbridge_cron_to_five_fields


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    inputs: dict[str, Any] = field(default_factory=dict)


def pool(name: str, instance_type: str, *, desired: int, maximum: int, cap: str) -> list[Resource]:
    return [
        Resource(
            "aws:ec2/launchTemplate:LaunchTemplate",
            f"{name}-lt",
            {
                "instanceType": instance_type,
                "tagSpecifications": [
                    {
                        "resourceType": "instance",
                        "tags": {"parkbrake:pool": name, "parkbrake:max-runtime": cap},
                    }
                ],
            },
        ),
        Resource(
            "aws:autoscaling/group:Group",
            f"{name}-asg",
            {
                "minSize": 0,
                "desiredCapacity": desired,
                "maxSize": maximum,
                "tags": [{"key": "parkbrake:pool", "value": name, "propagateAtLaunch": True}],
            },
        ),
    ]


def nightly(pool_name: str, *, state: str = "ENABLED", capacity: int = 1) -> Resource:
    return Resource(
        "aws:scheduler/schedule:Schedule",
        f"{pool_name}-nightly",
        {
            "scheduleExpression": "cron(0 1 * * ? *)",
            "scheduleExpressionTimezone": "Europe/Berlin",
            "state": state,
            "target": {"input": json.dumps({"pool": pool_name, "capacity": capacity})},
        },
    )


def platform(*, parked: bool = False) -> list[Resource]:
    return [
        *pool("training", "g5.12xlarge", desired=0, maximum=2, cap="4h"),
        nightly("training", state="DISABLED" if parked else "ENABLED"),
        *pool("inference", "g5.xlarge", desired=0 if parked else 1, maximum=3, cap="24h"),
        Resource(
            "aws:ecs/taskDefinition:TaskDefinition",
            "control-plane-task",
            {
                "cpu": "512",
                "memory": "1024",
                "requiresCompatibilities": ["FARGATE"],
                "tags": {"parkbrake:service": "control-plane"},
            },
        ),
        Resource(
            "aws:ecs/service:Service",
            "control-plane",
            {"desiredCount": 0 if parked else 1, "tags": {"parkbrake:service": "control-plane"}},
        ),
        Resource(
            "aws:rds/cluster:Cluster",
            "database",
            {
                "serverlessv2ScalingConfiguration": {"minCapacity": 0 if parked else 0.5, "maxCapacity": 4},
                "tags": {"parkbrake:storage-gb": "20"},
            },
        ),
        Resource(
            "aws:elasticache/replicationGroup:ReplicationGroup",
            "cache",
            {"nodeType": "cache.t4g.small", "numCacheClusters": 1},
        ),
        Resource("aws:lb/loadBalancer:LoadBalancer", "alb"),
        Resource("aws:ec2/natGateway:NatGateway", "nat"),
    ]


def test_unparked_items_match_hand_computed_figures() -> None:
    estimate = estimate_monthly_cost(platform())
    by_name = {item.name: item for item in estimate.items}
    # 30 nightly runs in the 730-hour window × 1 host × 4 h × $5.672
    assert by_name["training"].monthly_usd == Decimal("680.64")
    assert by_name["training"].worst_case_usd == Decimal("8281.12")  # 2 × 730 h × $5.672
    assert by_name["training"].worst_case_capped_usd == Decimal("1361.28")  # 2 × 120 h × $5.672
    assert by_name["inference"].monthly_usd == Decimal("734.38")  # 1 × 730 h × $1.006
    assert by_name["inference"].worst_case_usd == Decimal("2203.14")  # 3 × 730 h × $1.006
    assert by_name["control-plane"].monthly_usd == Decimal("18.02")  # (0.5 × $0.04048 + 1 × $0.004445) × 730
    assert by_name["database"].monthly_usd == Decimal("45.80")  # 0.5 ACU × $0.12 × 730 + 20 GB × $0.10
    assert by_name["database"].worst_case_usd == Decimal("352.40")
    assert by_name["cache"].monthly_usd == Decimal("23.36")  # $0.032 × 730
    assert by_name["alb"].monthly_usd == Decimal("16.43")  # $0.0225 × 730 = 16.425, rounded half up
    assert by_name["nat"].monthly_usd == Decimal("32.85")
    assert estimate.total_usd == Decimal("1551.48")


def test_parking_leaves_only_the_data_stores_and_plumbing() -> None:
    estimate = estimate_monthly_cost(platform(parked=True))
    costs = {item.name: item.monthly_usd for item in estimate.items}
    assert costs["training"] == costs["inference"] == costs["control-plane"] == 0
    assert costs["database"] == Decimal("2.00")  # paused at 0 ACU, still paying for its 20 GB
    assert estimate.total_usd == Decimal("2.00") + Decimal("23.36") + Decimal("16.43") + Decimal("32.85")


def test_a_nightly_start_already_covered_by_desired_capacity_adds_nothing() -> None:
    resources = [
        *pool("training", "g5.xlarge", desired=2, maximum=2, cap="4h"),
        nightly("training", capacity=2),
    ]
    (item,) = estimate_monthly_cost(resources).items
    assert item.monthly_usd == Decimal("1468.76")  # 2 × 730 × $1.006 and no extra hosts at night


def test_an_unparsable_cap_is_priced_as_a_host_that_runs_all_month() -> None:
    resources = [*pool("training", "g5.xlarge", desired=0, maximum=1, cap="90 minutes"), nightly("training")]
    (item,) = estimate_monthly_cost(resources).items
    assert item.worst_case_capped_usd == Decimal("734.38")


def test_an_unpriced_instance_type_is_an_error_not_zero() -> None:
    with pytest.raises(PriceNotFound, match=r"g9\.mega"):
        estimate_monthly_cost(pool("training", "g9.mega", desired=1, maximum=1, cap="1h"))


@pytest.mark.parametrize(
    ("eventbridge", "five_fields"),
    [
        ("cron(0 1 * * ? *)", "0 1 * * *"),
        ("cron(30 0 ? * 2-6 *)", "30 0 * * 1-5"),
        ("cron(0 3 ? * 1,7 *)", "0 3 * * 0,6"),
        ("cron(0 3 ? * MON-FRI *)", "0 3 * * MON-FRI"),
    ],
)
def test_eventbridge_cron_conversion(eventbridge: str, five_fields: str) -> None:
    assert eventbridge_cron_to_five_fields(eventbridge) == five_fields


def test_runs_per_month_counts_weeknights_only() -> None:
    assert runs_per_month("cron(30 0 ? * 2-6 *)", "America/Los_Angeles") == 22
    assert runs_per_month("rate(5 minutes)", None) == 0
