"""The typed model of one stack's config, read from ``Pulumi.<stack>.yaml``.

The Pulumi program, ``parkbrake plan`` and the policy pack all read the stack through this one
model. Parsing checks the whole document and reports every problem by its YAML path at once,
before any resource is declared.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from croniter import croniter

from guardrails.capacity import Capacity
from guardrails.closed_days import calendar_problems
from guardrails.durations import format_duration
from guardrails.errors import InputError
from guardrails.instance_types import is_accelerator, is_instance_type
from guardrails.owners import owner_problem
from guardrails.pricing import load_price_table
from guardrails.schedules import eventbridge_cron
from guardrails.settings import process_variable
from guardrails.settings_table import AGENT_IDLE_AFTER, REVISION
from guardrails.time_zones import zone_problem
from stacks.guardrails_config import GuardrailsConfig, guardrails_config
from stacks.kubernetes_config import KubernetesConfig, parse_kubernetes
from stacks.org_config import OrganisationConfig, parse_organisation
from stacks.service_config import (
    ControlPlaneConfig,
    HostsConfig,
    InferenceConfig,
    capacity,
    control_plane,
    hosts,
    inference,
)
from stacks.validation import Problems, Section

NAMESPACE = "parkbrake"
PoolRole = Literal["training", "inference"]
CapacityType = Literal["on-demand", "spot"]

REGION = re.compile(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d")
AURORA_ACU_STEP = 0.5
# The calendar travels in an SSM parameter: Advanced parameters hold up to 8 KB.
CALENDAR_MAX_BYTES = 8192


@dataclass(frozen=True)
class Tenant:
    name: str
    monthly_budget_usd: float
    monthly_gpu_hours: float | None = None  # a second limit, accelerator-hours a month (docs/ledger.md)


@dataclass(frozen=True)
class GpuPoolConfig:
    name: str
    role: PoolRole
    instance_type: str
    tenant: str
    capacity: Capacity
    max_runtime: timedelta
    capacity_type: CapacityType = "on-demand"
    owner: str | None = None  # who is told about the pool's hosts: the parkbrake:owner tag they carry
    # Tried in order when AWS lacks capacity for instance_type (the group's prioritized overrides).
    fallback_instance_types: tuple[str, ...] = ()
    # The hosts' agent idle window (``parkbrake agent --idle-after``); None: the agent's own default,
    # the settings table's row.
    agent_idle_after: timedelta | None = None

    @property
    def instance_types(self) -> tuple[str, ...]:
        """What the pool may launch, in order of preference."""
        return (self.instance_type, *self.fallback_instance_types)


@dataclass(frozen=True)
class NightlyConfig:
    pool: str
    cron: str
    timezone: str
    capacity: int
    # The calendar of closed days (iCalendar text read from ``nightly.calendar``): no start on those.
    calendar: str | None = None


@dataclass(frozen=True)
class DatabaseConfig:
    min_acu: float
    max_acu: float
    storage_gb: int = 20


@dataclass(frozen=True)
class CacheConfig:
    node_type: str
    nodes: int = 1


@dataclass(frozen=True)
class NetworkConfig:
    cidr: str = "10.40.0.0/16"
    vpc_id: str | None = None
    public_subnet_ids: tuple[str, ...] = ()
    private_subnet_ids: tuple[str, ...] = ()

    @property
    def adopts_existing(self) -> bool:
        return self.vpc_id is not None


@dataclass(frozen=True)
class PolicyConfig:
    max_pool_size: int = 8
    allowed_instance_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class StackConfig:
    stack: str
    region: str
    parked: bool
    tenants: dict[str, Tenant]
    pools: dict[str, GpuPoolConfig]
    nightly: NightlyConfig | None
    control_plane: ControlPlaneConfig | None
    inference: InferenceConfig | None
    database: DatabaseConfig | None
    cache: CacheConfig | None
    guardrails: GuardrailsConfig = field(default_factory=GuardrailsConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    revision: str = "unversioned"
    hosts: HostsConfig = field(default_factory=HostsConfig)
    # The EKS cluster's section: set, the stack is a Kubernetes stack (stacks/kubernetes_program.py).
    kubernetes: KubernetesConfig | None = None
    # Set, the stack is an organisation's hub and declares its spokes (stacks/org_program.py).
    organisation: OrganisationConfig | None = None

    def with_parked(self, parked: bool) -> StackConfig:
        return replace(self, parked=parked)

    def pool_capacity(self, pool: GpuPoolConfig) -> Capacity:
        return pool.capacity.parked() if self.parked else pool.capacity

    def service_capacity(self, capacity: Capacity) -> Capacity:
        return capacity.parked() if self.parked else capacity

    @property
    def total_budget_usd(self) -> float:
        return sum(tenant.monthly_budget_usd for tenant in self.tenants.values())


TOP_LEVEL_KEYS = {
    "parked", "revision", "tenants", "pools", "nightly", "control_plane", "inference",
    "database", "cache", "guardrails", "network", "policy", "hosts", "kubernetes", "organisation",
}  # fmt: skip


POOL_KEYS = {
    "role",
    "instance_type",
    "tenant",
    "min",
    "desired",
    "max",
    "max_runtime",
    "capacity_type",
    "owner",
    "fallback_instance_types",
    AGENT_IDLE_AFTER.stack_key.rpartition(".")[2],
}


def parse_stack_config(
    stack: str, config: dict[str, Any], source: str, *, project_dir: Path | None = None
) -> StackConfig:
    """Build the model from the ``config:`` mapping of a stack file; raise ConfigError listing every problem.

    Paths in the config (the host-tools artifact) are relative to ``project_dir``, by default the
    current directory (where ``pulumi up`` runs the program).
    """
    project_dir = project_dir or Path.cwd()
    problems = Problems()
    own: dict[str, Any] = {}
    for key, value in config.items():
        namespace, _, name = str(key).partition(":")
        if namespace == NAMESPACE:
            own[name] = value
        elif namespace != "aws" and not name:
            problems.add(str(key), f"config keys need a namespace; use {NAMESPACE}:{key}")
    root = Section(own, "", problems, TOP_LEVEL_KEYS)
    region = config.get("aws:region")
    if not isinstance(region, str) or REGION.fullmatch(region) is None:
        problems.add("aws:region", f"{region!r} is not an AWS region; set aws:region, e.g. us-east-1")
        region = ""

    prices = load_price_table()
    tenants = {
        name: Tenant(
            name,
            section.number("monthly_budget_usd", minimum=0.01),
            section.number("monthly_gpu_hours", None, minimum=0.01)
            if section.has("monthly_gpu_hours")
            else None,
        )
        for name, section in root.named_sections(
            "tenants", {"monthly_budget_usd", "monthly_gpu_hours"}, required=True
        )
    }
    guardrails = guardrails_config(root)
    pools = {
        name: _pool(name, section, tenants, prices.instances)
        for name, section in root.named_sections("pools", POOL_KEYS)
    }
    policy = _policy(root.section("policy", {"max_pool_size", "allowed_instance_types"}), prices.instances)
    _check_pools_against_policy(pools, policy, problems)
    _check_caps_against_ceiling(guardrails, pools, problems)

    parsed = StackConfig(
        stack=stack,
        region=region,
        parked=root.boolean("parked", False),
        revision=root.string("revision", process_variable(os.environ, REVISION) or "unversioned"),
        tenants=tenants,
        pools=pools,
        nightly=_nightly(root, pools, project_dir),
        control_plane=control_plane(root),
        inference=inference(root, pools, prices.instances),
        database=_database(root),
        cache=_cache(root, prices.known_service_variants("elasticache_node_hour")),
        guardrails=guardrails,
        network=_network(root),
        policy=policy,
        hosts=_hosts(root, project_dir),
        kubernetes=parse_kubernetes(root, tenants, pools),
        organisation=parse_organisation(root, stack, project_dir),
    )
    problems.raise_if_any(source)
    return parsed


def _hosts(root: Section, project_dir: Path) -> HostsConfig:
    """How EC2 hosts get their tools; a Kubernetes stack has none (the agent runs as a DaemonSet's image).
    Its ``nightly`` is the nightly pool's NodePool window (guardrails/nightly_window.py)."""
    if not root.has("kubernetes"):
        return hosts(root, project_dir)
    if root.has("hosts"):
        root.problems.add(
            "hosts", "is not used by a Kubernetes stack (its nodes run the agent's image); remove it"
        )
    return HostsConfig()


def _pool(name: str, section: Section, tenants: dict[str, Tenant], priced: dict[str, Any]) -> GpuPoolConfig:
    instance_type = section.string("instance_type", hint="an EC2 instance type such as g5.xlarge")
    if instance_type:
        if not is_instance_type(instance_type) or not is_accelerator(instance_type):
            section.problems.add(
                section.at("instance_type"),
                f'"{instance_type}" is not an accelerated-computing instance type (p*, g*, trn*, inf*, dl*, f*, vt*)',
            )
        elif instance_type not in priced:
            section.problems.add(
                section.at("instance_type"),
                f'"{instance_type}" has no price in guardrails/prices.json; use one of '
                f"{', '.join(sorted(priced))} or add its price",
            )
    tenant = section.string("tenant", hint="a tenant name")
    if tenant and tenants and tenant not in tenants:
        section.problems.add(
            section.at("tenant"),
            f'"{tenant}" is not a tenant; define it under tenants ({", ".join(sorted(tenants))})',
        )
    return GpuPoolConfig(
        name=name,
        role=section.choice("role", ("training", "inference")),  # type: ignore[arg-type]
        instance_type=instance_type,
        tenant=tenant,
        capacity=capacity(section),
        max_runtime=section.duration("max_runtime"),
        capacity_type=section.choice("capacity_type", ("on-demand", "spot"), "on-demand"),  # type: ignore[arg-type]
        owner=_owner(section),
        fallback_instance_types=_fallback_types(section, instance_type, priced),
        agent_idle_after=_agent_idle_after(section),
    )


def _agent_idle_after(section: Section) -> timedelta | None:
    """The pool's agent idle window, within the settings table's bounds; None when the pool sets none."""
    key = AGENT_IDLE_AFTER.stack_key.rpartition(".")[2]
    if not section.has(key):
        return None
    return section.duration(key, ceiling=AGENT_IDLE_AFTER.duration_ceiling, floor=AGENT_IDLE_AFTER.floor)


def _owner(section: Section) -> str | None:
    """A pool's owner: put on its hosts as parkbrake:owner, so it is checked as the sweep checks the tag."""
    owner = section.string("owner", None, hint="an e-mail address or a chat handle")
    if owner and (problem := owner_problem(owner)) is not None:
        section.problems.add(section.at("owner"), problem.partition(": ")[2])
    return owner or None


def _fallback_types(section: Section, primary: str, priced: dict[str, Any]) -> tuple[str, ...]:
    """Each an accelerated type with a price (the launcher reserves budget for the dearest), once."""
    if not section.has("fallback_instance_types"):
        return ()
    chosen = section.string_list("fallback_instance_types", hint="a list of instance types, in order")
    where = section.at("fallback_instance_types")
    if not chosen and not section.problems.has(where):
        section.problems.add(where, "is empty; list instance types to try in order, or leave the key out")
    for index, name in enumerate(chosen):
        if name == primary or name in chosen[:index]:
            section.problems.add(f"{where}[{index}]", f'"{name}" is listed twice (with instance_type)')
        elif not is_instance_type(name) or not is_accelerator(name):
            section.problems.add(
                f"{where}[{index}]", f'"{name}" is not an accelerated-computing instance type'
            )
        elif name not in priced:
            section.problems.add(
                f"{where}[{index}]",
                f'"{name}" has no price in guardrails/prices.json; use one of {", ".join(sorted(priced))} '
                "or add its price",
            )
    return tuple(chosen)


def _policy(section: Section, priced: dict[str, Any]) -> PolicyConfig:
    allowed = section.string_list("allowed_instance_types", sorted(priced), hint="a list of instance types")
    return PolicyConfig(
        max_pool_size=section.integer("max_pool_size", 8, minimum=1, maximum=1000),
        allowed_instance_types=tuple(allowed),
    )


def _check_pools_against_policy(
    pools: dict[str, GpuPoolConfig], policy: PolicyConfig, problems: Problems
) -> None:
    for pool in pools.values():
        if pool.capacity.max > policy.max_pool_size:
            problems.add(
                f"pools.{pool.name}.max",
                f"{pool.capacity.max} is above policy.max_pool_size ({policy.max_pool_size}); "
                "lower it or raise the ceiling deliberately",
            )


def _nightly(root: Section, pools: dict[str, GpuPoolConfig], project_dir: Path) -> NightlyConfig | None:
    if not root.has("nightly"):
        return None
    section = root.section("nightly", {"pool", "cron", "timezone", "capacity", "calendar"})
    pool_name = section.string("pool", hint="the name of a training pool")
    pool = pools.get(pool_name)
    if pool_name and pool is None:
        section.problems.add(
            section.at("pool"), f'"{pool_name}" is not a pool; use one of {", ".join(sorted(pools))}'
        )
    elif pool is not None and pool.role != "training":
        section.problems.add(
            section.at("pool"),
            f'"{pool_name}" is an {pool.role} pool; the nightly schedule starts a training pool',
        )
    cron = section.string("cron", hint="a five-field cron expression such as '0 2 * * *'")
    if cron and (len(cron.split()) != 5 or not croniter.is_valid(cron)):
        section.problems.add(
            section.at("cron"), f'"{cron}" is not a five-field cron expression such as "0 2 * * *"'
        )
    elif cron:
        try:
            eventbridge_cron(cron)
        except InputError as error:
            section.problems.add(section.at("cron"), str(error).removeprefix("nightly.cron: "))
    timezone = section.string("timezone", "UTC", hint="an IANA time zone such as Europe/Berlin")
    zone_error = zone_problem(timezone)
    if zone_error is not None:
        section.problems.add(section.at("timezone"), zone_error)
    capacity = section.integer("capacity", minimum=1)
    if pool is not None and capacity > pool.capacity.max:
        section.problems.add(
            section.at("capacity"), f"{capacity} is above pools.{pool_name}.max ({pool.capacity.max})"
        )
    return NightlyConfig(
        pool=pool_name,
        cron=cron,
        timezone=timezone,
        capacity=capacity,
        calendar=_calendar(section, project_dir),
    )


def _calendar(section: Section, project_dir: Path) -> str | None:
    """The iCalendar text of ``nightly.calendar`` (a path relative to the project), checked whole now:
    the launcher must never meet a calendar it cannot read."""
    if not section.has("calendar"):
        return None
    name = section.string("calendar", hint="a path to an iCalendar (.ics) file of closed days")
    path = Path(name)
    local = path if path.is_absolute() else project_dir / path
    try:
        raw = local.read_bytes()
    except OSError as error:
        section.problems.add(
            section.at("calendar"), f'cannot read "{name}": {error.strerror}; give the .ics path'
        )
        return None
    if len(raw) > CALENDAR_MAX_BYTES:
        section.problems.add(
            section.at("calendar"),
            f'"{name}" is {len(raw)} bytes, above the {CALENDAR_MAX_BYTES} an SSM parameter holds; '
            "use recurring events (RRULE) instead of one event per day",
        )
        return None
    text = raw.decode("utf-8", "replace")
    for problem in calendar_problems(text):
        section.problems.add(section.at("calendar"), f'"{name}" {problem}')
    return text


def _database(root: Section) -> DatabaseConfig | None:
    if not root.has("database"):
        return None
    section = root.section("database", {"min_acu", "max_acu", "storage_gb"})
    min_acu = section.number("min_acu", 0.5, minimum=0, maximum=256)
    max_acu = section.number("max_acu", 4, minimum=1, maximum=256)
    for key, value in (("min_acu", min_acu), ("max_acu", max_acu)):
        if value % AURORA_ACU_STEP:
            section.problems.add(section.at(key), f"{value:g} is not a multiple of {AURORA_ACU_STEP} ACU")
    if min_acu > max_acu:
        section.problems.add(section.path, f"min_acu ({min_acu:g}) must not exceed max_acu ({max_acu:g})")
    return DatabaseConfig(
        min_acu=min_acu, max_acu=max_acu, storage_gb=section.integer("storage_gb", 20, minimum=1)
    )


def _cache(root: Section, node_types: list[str]) -> CacheConfig | None:
    if not root.has("cache"):
        return None
    section = root.section("cache", {"node_type", "nodes"})
    node_type = section.string("node_type", "cache.t4g.small", hint="an ElastiCache node type")
    if node_type not in node_types:
        section.problems.add(
            section.at("node_type"), f'"{node_type}" has no price; use one of {", ".join(node_types)}'
        )
    return CacheConfig(node_type=node_type, nodes=section.integer("nodes", 1, minimum=1, maximum=6))


def _check_caps_against_ceiling(
    guardrails: GuardrailsConfig, pools: dict[str, GpuPoolConfig], problems: Problems
) -> None:
    """A default cap above the ceiling would be clamped on every host: refuse it where it is written."""
    ceiling = format_duration(guardrails.max_runtime_ceiling)
    if guardrails.warn_before >= guardrails.max_runtime_ceiling:
        problems.add(
            "guardrails.warn_before",
            f"{format_duration(guardrails.warn_before)} is not shorter than guardrails.max_runtime_ceiling "
            f"({ceiling}); no host could run long enough to be warned",
        )
    caps = {"guardrails.default_max_runtime": guardrails.default_max_runtime}
    caps |= {f"pools.{name}.max_runtime": pool.max_runtime for name, pool in pools.items()}
    for path, cap in caps.items():
        if cap > guardrails.max_runtime_ceiling:
            problems.add(
                path,
                f"{format_duration(cap)} is above guardrails.max_runtime_ceiling ({ceiling}); "
                "lower the cap or raise the ceiling",
            )


def _network(root: Section) -> NetworkConfig:
    section = root.section("network", {"cidr", "vpc_id", "public_subnet_ids", "private_subnet_ids"})
    if not section.has("vpc_id"):
        cidr = section.string(
            "cidr",
            "10.40.0.0/16",
            pattern=re.compile(r"\d+\.\d+\.\d+\.\d+/(1[6-9]|2[0-4])"),
            hint="an IPv4 CIDR between /16 and /24",
        )
        return NetworkConfig(cidr=cidr)
    subnets = {}
    for key in ("public_subnet_ids", "private_subnet_ids"):
        subnets[key] = section.string_list(key, hint="a list of at least two subnet ids in different AZs")
        if section.has(key) and len(subnets[key]) < 2:
            section.problems.add(
                section.at(key), "needs at least two subnets, in different availability zones"
            )
    return NetworkConfig(
        vpc_id=section.string(
            "vpc_id", pattern=re.compile(r"vpc-[0-9a-f]+"), hint="a VPC id such as vpc-0abc"
        ),
        public_subnet_ids=tuple(subnets["public_subnet_ids"]),
        private_subnet_ids=tuple(subnets["private_subnet_ids"]),
    )


def config_from_engine() -> dict[str, Any]:
    """Every config key the Pulumi engine passes the program (``aws:region``, ``parkbrake:*``, others).

    The engine hands values over as strings, structured ones JSON-encoded (what ``Config.get_object``
    decodes); a plain string that is not JSON stays as it is.
    """
    import json

    from pulumi.runtime.config import CONFIG, get_config_env

    raw = {**get_config_env(), **CONFIG.get()}
    decoded: dict[str, Any] = {}
    for key, value in raw.items():
        try:
            decoded[key] = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            decoded[key] = value
    return decoded


def stack_file(stack: str, project_dir: Path) -> Path:
    return project_dir / f"Pulumi.{stack}.yaml"


def available_stacks(project_dir: Path) -> list[str]:
    return sorted(path.name[len("Pulumi.") : -len(".yaml")] for path in project_dir.glob("Pulumi.*.yaml"))


def missing_stack_file(stack: str, path: Path) -> InputError:
    """A --stack with no stack file: bad input naming the stack given and the stacks that exist beside it."""
    known = available_stacks(path.parent)
    if not known:
        return InputError(
            f"no config for stack {stack!r}: {path} does not exist (stacks here: none) — "
            "pass --project-dir, the folder that holds Pulumi.yaml and the Pulumi.<stack>.yaml files"
        )
    closest = difflib.get_close_matches(stack, known, n=1)
    return InputError(
        f"no config for stack {stack!r}: {path} does not exist (stacks here: {', '.join(known)}) — "
        + (f"did you mean --stack {closest[0]}?" if closest else "pass one of them as --stack")
    )


def load_stack_config(stack: str, project_dir: Path, *, config_file: Path | None = None) -> StackConfig:
    """Read and validate ``Pulumi.<stack>.yaml`` (or ``config_file``)."""
    from ruamel.yaml import YAML, YAMLError

    if config_file is not None and not config_file.is_file():  # the file the user named, not the stack
        raise InputError(f"--config {config_file}: no such file; give the path of a stack file")
    path = config_file or stack_file(stack, project_dir)
    if not path.is_file():
        raise missing_stack_file(stack, path)
    try:
        document = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise InputError(f"{path.name} is not UTF-8 text (byte {error.start}); save it as UTF-8") from None
    except YAMLError as error:
        raise InputError(f"{path.name} is not valid YAML: {error}") from None
    config = (document or {}).get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise InputError(f"{path.name} has no 'config:' mapping; see Pulumi.dev.yaml for the layout")
    return parse_stack_config(stack, config, path.name, project_dir=project_dir)


__all__ = [
    "Capacity",
    "ControlPlaneConfig",
    "DatabaseConfig",
    "GpuPoolConfig",
    "InferenceConfig",
    "NightlyConfig",
    "StackConfig",
    "load_stack_config",
    "parse_stack_config",
]
