"""Monthly cost of a stack, estimated from the resources its program declares.

Working from the declared resources (not from the config) means ``parkbrake plan`` and the policy
pack price exactly what Pulumi would create — an adopted VPC has no NAT gateway to pay for, a
parked pool has desired capacity 0, a disabled nightly schedule starts nothing.

Conventions (AWS's own for monthly estimates): 730 hours a month; prices of the stack's region from
``prices.json``. Every line is bounded by the hours in the month × the capacity it can reach, so a
line's expected figure never exceeds its worst case:
- a GPU pool runs its desired hosts all month; a nightly schedule adds up to ``capacity − desired``
  hosts (never more than the group's maximum) for the hours its runs cover — each run lasts at most the
  hosts' cap and ends early when the next run starts, so overlapping runs are not counted twice. A
  spot pool is priced at the snapshot's highest zone price, its worst case on demand;
- Aurora Serverless v2 bills ACUs per instance: the expected figure is the minimum capacity, or
  nothing when the cluster auto-pauses and no database client runs more often than the pause delay;
- what bills while parked is priced too: load balancers and NAT gateways by the hour, public IPv4
  addresses, database storage (the size on the cluster's ``parkbrake:storage-gb`` tag), secrets,
  alarms, web ACLs.
Usage-billed items (data processed, requests, Lambda invocations, log ingestion) are not priced.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Protocol

from guardrails import tags
from guardrails.durations import DurationError, format_duration, parse_duration
from guardrails.plurals import counted
from guardrails.pricing import HOURS_PER_MONTH, PriceTable, load_price_table
from guardrails.schedules import eventbridge_cron_to_five_fields
from guardrails.settings_table import DATABASE_SECRET_ARN, DATABASE_URL

# A fixed 730-hour window, so the same cron always gives the same number of runs.
_WINDOW_START = datetime(2026, 1, 1, tzinfo=UTC)
_WINDOW = timedelta(hours=int(HOURS_PER_MONTH))
_HOUR = Decimal(3600)
# While awake, an auto-pausing Aurora Serverless v2 instance runs at no less than this.
AURORA_AWAKE_FLOOR_ACU = Decimal("0.5")
# The Lambda environment variable that marks a function as a client of the ledger database.
DATABASE_CLIENT_VARIABLES = (DATABASE_SECRET_ARN, DATABASE_URL)
# The order items are listed in: what people change most first.
KINDS = (
    "gpu-pool",
    "service",
    "database",
    "cache",
    "load-balancer",
    "network",
    "public-ipv4",
    "security",
    "monitoring",
)


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
    detail: str


@dataclass(frozen=True)
class CostEstimate:
    region: str
    items: list[CostItem]

    @property
    def total_usd(self) -> Decimal:
        return sum((item.monthly_usd for item in self.items), Decimal(0))

    @property
    def worst_case_usd(self) -> Decimal:
        return sum((item.worst_case_usd for item in self.items), Decimal(0))


# --- helpers ---------------------------------------------------------------------------------------


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


def _of_type(resources: Iterable[ResourceLike], type_token: str) -> Iterator[ResourceLike]:
    return (resource for resource in resources if resource.type == type_token)


def _number(value: Any, default: int | str = 0) -> Decimal:
    return Decimal(str(value if value is not None else default))


def _hours(value: Decimal) -> str:
    """Hours in their own units: 120 h prints ``5d``, 4.5 h ``4h30m``."""
    return format_duration(timedelta(seconds=int(value * _HOUR)))


def _money(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def _item(name: str, kind: str, monthly: Decimal, worst: Decimal, detail: str) -> CostItem:
    return CostItem(name, kind, _money(monthly), _money(worst), detail)


# --- schedules -------------------------------------------------------------------------------------


def fire_times(expression: str, timezone_name: str | None) -> list[datetime]:
    """When a cron schedule fires within the 730-hour window (``rate()`` and ``at()`` give none)."""
    from zoneinfo import ZoneInfo

    from croniter import croniter

    if not expression.startswith("cron("):
        return []
    zone = ZoneInfo(timezone_name or "UTC")
    start = _WINDOW_START.astimezone(zone)
    runs = croniter(eventbridge_cron_to_five_fields(expression), start)
    times = []
    while (fire := runs.get_next(datetime)) < start + _WINDOW:
        times.append(fire)
    return times


def runs_per_month(expression: str, timezone_name: str | None) -> int:
    return len(fire_times(expression, timezone_name))


def covered_hours(times: Sequence[datetime], cap: timedelta) -> Decimal:
    """Hours a month during which hosts a schedule started may run: each run lasts at most ``cap``
    and is superseded by the next run (the launcher sets the capacity, it does not add to it)."""
    covered = timedelta(0)
    following_runs: list[datetime | None] = [*times[1:], None] if times else []  # a schedule that never fires
    for current, following in zip(times, following_runs, strict=True):
        covered += min(cap, following - current) if following is not None else cap
    return min(HOURS_PER_MONTH, Decimal(int(covered.total_seconds())) / _HOUR)


@dataclass(frozen=True)
class NightlyStart:
    times: list[datetime]
    hosts: int


def _nightly_start(schedules: list[ResourceLike], pool: str) -> NightlyStart:
    """The enabled schedule that starts ``pool``: when it fires and how many hosts it asks for."""
    for schedule in schedules:
        target = schedule.inputs.get("target") or {}
        try:
            payload = json.loads(target.get("input") or "{}")
        except (TypeError, ValueError):
            continue
        if not isinstance(payload, dict) or payload.get("pool") != pool:
            continue
        if schedule.inputs.get("state", "ENABLED") != "ENABLED":
            break
        expression = str(schedule.inputs.get("scheduleExpression", ""))
        times = fire_times(expression, schedule.inputs.get("scheduleExpressionTimezone"))
        return NightlyStart(times, int(payload.get("capacity", 1)))
    return NightlyStart([], 0)


# --- GPU pools -------------------------------------------------------------------------------------


def _is_spot(group: ResourceLike) -> bool:
    distribution = (group.inputs.get("mixedInstancesPolicy") or {}).get("instancesDistribution") or {}
    return bool(distribution) and int(distribution.get("onDemandPercentageAboveBaseCapacity", 100)) == 0


def _volume_usd_per_host_hour(template: ResourceLike, prices: PriceTable, region: str) -> Decimal:
    """The EBS volumes each host carries, per hour of the host's life."""
    total = Decimal(0)
    for mapping in template.inputs.get("blockDeviceMappings") or []:
        ebs = (mapping or {}).get("ebs") or {}
        if ebs.get("volumeSize"):
            per_gb_month = prices.service(f"ebs_{ebs.get('volumeType', 'gp3')}_gb_month", region)
            total += _number(ebs["volumeSize"]) * per_gb_month / HOURS_PER_MONTH
    return total


