"""The monthly estimate, checked against figures computed by hand from a small price table."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrails import tags
from guardrails.estimate import CostEstimate, covered_hours, estimate_monthly_cost, runs_per_month
from guardrails.pricing import PriceNotFound, PriceTable, price_table_from_document
from guardrails.schedules import eventbridge_cron_to_five_fields


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    inputs: dict[str, Any] = field(default_factory=dict)


SERVICES = {
    "aurora_serverless_v2_acu_hour": "0.12",
    "aurora_storage_gb_month": "0.10",
    "elasticache_node_hour": {"cache.t4g.small": "0.032"},
    "elasticache_valkey_node_hour": {"cache.t4g.small": "0.0256"},
    "fargate_vcpu_hour": "0.04048",
    "fargate_gb_hour": "0.004445",
    "alb_hour": "0.0225",
    "nat_gateway_hour": "0.045",
    "public_ipv4_hour": "0.005",
    "ebs_gp3_gb_month": "0.073",
    "secret_month": "0.40",
    "cloudwatch_alarm_month": "0.10",
    "waf_web_acl_month": "5.00",
    "waf_rule_month": "1.00",
}
PRICES = price_table_from_document(
    {
        "currency": "USD",
        "source": "test",
        "accelerators": {
            "taken": "2026-11-30",
            "source": "test",
            "types": {
                name: {"count": 1, "kind": "gpu", "name": "A10G"} for name in ("g5.xlarge", "g5.12xlarge")
            },
        },
        "regions": {
            "us-east-1": {
                "taken": "2026-11-30",
                "source": "test",
                "on_demand": {"g5.xlarge": "1.006", "g5.12xlarge": "5.672"},
                "services": SERVICES,
            }
        },
        "spot": {
            "taken": "2026-11-29",
            "source": "test",
            "regions": {"us-east-1": {"g5.12xlarge": {"us-east-1a": "2.10", "us-east-1b": "2.41"}}},
        },
    }
)


def estimate(resources: list[Resource], prices: PriceTable = PRICES, **kwargs: Any) -> CostEstimate:
    return estimate_monthly_cost(resources, region="us-east-1", prices=prices, **kwargs)


def pool(
    name: str,
    instance_type: str,
    *,
    desired: int,
    maximum: int,
    cap: str,
    spot: bool = False,
    volume_gb: int | None = None,
) -> list[Resource]:
    placement: dict[str, Any] = (
        {"mixedInstancesPolicy": {"instancesDistribution": {"onDemandPercentageAboveBaseCapacity": 0}}}
        if spot
        else {}
    )
    volumes = (
        [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": volume_gb, "volumeType": "gp3"}}]
        if volume_gb
        else []
    )
    return [
        Resource(
            "aws:ec2/launchTemplate:LaunchTemplate",
            f"{name}-lt",
            {
                "instanceType": instance_type,
                "blockDeviceMappings": volumes,
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
                **placement,
            },
        ),
    ]


def nightly(
    pool_name: str, *, state: str = "ENABLED", capacity: int = 1, cron: str = "cron(0 1 * * ? *)"
) -> Resource:
    return Resource(
        "aws:scheduler/schedule:Schedule",
        f"{pool_name}-nightly",
        {
            "scheduleExpression": cron,
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


def with_nat_address(resources: list[Resource]) -> list[Resource]:
    return [*resources, Resource("aws:ec2/eip:Eip", "nat-eip", {"domain": "vpc"})]


def test_unparked_items_match_hand_computed_figures() -> None:
    result = estimate(with_nat_address(platform()))
    by_name = {item.name: item for item in result.items}
    # 30 nightly runs in the 730-hour window × 1 host × 4 h × $5.672
    assert by_name["training"].monthly_usd == Decimal("680.64")
    assert by_name["training"].worst_case_usd == Decimal("8281.12")  # 2 × 730 h × $5.672
    assert by_name["inference"].monthly_usd == Decimal("734.38")  # 1 × 730 h × $1.006
    assert by_name["inference"].worst_case_usd == Decimal("2203.14")  # 3 × 730 h × $1.006
    assert by_name["control-plane"].monthly_usd == Decimal("18.02")  # (0.5 × $0.04048 + 1 × $0.004445) × 730
    # 0.5 ACU × $0.12 × 730 + 20 GB stored × $0.10
    assert by_name["database"].monthly_usd == Decimal("45.80")
    assert by_name["database"].worst_case_usd == Decimal("352.40")
    assert by_name["cache"].monthly_usd == Decimal("23.36")  # $0.032 × 730
    assert by_name["alb"].monthly_usd == Decimal("16.43")  # $0.0225 × 730 = 16.425, rounded half up
    assert by_name["nat"].monthly_usd == Decimal("32.85")
    # the NAT gateway's Elastic IP and the public load balancer's two addresses × $0.005 × 730
    assert by_name["public-ipv4"].monthly_usd == Decimal("10.95")
    assert result.total_usd == Decimal("1562.43")


def test_parked_still_pays_for_what_bills_while_nothing_runs() -> None:
    result = estimate(with_nat_address(platform(parked=True)))
    costs = {item.name: item.monthly_usd for item in result.items}
    assert costs["training"] == costs["inference"] == costs["control-plane"] == 0
    assert costs["database"] == Decimal("2.00")  # paused: only the 20 GB stored
    assert result.total_usd == Decimal("2.00") + Decimal("23.36") + Decimal("16.43") + Decimal(
        "32.85"
    ) + Decimal("10.95")


def database_client(every: str, function_tags: dict[str, str] | None = None) -> list[Resource]:
    return [
        Resource(
            "aws:lambda/function:Function",
            "budget",
            {
                "name": "dev-budget",
                "environment": {"variables": {"PARKBRAKE_DATABASE_SECRET_ARN": "arn:secret"}},
                "tags": function_tags or {},
            },
        ),
        Resource(
            "aws:cloudwatch/eventRule:EventRule",
            "budget-clock",
            {"name": "dev-budget", "scheduleExpression": every},
        ),
        Resource(
            "aws:cloudwatch/eventTarget:EventTarget",
            "budget-from-clock",
            {"rule": "dev-budget", "arn": "arn:aws:lambda:us-east-1:123456789012:function:dev-budget"},
        ),
    ]


def paused_database(pause_after: int = 300) -> Resource:
    return Resource(
        "aws:rds/cluster:Cluster",
        "database",
        {
            "serverlessv2ScalingConfiguration": {
                "minCapacity": 0,
                "maxCapacity": 4,
                "secondsUntilAutoPause": pause_after,
            },
            "tags": {"parkbrake:storage-gb": "20"},
        },
    )


def test_a_database_client_on_a_short_clock_holds_an_auto_pausing_database_awake() -> None:
    (awake,) = estimate([paused_database(), *database_client("rate(1 minute)")]).items
    assert awake.monthly_usd == Decimal("45.80")  # 0.5 ACU × $0.12 × 730 + storage
    assert "held awake at 0.5 ACU by budget (every 1m)" in awake.detail
    (paused,) = estimate([paused_database(), *database_client("rate(1 hour)")]).items
    assert paused.monthly_usd == Decimal("2.00")
    assert "auto-paused" in paused.detail


def test_a_clock_that_reads_the_database_only_while_hosts_run_lets_a_parked_database_pause() -> None:
    client = database_client("rate(1 minute)", {tags.DATABASE_USE: tags.DATABASE_WHILE_HOSTS_RUN})
    (paused,) = estimate([paused_database(), *client]).items  # nothing declared starts a host
    assert paused.monthly_usd == Decimal("2.00")
    assert "auto-paused" in paused.detail

    def pool(desired: int) -> Resource:
        return Resource("aws:autoscaling/group:Group", "training", {"desiredCapacity": desired, "minSize": 0})

    nightly = Resource(
        "aws:scheduler/schedule:Schedule",
        "nightly",
        {"scheduleExpression": "cron(0 1 * * ? *)", "state": "ENABLED"},
    )
    for starts_hosts in ([pool(1)], [pool(0), nightly]):
        awake = next(item for item in estimate([paused_database(), *client, *starts_hosts]).items
                     if item.kind == "database")  # fmt: skip
        assert "held awake at 0.5 ACU by budget (every 1m)" in awake.detail
    disabled = Resource("aws:scheduler/schedule:Schedule", "nightly", nightly.inputs | {"state": "DISABLED"})
    asleep = next(item for item in estimate([paused_database(), *client, pool(0), disabled]).items
                  if item.kind == "database")  # fmt: skip
    assert asleep.monthly_usd == Decimal("2.00")


def test_two_serverless_instances_bill_twice_the_capacity() -> None:
    instances = [
        Resource("aws:rds/clusterInstance:ClusterInstance", name, {"instanceClass": "db.serverless"})
        for name in ("writer", "reader")
    ]
    (item,) = estimate([platform()[-4], *instances]).items
    assert item.monthly_usd == Decimal("89.60")  # 2 × 0.5 ACU × $0.12 × 730 + 20 GB × $0.10


def test_a_nightly_start_already_covered_by_desired_capacity_adds_nothing() -> None:
    resources = [
        *pool("training", "g5.xlarge", desired=2, maximum=2, cap="4h"),
        nightly("training", capacity=2),
    ]
    (item,) = estimate(resources).items
    assert item.monthly_usd == Decimal("1468.76")  # 2 × 730 × $1.006 and no extra hosts at night


def test_a_schedule_every_minute_is_bounded_by_the_hours_in_the_month() -> None:
    resources = [
        *pool("training", "g5.12xlarge", desired=0, maximum=2, cap="4h"),
        nightly("training", cron="cron(* * * * ? *)"),
    ]
    (item,) = estimate(resources).items
    assert item.monthly_usd == Decimal("4140.56")  # one host, 730 h × $5.672: runs overlap, never add up
    assert item.monthly_usd <= item.worst_case_usd


def test_a_cap_longer_than_the_gap_between_runs_counts_each_hour_once() -> None:
    resources = [*pool("training", "g5.xlarge", desired=0, maximum=1, cap="48h"), nightly("training")]
    (item,) = estimate(resources).items
    assert item.monthly_usd == Decimal("734.38")  # one host all month, not 30 × 48 h
    assert "up to 2d" in item.detail


def test_durations_print_in_their_own_units() -> None:
    resources = [*pool("training", "g5.xlarge", desired=0, maximum=1, cap="30d"), nightly("training")]
    (item,) = estimate(resources).items
    assert "up to 30d" in item.detail
    assert "E+" not in item.detail


def test_an_unparsable_cap_is_priced_as_a_host_that_runs_all_month() -> None:
    resources = [*pool("training", "g5.xlarge", desired=0, maximum=1, cap="90 minutes"), nightly("training")]
    (item,) = estimate(resources).items
    assert item.monthly_usd == Decimal("734.38")


def test_host_volumes_are_priced_for_the_hours_their_hosts_live() -> None:
    (item,) = estimate(pool("inference", "g5.xlarge", desired=1, maximum=2, cap="24h", volume_gb=100)).items
    assert item.monthly_usd == Decimal("741.68")  # 730 × $1.006 + 100 GB × $0.073
    assert item.worst_case_usd == Decimal("1483.36")


def test_a_spot_pool_is_priced_at_the_snapshot_with_on_demand_as_its_worst_case() -> None:
    (item,) = estimate(pool("training", "g5.12xlarge", desired=1, maximum=2, cap="4h", spot=True)).items
    assert item.monthly_usd == Decimal("1759.30")  # the dearest zone, $2.41 × 730
    assert item.worst_case_usd == Decimal("8281.12")  # 2 × 730 × $5.672 on demand
    assert "snapshot 2026-11-29" in item.detail
    (unknown,) = estimate(pool("inference", "g5.xlarge", desired=1, maximum=1, cap="4h", spot=True)).items
    assert unknown.monthly_usd == Decimal("734.38")
    assert "no price in the snapshot: priced on demand" in unknown.detail


def test_an_unpriced_instance_type_is_an_error_not_zero() -> None:
    with pytest.raises(PriceNotFound, match=r"g9\.mega"):
        estimate(pool("training", "g9.mega", desired=1, maximum=1, cap="1h"))


def test_an_unpriced_region_is_an_error_naming_the_region_and_the_refresh_command() -> None:
    with pytest.raises(PriceNotFound) as raised:
        estimate_monthly_cost(platform(), region="eu-central-1", prices=PRICES)
    assert "no prices for region eu-central-1" in str(raised.value)
    assert "parkbrake pricing refresh --region eu-central-1" in str(raised.value)
    assert raised.value.exit_code == 2


def test_items_come_in_the_same_order_whatever_order_resources_are_declared_in() -> None:
    forwards = estimate(with_nat_address(platform())).items
    backwards = estimate(list(reversed(with_nat_address(platform())))).items
    assert forwards == backwards


# At most a few runs an hour: every-minute schedules are covered above, and croniter walks each run.
CRON_MINUTES = st.sampled_from(["0", "30", "0/20", "15,45"])
CRON_HOURS = st.sampled_from(["*", "1", "*/2", "0-23/6", "9-17"])
CRON_DAYS = st.sampled_from(["? * * *", "? * 2-6 *", "1 * ? *", "? * 1 *"])


@settings(max_examples=30, deadline=None)
@given(
    minute=CRON_MINUTES,
    hour=CRON_HOURS,
    days=CRON_DAYS,
    cap_minutes=st.integers(min_value=1, max_value=60 * 24 * 40),
    desired=st.integers(min_value=0, max_value=4),
    headroom=st.integers(min_value=0, max_value=4),
    capacity=st.integers(min_value=0, max_value=10),
    spot=st.booleans(),
    volume_gb=st.sampled_from([None, 1, 500]),
)
def test_unparked_never_exceeds_the_worst_case(
    *,
    minute: str,
    hour: str,
    days: str,
    cap_minutes: int,
    desired: int,
    headroom: int,
    capacity: int,
    spot: bool,
    volume_gb: int | None,
) -> None:
    days_of_month, month, days_of_week, year = days.split()
    cron = f"cron({minute} {hour} {days_of_month} {month} {days_of_week} {year})"
    resources = [
        *pool("training", "g5.12xlarge", desired=desired, maximum=desired + headroom, cap=f"{cap_minutes}m",
              spot=spot, volume_gb=volume_gb),
        nightly("training", cron=cron, capacity=capacity),
    ]  # fmt: skip
    (item,) = estimate(resources).items
    assert item.monthly_usd <= item.worst_case_usd
    hourly_ceiling = Decimal("5.672") + Decimal(volume_gb or 0) * Decimal("0.073") / 730
    ceiling = hourly_ceiling * 730 * (desired + headroom)
    assert abs(item.worst_case_usd - ceiling) <= Decimal("0.01")


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


def test_a_schedule_that_does_not_fire_in_the_month_covers_no_hours() -> None:
    assert covered_hours([], timedelta(hours=4)) == 0
