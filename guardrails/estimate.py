"""Monthly cost of a stack, estimated from the resources its program declares.

Working from the declared resources (not from the config) means ``parkbrake plan`` and the policy
pack price exactly what Pulumi would create — an adopted VPC has no NAT gateway to pay for, a
parked pool has desired capacity 0, a disabled nightly schedule starts nothing.

Conventions (AWS's own for monthly estimates): 730 hours a month, on-demand prices from
``prices.json``; Aurora Serverless v2 is priced at its minimum ACUs plus the storage the stack plans
for (the cluster's ``parkbrake:storage-gb`` tag; I/O is usage and is left out); a nightly schedule
adds ``runs × extra hosts × cap``, where the runs are the cron's occurrences in 730 hours.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Protocol

from guardrails import tags
from guardrails.durations import DurationError, parse_duration
from guardrails.pricing import HOURS_PER_MONTH, PriceTable, load_price_table
from guardrails.schedules import eventbridge_cron_to_five_fields

# A fixed 730-hour window, so the same cron always gives the same number of runs.
_WINDOW_START = datetime(2026, 1, 1, tzinfo=UTC)
_WINDOW = timedelta(hours=int(HOURS_PER_MONTH))
_HOUR = Decimal(3600)


class ResourceLike(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def inputs(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class CostItem:
    name: str
    kind: str
    monthly_usd: Decimal
    worst_case_usd: Decimal
    # Worst case when every host lives no longer than its cap (scheduled pools only differ).
    worst_case_capped_usd: Decimal
    detail: str


@dataclass(frozen=True)
class CostEstimate:
    items: list[CostItem]

    @property
    def total_usd(self) -> Decimal:
        return sum((item.monthly_usd for item in self.items), Decimal(0))

    @property
    def worst_case_usd(self) -> Decimal:
        return sum((item.worst_case_usd for item in self.items), Decimal(0))

    @property
    def worst_case_capped_usd(self) -> Decimal:
        return sum((item.worst_case_capped_usd for item in self.items), Decimal(0))


def _tag_map(value: Any) -> dict[str, str]:
    """Tags as a mapping, whether Pulumi recorded a map or an ASG's list of {key, value}."""
    if isinstance(value, Mapping):
        return {str(key): str(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return {
            str(entry.get("key")): str(entry.get("value")) for entry in value if isinstance(entry, Mapping)
        }
    return {}


def _instance_tags(launch_template: ResourceLike) -> dict[str, str]:
    merged = _tag_map(launch_template.inputs.get("tags"))
    for spec in launch_template.inputs.get("tagSpecifications") or []:
        if isinstance(spec, Mapping) and spec.get("resourceType") == "instance":
            merged.update(_tag_map(spec.get("tags")))
    return merged


def runs_per_month(expression: str, timezone_name: str | None) -> int:
    from zoneinfo import ZoneInfo

    from croniter import croniter

    if not expression.startswith("cron("):
        return 0
    zone = ZoneInfo(timezone_name or "UTC")
    start = _WINDOW_START.astimezone(zone)
    runs = croniter(eventbridge_cron_to_five_fields(expression), start)
    count = 0
    while runs.get_next(datetime) < start + _WINDOW:
        count += 1
    return count


def _hourly(price_per_hour: Decimal, count: Decimal | int) -> Decimal:
    return price_per_hour * Decimal(count) * HOURS_PER_MONTH


def _money(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def _gpu_pool_items(resources: list[ResourceLike], prices: PriceTable) -> list[CostItem]:
    templates = {
        _instance_tags(resource).get(tags.POOL): resource
        for resource in resources
        if resource.type == "aws:ec2/launchTemplate:LaunchTemplate"
    }
    schedules = [resource for resource in resources if resource.type == "aws:scheduler/schedule:Schedule"]
    items = []
    for group in (resource for resource in resources if resource.type == "aws:autoscaling/group:Group"):
        pool = _tag_map(group.inputs.get("tags")).get(tags.POOL)
        template = templates.get(pool)
        if pool is None or template is None:
            continue
        instance_tags = _instance_tags(template)
        price = prices.instance(str(template.inputs.get("instanceType"))).usd_per_hour
        desired = int(group.inputs.get("desiredCapacity") or 0)
        maximum = int(group.inputs.get("maxSize") or 0)
        try:
            cap_hours = (
                Decimal(parse_duration(instance_tags.get(tags.MAX_RUNTIME, "")).total_seconds()) / _HOUR
            )
        except DurationError:
            cap_hours = HOURS_PER_MONTH  # no usable cap: a host may run all month
        nightly_runs, nightly_hosts = _nightly_start(schedules, pool)
        nightly_extra = max(0, nightly_hosts - desired)
        monthly = _hourly(price, desired) + price * nightly_runs * nightly_extra * cap_hours
        # A pool that only runs when the nightly schedule starts it lives at most runs × cap hours.
        capped_hours = (
            min(HOURS_PER_MONTH, nightly_runs * cap_hours)
            if nightly_runs and not desired
            else HOURS_PER_MONTH
        )
        detail = f"{desired} × {template.inputs.get('instanceType')} always on"
        if nightly_runs:
            detail += f" + {nightly_runs} nightly runs × {nightly_extra} × {cap_hours.normalize()}h cap"
        items.append(
            CostItem(
                name=pool,
                kind="gpu-pool",
                monthly_usd=_money(monthly),
                worst_case_usd=_money(_hourly(price, maximum)),
                worst_case_capped_usd=_money(price * maximum * capped_hours),
                detail=detail,
            )
        )
    return items


def _nightly_start(schedules: list[ResourceLike], pool: str) -> tuple[int, int]:
    """(runs a month, hosts each run starts) of the enabled schedule that starts ``pool``, or (0, 0)."""
    for schedule in schedules:
        target = schedule.inputs.get("target") or {}
        try:
            payload = json.loads(target.get("input") or "{}")
        except (TypeError, ValueError):
            continue
        if not isinstance(payload, dict) or payload.get("pool") != pool:
            continue
        if schedule.inputs.get("state", "ENABLED") != "ENABLED":
            return 0, 0
        expression = str(schedule.inputs.get("scheduleExpression", ""))
        return runs_per_month(expression, schedule.inputs.get("scheduleExpressionTimezone")), int(
            payload.get("capacity", 1)
        )
    return 0, 0


def _fargate_items(resources: list[ResourceLike], prices: PriceTable) -> list[CostItem]:
    task_definitions = {
        _tag_map(resource.inputs.get("tags")).get(tags.SERVICE): resource
        for resource in resources
        if resource.type == "aws:ecs/taskDefinition:TaskDefinition"
        and "FARGATE" in (resource.inputs.get("requiresCompatibilities") or [])
    }
    items = []
    for service in (resource for resource in resources if resource.type == "aws:ecs/service:Service"):
        task_definition = task_definitions.get(_tag_map(service.inputs.get("tags")).get(tags.SERVICE))
        if task_definition is None or service.inputs.get("capacityProviderStrategies"):
            continue  # tasks on a GPU pool are paid for by the pool
        vcpus = Decimal(str(task_definition.inputs.get("cpu", "0"))) / 1024
        memory_gb = Decimal(str(task_definition.inputs.get("memory", "0"))) / 1024
        per_task = vcpus * prices.service("fargate_vcpu_hour") + memory_gb * prices.service("fargate_gb_hour")
        desired = int(service.inputs.get("desiredCount") or 0)
        items.append(
            CostItem(
                name=service.name,
                kind="service",
                monthly_usd=_money(_hourly(per_task, desired)),
                worst_case_usd=_money(_hourly(per_task, desired)),
                worst_case_capped_usd=_money(_hourly(per_task, desired)),
                detail=f"{desired} Fargate task(s) × {vcpus.normalize()} vCPU, {memory_gb.normalize()} GB",
            )
        )
    return items


def _data_store_items(resources: list[ResourceLike], prices: PriceTable) -> list[CostItem]:
    items = []
    for resource in resources:
        if resource.type == "aws:rds/cluster:Cluster":
            scaling = resource.inputs.get("serverlessv2ScalingConfiguration") or {}
            acu_hour = prices.service("aurora_serverless_v2_acu_hour")
            low, high = (
                Decimal(str(scaling.get("minCapacity", 0))),
                Decimal(str(scaling.get("maxCapacity", 0))),
            )
            # Storage is billed per GB-month whatever the ACUs, parked and paused included.
            storage_gb = int(_tag_map(resource.inputs.get("tags")).get(tags.STORAGE_GB) or 0)
            storage = prices.service("aurora_storage_gb_month") * storage_gb
            items.append(
                CostItem(resource.name, "database", _money(_hourly(acu_hour, low) + storage),
                         _money(_hourly(acu_hour, high) + storage), _money(_hourly(acu_hour, high) + storage),
                         f"Aurora Serverless v2, {low.normalize()}–{high.normalize()} ACU, {storage_gb} GB storage")
            )  # fmt: skip
        elif resource.type == "aws:elasticache/replicationGroup:ReplicationGroup":
            node_type = str(resource.inputs.get("nodeType"))
            nodes = int(resource.inputs.get("numCacheClusters") or 1)
            monthly = _money(_hourly(prices.service("elasticache_node_hour", node_type), nodes))
            items.append(
                CostItem(resource.name, "cache", monthly, monthly, monthly, f"{nodes} × {node_type}")
            )
    return items


def _fixed_hourly_items(resources: list[ResourceLike], prices: PriceTable) -> list[CostItem]:
    fixed = {"aws:lb/loadBalancer:LoadBalancer": ("load-balancer", "alb_hour", "Application Load Balancer"),
             "aws:ec2/natGateway:NatGateway": ("network", "nat_gateway_hour", "NAT gateway")}  # fmt: skip
    items = []
    for resource in resources:
        if resource.type in fixed:
            kind, price_item, label = fixed[resource.type]
            monthly = _money(_hourly(prices.service(price_item), 1))
            items.append(CostItem(resource.name, kind, monthly, monthly, monthly, f"{label}, hours only"))
    return items


def estimate_monthly_cost(
    resources: Iterable[ResourceLike], prices: PriceTable | None = None
) -> CostEstimate:
    """Price every declared resource that has a running cost; raises PriceNotFound for an unknown type."""
    table = prices or load_price_table()
    declared = list(resources)
    return CostEstimate(
        items=[
            *_gpu_pool_items(declared, table),
            *_fargate_items(declared, table),
            *_data_store_items(declared, table),
            *_fixed_hourly_items(declared, table),
        ]
    )


@dataclass(frozen=True)
class CostChange:
    """One priced item's monthly figure before and after a change (zero where a state lacks it)."""

    name: str
    kind: str
    before: Decimal
    after: Decimal
    detail: str


def compare_estimates(before: CostEstimate, after: CostEstimate) -> list[CostChange]:
    old = {(item.kind, item.name): item for item in before.items}
    new = {(item.kind, item.name): item for item in after.items}
    return [
        CostChange(
            name=name,
            kind=kind,
            before=old[(kind, name)].monthly_usd if (kind, name) in old else Decimal(0),
            after=new[(kind, name)].monthly_usd if (kind, name) in new else Decimal(0),
            detail=(old.get((kind, name)) or new[(kind, name)]).detail,
        )
        for kind, name in dict.fromkeys([*old, *new])
    ]