def _gpu_pool_items(resources: list[ResourceLike], prices: PriceTable, region: str) -> Iterator[CostItem]:
    templates = {
        _instance_tags(resource).get(tags.POOL): resource
        for resource in _of_type(resources, "aws:ec2/launchTemplate:LaunchTemplate")
    }
    schedules = list(_of_type(resources, "aws:scheduler/schedule:Schedule"))
    for group in _of_type(resources, "aws:autoscaling/group:Group"):
        pool = _tag_map(group.inputs.get("tags")).get(tags.POOL)
        template = templates.get(pool)
        if pool is None or template is None:
            continue
        instance_type = str(template.inputs.get("instanceType"))
        on_demand = prices.on_demand(instance_type, region).usd_per_hour
        hourly, price_note = on_demand, ""
        if _is_spot(group):
            zones = prices.spot_zones(instance_type, region)
            if zones:
                hourly = min(on_demand, max(zones.values()))  # spot never bills above on demand
                price_note = f"; spot ${hourly}/h (snapshot {prices.spot.taken}), worst case on demand"
            else:
                price_note = "; spot, no price in the snapshot: priced on demand"
        storage = _volume_usd_per_host_hour(template, prices, region)
        maximum = int(group.inputs.get("maxSize") or 0)
        desired = min(maximum, int(group.inputs.get("desiredCapacity") or 0))
        try:
            cap = parse_duration(_instance_tags(template).get(tags.MAX_RUNTIME, ""))
        except DurationError:
            cap = _WINDOW  # no usable cap: a host may run all month
        nightly = _nightly_start(schedules, pool)
        extra = max(0, min(nightly.hosts, maximum) - desired)
        nightly_hours = covered_hours(nightly.times, cap) if extra else Decimal(0)
        host_hours = desired * HOURS_PER_MONTH + extra * nightly_hours
        detail = f"{desired} × {instance_type} always on"
        if nightly.times:
            detail += (
                f" + {len(nightly.times)} nightly runs × {extra} × up to {format_duration(cap)}"
                f" (covering {_hours(nightly_hours)})"
            )
        yield _item(
            pool,
            "gpu-pool",
            host_hours * (hourly + storage),
            maximum * HOURS_PER_MONTH * (on_demand + storage),
            detail + price_note,
        )


# --- services, data stores, fixed-hourly items ------------------------------------------------------


def _node_pool_items(resources: list[ResourceLike], prices: PriceTable, region: str) -> Iterator[CostItem]:
    """A Kubernetes stack's Karpenter NodePools (guardrails/estimate_kubernetes.py says how they are priced)."""
    from guardrails.estimate_kubernetes import node_pool_items

    for name, monthly, worst, detail in node_pool_items(resources, prices, region):
        yield _item(name, "gpu-pool", monthly, worst, detail)


def _fargate_items(resources: list[ResourceLike], prices: PriceTable, region: str) -> Iterator[CostItem]:
    task_definitions = {
        _tag_map(resource.inputs.get("tags")).get(tags.SERVICE): resource
        for resource in _of_type(resources, "aws:ecs/taskDefinition:TaskDefinition")
        if "FARGATE" in (resource.inputs.get("requiresCompatibilities") or [])
    }
    scaling_max = {
        str(target.inputs.get("resourceId", "")).rsplit("/", 1)[-1]: int(
            target.inputs.get("maxCapacity") or 0
        )
        for target in _of_type(resources, "aws:appautoscaling/target:Target")
    }
    for service in _of_type(resources, "aws:ecs/service:Service"):
        task_definition = task_definitions.get(_tag_map(service.inputs.get("tags")).get(tags.SERVICE))
        if task_definition is None or service.inputs.get("capacityProviderStrategies"):
            continue  # tasks on a GPU pool are paid for by the pool
        vcpus = _number(task_definition.inputs.get("cpu")) / 1024
        memory_gb = _number(task_definition.inputs.get("memory")) / 1024
        per_task = vcpus * prices.service("fargate_vcpu_hour", region) + memory_gb * prices.service(
            "fargate_gb_hour", region
        )
        desired = int(service.inputs.get("desiredCount") or 0)
        most = max(desired, scaling_max.get(str(service.inputs.get("name", service.name)), desired))
        yield _item(
            service.name,
            "service",
            per_task * desired * HOURS_PER_MONTH,
            per_task * most * HOURS_PER_MONTH,
            f"{counted(desired, 'Fargate task')} (up to {most}) × {vcpus.normalize()} vCPU, {memory_gb.normalize()} GB",
        )


def _rate_seconds(expression: str) -> int | None:
    amount, _, unit = expression.removeprefix("rate(").removesuffix(")").partition(" ")
    seconds = {"minute": 60, "hour": 3600, "day": 86400}.get(unit.rstrip("s"))
    return int(amount) * seconds if seconds and amount.isdigit() else None


def _hosts_can_run(resources: list[ResourceLike]) -> bool:
    """Whether the stack as declared starts accelerator hosts: a pool with capacity, or an enabled
    schedule (a nightly start). Parked, neither."""
    groups = _of_type(resources, "aws:autoscaling/group:Group")
    return any(
        _number(group.inputs.get("desiredCapacity")) > 0 or _number(group.inputs.get("minSize")) > 0
        for group in groups
    ) or any(
        schedule.inputs.get("state", "ENABLED") == "ENABLED"
        and not str(schedule.inputs.get("scheduleExpression", "")).startswith("rate(")
        for schedule in _of_type(resources, "aws:scheduler/schedule:Schedule")
    )


def _database_clients_every(resources: list[ResourceLike]) -> dict[str, int]:
    """Lambda functions that reach the database and run on a ``rate()`` clock: name → seconds between runs.

    A function tagged to read the database only while accelerator hosts run does not count while the
    stack starts none."""
    hosts_can_run = _hosts_can_run(resources)
    clients = {  # an invocation target names a function by its ARN, whose last part is the function's name
        alias: function.name
        for function in _of_type(resources, "aws:lambda/function:Function")
        if set(DATABASE_CLIENT_VARIABLES)
        & set((function.inputs.get("environment") or {}).get("variables") or {})
        and (
            hosts_can_run
            or _tag_map(function.inputs.get("tags")).get(tags.DATABASE_USE) != tags.DATABASE_WHILE_HOSTS_RUN
        )
        for alias in (str(function.inputs.get("name") or function.name), function.name)
    }
    clocks: list[tuple[str, str]] = [  # (what it invokes, its schedule expression)
        (
            str((schedule.inputs.get("target") or {}).get("arn", "")),
            str(schedule.inputs.get("scheduleExpression", "")),
        )
        for schedule in _of_type(resources, "aws:scheduler/schedule:Schedule")
    ]
    rules = {
        str(rule.inputs.get("name") or rule.name): str(rule.inputs.get("scheduleExpression") or "")
        for rule in _of_type(resources, "aws:cloudwatch/eventRule:EventRule")
    }
    clocks += [
        (str(target.inputs.get("arn", "")), rules.get(str(target.inputs.get("rule", "")), ""))
        for target in _of_type(resources, "aws:cloudwatch/eventTarget:EventTarget")
    ]
    every: dict[str, int] = {}
    for arn, expression in clocks:
        function = clients.get(arn.rsplit(":", 1)[-1])
        seconds = _rate_seconds(expression)
        if function is not None and seconds is not None:
            every[function] = min(seconds, every.get(function, seconds))
    return every


def _aurora_items(resources: list[ResourceLike], prices: PriceTable, region: str) -> Iterator[CostItem]:
    acu_hour = prices.service("aurora_serverless_v2_acu_hour", region)
    instances = [
        instance
        for instance in _of_type(resources, "aws:rds/clusterInstance:ClusterInstance")
        if instance.inputs.get("instanceClass") == "db.serverless"
    ]
    clusters = list(_of_type(resources, "aws:rds/cluster:Cluster"))
    for cluster in clusters:
        scaling = cluster.inputs.get("serverlessv2ScalingConfiguration") or {}
        # Storage bills per GB-month whatever the ACUs, parked and paused included: the size the stack
        # plans for is the cluster's tag.
        storage_gb = int(_tag_map(cluster.inputs.get("tags")).get(tags.STORAGE_GB) or 0)
        storage = prices.service("aurora_storage_gb_month", region) * storage_gb
        low, high = _number(scaling.get("minCapacity")), _number(scaling.get("maxCapacity"))
        mine = [
            instance
            for instance in instances
            if len(clusters) == 1
            or instance.inputs.get("clusterIdentifier")
            in (cluster.inputs.get("clusterIdentifier"), cluster.name)
            or str(instance.inputs.get("clusterIdentifier", "")).startswith(f"{cluster.name}-")
        ]
        count = max(1, len(mine))
        floor, how = low, f"{low.normalize()}–{high.normalize()} ACU"
        if low == 0:
            pause_after = int(scaling.get("secondsUntilAutoPause") or 300)
            awake = sorted(
                f"{name} (every {format_duration(timedelta(seconds=seconds))})"
                for name, seconds in _database_clients_every(resources).items()
                if seconds < pause_after
            )
            floor = min(AURORA_AWAKE_FLOOR_ACU, high) if awake else Decimal(0)
            how = (
                f"auto-pauses after {format_duration(timedelta(seconds=pause_after))} idle, but held awake at "
                f"{AURORA_AWAKE_FLOOR_ACU} ACU by {', '.join(awake)}"
                if awake
                else f"auto-paused (0 ACU) until used, up to {high.normalize()} ACU"
            )
        yield _item(
            cluster.name,
            "database",
            floor * count * acu_hour * HOURS_PER_MONTH + storage,
            high * count * acu_hour * HOURS_PER_MONTH + storage,
            f"Aurora Serverless v2, {counted(count, 'instance')}, {how}; {storage_gb} GB stored",
        )


def _cache_items(resources: list[ResourceLike], prices: PriceTable, region: str) -> Iterator[CostItem]:
    for group in _of_type(resources, "aws:elasticache/replicationGroup:ReplicationGroup"):
        node_type = str(group.inputs.get("nodeType"))
        engine = str(group.inputs.get("engine") or "redis")
        item = "elasticache_valkey_node_hour" if engine == "valkey" else "elasticache_node_hour"
        nodes = int(group.inputs.get("numCacheClusters") or 1)
        monthly = prices.service(item, region, node_type) * nodes * HOURS_PER_MONTH
        yield _item(group.name, "cache", monthly, monthly, f"{nodes} × {node_type} ({engine})")


def _fixed_hourly_items(resources: list[ResourceLike], prices: PriceTable, region: str) -> Iterator[CostItem]:
    fixed = {
        "aws:lb/loadBalancer:LoadBalancer": ("load-balancer", "alb_hour", "load balancer, hours only"),
        "aws:ec2/natGateway:NatGateway": ("network", "nat_gateway_hour", "NAT gateway, hours only"),
    }
    for resource in resources:
        if resource.type in fixed:
            kind, price_item, label = fixed[resource.type]
            monthly = prices.service(price_item, region) * HOURS_PER_MONTH
            yield _item(resource.name, kind, monthly, monthly, label)


def _public_ipv4_items(resources: list[ResourceLike], prices: PriceTable, region: str) -> Iterator[CostItem]:
    """AWS bills every public IPv4 address by the hour: Elastic IPs, and one per subnet of a public load balancer."""
    addresses = sum(1 for _ in _of_type(resources, "aws:ec2/eip:Eip"))
    for balancer in _of_type(resources, "aws:lb/loadBalancer:LoadBalancer"):
        if not balancer.inputs.get("internal"):
            addresses += max(2, len(balancer.inputs.get("subnets") or []))
    if addresses:
        monthly = prices.service("public_ipv4_hour", region) * addresses * HOURS_PER_MONTH
        yield _item("public-ipv4", "public-ipv4", monthly, monthly, f"{addresses} public IPv4 address(es)")


def _monthly_fee_items(resources: list[ResourceLike], prices: PriceTable, region: str) -> Iterator[CostItem]:
    secrets = sum(1 for _ in _of_type(resources, "aws:secretsmanager/secret:Secret")) + sum(
        1
        for cluster in _of_type(resources, "aws:rds/cluster:Cluster")
        if cluster.inputs.get("manageMasterUserPassword")
    )
    if secrets:
        monthly = prices.service("secret_month", region) * secrets
        yield _item("secrets", "security", monthly, monthly, f"{counted(secrets, 'Secrets Manager secret')}")
    for acl in _of_type(resources, "aws:wafv2/webAcl:WebAcl"):
        rules = len(acl.inputs.get("rules") or [])
        monthly = prices.service("waf_web_acl_month", region) + rules * prices.service(
            "waf_rule_month", region
        )
        yield _item(
            acl.name,
            "security",
            monthly,
            monthly,
            f"WAF web ACL with {counted(rules, 'rule')}, requests not priced",
        )
    alarms = sum(1 for _ in _of_type(resources, "aws:cloudwatch/metricAlarm:MetricAlarm"))
    if alarms:
        monthly = prices.service("cloudwatch_alarm_month", region) * alarms
        yield _item("alarms", "monitoring", monthly, monthly, f"{counted(alarms, 'CloudWatch alarm')}")


def estimate_monthly_cost(
    resources: Iterable[ResourceLike],
    *,
    region: str,
    prices: PriceTable | None = None,
) -> CostEstimate:
    """Price every declared resource that bills by the hour or month in ``region``.

    Raises PriceNotFound (naming the region and the refresh command) for anything the table lacks.
    """
    table = prices or load_price_table()
    declared = list(resources)
    items = [
        *_gpu_pool_items(declared, table, region),
        *_node_pool_items(declared, table, region),
        *_fargate_items(declared, table, region),
        *_aurora_items(declared, table, region),
        *_cache_items(declared, table, region),
        *_fixed_hourly_items(declared, table, region),
        *_public_ipv4_items(declared, table, region),
        *_monthly_fee_items(declared, table, region),
    ]
    return CostEstimate(region, sorted(items, key=lambda item: (KINDS.index(item.kind), item.name)))


@dataclass(frozen=True)
class CostChange:
    """One priced item's monthly figure before and after a change (zero where a state lacks it)."""

    name: str
    kind: str
    before: Decimal
    after: Decimal
    detail: str  # how the item is priced before
    after_detail: str = ""  # how it is priced after, when that differs

    @property
    def difference(self) -> Decimal:
        return self.after - self.before


def _changed_detail(before: CostItem | None, after: CostItem | None) -> str:
    if before is None or after is None or after.detail == before.detail or not after.monthly_usd:
        return ""
    return after.detail


def compare_estimates(before: CostEstimate, after: CostEstimate) -> list[CostChange]:
    old = {(item.kind, item.name): item for item in before.items}
    new = {(item.kind, item.name): item for item in after.items}
    keys = sorted({*old, *new}, key=lambda key: (KINDS.index(key[0]), key[1]))
    return [
        CostChange(
            name=name,
            kind=kind,
            before=old[(kind, name)].monthly_usd if (kind, name) in old else Decimal(0),
            after=new[(kind, name)].monthly_usd if (kind, name) in new else Decimal(0),
            detail=(old.get((kind, name)) or new[(kind, name)]).detail,
            after_detail=_changed_detail(old.get((kind, name)), new.get((kind, name))),
        )
        for kind, name in keys
    ]
