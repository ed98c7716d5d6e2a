"""The package's components: ``parkbrake:index:<Name>``, each building ``parkbrake:aws:<Name>`` inside.

No ``from __future__ import annotations`` here: the provider host reads these annotations at run
time, and a string annotation is one it cannot follow.
"""

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from enum import Enum
from typing import Any, NotRequired, TypedDict

import pulumi

from components import cache, database, gpu_pool, network
from guardrails.capacity import Capacity
from guardrails.durations import DurationError, parse_duration
from guardrails.errors import InputError

PACKAGE = "parkbrake"


def token(name: str) -> str:
    """The host serves the ``index`` module only: ``parkbrake:index:<Name>``."""
    return f"{PACKAGE}:index:{name}"


class Role(Enum):
    """What a GPU pool's hosts do: training jobs, or the inference service's tasks."""

    TRAINING = "training"
    INFERENCE = "inference"


class CapacityType(Enum):
    """How the pool's hosts are bought."""

    ON_DEMAND = "on-demand"
    SPOT = "spot"


class GpuPoolArgs(TypedDict):
    stack: str
    """The stack the pool belongs to (tagged parkbrake:stack, part of every name)."""
    pool: str
    """The pool's name within the stack."""
    role: Role
    """training or inference."""
    instance_type: str
    """An accelerated-computing EC2 instance type, e.g. g5.xlarge."""
    tenant: str
    """Who pays for the pool's hosts (tagged parkbrake:tenant)."""
    min: int
    """The Auto Scaling group's minimum size."""
    desired: int
    """The group's desired capacity."""
    max: int
    """The group's maximum size: what the worst case is priced at."""
    max_runtime: str
    """Each host's cap, e.g. 4h or 90m: its deadline is its start plus this."""
    vpc_id: pulumi.Input[str]
    """The VPC the hosts run in."""
    subnet_ids: pulumi.Input[list[str]]
    """The subnets the group launches into."""
    capacity_type: NotRequired[CapacityType]
    """on-demand (the default) or spot."""
    fallback_instance_types: NotRequired[list[str]]
    """Instance types tried in order when EC2 lacks capacity for instance_type."""
    parked: NotRequired[bool]
    """Parked: the group is held at zero hosts."""
    revision: NotRequired[str]
    """Tagged on every resource as parkbrake:revision."""
    tags: NotRequired[dict[str, str]]
    """Tags added to every resource."""
    root_volume_gb: NotRequired[int]
    """The root volume's size (default 100 GB)."""
    ami_id: NotRequired[str]
    """An AMI with the host tools baked into /opt/parkbrake."""
    owner: NotRequired[str]
    """Who is told about the pool's hosts (tagged parkbrake:owner)."""


class GpuPool(pulumi.ComponentResource):
    """A pool of GPU hosts in an Auto Scaling group, each with a deadline, tagged for the guardrails."""

    launch_template_id: pulumi.Output[str]
    autoscaling_group_name: pulumi.Output[str]
    autoscaling_group_arn: pulumi.Output[str]
    security_group_id: pulumi.Output[str]

    def __init__(self, name: str, args: GpuPoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(token("GpuPool"), name, None, opts)
        role = Role(args["role"])
        capacity = Capacity(args["min"], args["desired"], args["max"])
        if not 0 <= capacity.min <= capacity.desired <= capacity.max or capacity.max < 1:
            raise InputError(
                f"GpuPool.min/desired/max: {capacity.min}/{capacity.desired}/{capacity.max}; "
                "need 0 ≤ min ≤ desired ≤ max and max ≥ 1"
            )
        ami_id = args.get("ami_id")
        real = gpu_pool.GpuPool(
            name,
            gpu_pool.GpuPoolArgs(
                stack=args["stack"],
                pool=args["pool"],
                role=role.value,
                instance_type=args["instance_type"],
                tenant=args["tenant"],
                capacity=capacity,
                max_runtime=parse_duration_field("GpuPool", "max_runtime", args["max_runtime"]),
                vpc_id=args["vpc_id"],
                subnet_ids=args["subnet_ids"],
                capacity_type=CapacityType(args.get("capacity_type", CapacityType.ON_DEMAND)).value,
                fallback_instance_types=tuple(args.get("fallback_instance_types", ())),
                parked=args.get("parked", False),
                revision=args.get("revision", "unversioned"),
                tags=dict(args.get("tags", {})),
                root_volume_gb=args.get("root_volume_gb", 100),
                host_tools=gpu_pool.BakedAmi(ami_id) if ami_id else None,
                owner=args.get("owner"),
            ),
            pulumi.ResourceOptions(parent=self),
        )
        self.launch_template_id = real.launch_template_id
        self.autoscaling_group_name = real.autoscaling_group_name
        self.autoscaling_group_arn = real.autoscaling_group_arn
        self.security_group_id = real.security_group_id
        self.register_outputs(outputs(self, GpuPool))


class NetworkArgs(TypedDict):
    stack: str
    """The stack the network belongs to."""
    cidr: NotRequired[str]
    """The VPC's CIDR block (default 10.40.0.0/16), cut into two public and two private subnets."""
    vpc_id: NotRequired[str]
    """Adopt this existing VPC instead of creating one (with both subnet lists)."""
    public_subnet_ids: NotRequired[list[str]]
    """The adopted VPC's public subnets."""
    private_subnet_ids: NotRequired[list[str]]
    """The adopted VPC's private subnets."""
    tags: NotRequired[dict[str, str]]
    """Tags added to every resource."""


class Network(pulumi.ComponentResource):
    """A VPC with public and private subnets in two zones and one NAT gateway, or an adopted one."""

    vpc_id: pulumi.Output[str]
    public_subnet_ids: pulumi.Output[list[str]]
    private_subnet_ids: pulumi.Output[list[str]]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(token("Network"), name, None, opts)
        try:
            network_args = network.NetworkArgs(
                stack=args["stack"],
                cidr=args.get("cidr", "10.40.0.0/16"),
                vpc_id=args.get("vpc_id"),
                public_subnet_ids=tuple(args.get("public_subnet_ids", ())),
                private_subnet_ids=tuple(args.get("private_subnet_ids", ())),
                tags=dict(args.get("tags", {})),
            )
        except ValueError as error:
            raise InputError(f"Network: {error}") from None
        real = network.Network(name, network_args, pulumi.ResourceOptions(parent=self))
        self.vpc_id = real.vpc_id
        self.public_subnet_ids = real.public_subnet_ids
        self.private_subnet_ids = real.private_subnet_ids
        self.register_outputs(outputs(self, Network))


class CacheArgs(TypedDict):
    stack: str
    """The stack the cache belongs to."""
    node_type: str
    """An ElastiCache node type, e.g. cache.t4g.small."""
    nodes: int
    """How many nodes (1-6)."""
    vpc_id: pulumi.Input[str]
    """The VPC the cache runs in."""
    subnet_ids: pulumi.Input[list[str]]
    """The (private) subnets of its subnet group."""
    tags: NotRequired[dict[str, str]]
    """Tags added to every resource."""


class Cache(pulumi.ComponentResource):
    """Valkey on ElastiCache, encrypted in transit and at rest, its credentials in Secrets Manager."""

    endpoint: pulumi.Output[str]
    port: pulumi.Output[int]
    secret_arn: pulumi.Output[str]

    def __init__(self, name: str, args: CacheArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(token("Cache"), name, None, opts)
        try:
            cache_args = cache.CacheArgs(
                stack=args["stack"],
                node_type=args["node_type"],
                nodes=args["nodes"],
                vpc_id=args["vpc_id"],
                subnet_ids=args["subnet_ids"],
                tags=dict(args.get("tags", {})),
            )
        except ValueError as error:
            raise InputError(f"Cache: {error}") from None
        real = cache.Cache(name, cache_args, pulumi.ResourceOptions(parent=self))
        self.endpoint = real.endpoint
        self.port = real.port
        self.secret_arn = real.secret_arn
        self.register_outputs(outputs(self, Cache))


class DatabaseArgs(TypedDict):
    stack: str
    """The stack the database belongs to."""
    min_acu: float
    """Aurora Serverless v2's minimum capacity (0 lets it pause), in multiples of 0.5."""
    max_acu: float
    """Its maximum capacity."""
    storage_gb: int
    """The storage the ledger is expected to hold (tagged and priced; Aurora sizes itself)."""
    parked: bool
    """Parked: the floor is 0 ACU, so the cluster pauses when idle."""
    vpc_id: pulumi.Input[str]
    """The VPC the database runs in."""
    subnet_ids: pulumi.Input[list[str]]
    """The (private) subnets of its subnet group."""
    tags: NotRequired[dict[str, str]]
    """Tags added to every resource."""
    auto_pause_after: NotRequired[str]
    """How long idle before an ACU floor of 0 pauses it, e.g. 10m."""
    deletion_protection: NotRequired[bool]
    """On by default: the ledger is the record of what GPUs cost."""
    backup_retention_days: NotRequired[int]
    """Days of automated backups (default 7)."""


class Database(pulumi.ComponentResource):
    """The usage ledger's Aurora Serverless v2 PostgreSQL, private, encrypted, its password managed by RDS."""

    endpoint: pulumi.Output[str]
    port: pulumi.Output[int]
    secret_arn: pulumi.Output[str]

    def __init__(self, name: str, args: DatabaseArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(token("Database"), name, None, opts)
        required = database.DatabaseArgs(
            stack=args["stack"],
            min_acu=float(args["min_acu"]),
            max_acu=float(args["max_acu"]),
            storage_gb=args["storage_gb"],
            parked=args["parked"],
            vpc_id=args["vpc_id"],
            subnet_ids=args["subnet_ids"],
            tags=dict(args.get("tags", {})),
        )
        # The optional inputs replace the real args' own defaults only when given.
        given: dict[str, Any] = {}
        if "deletion_protection" in args:
            given["deletion_protection"] = args["deletion_protection"]
        if "backup_retention_days" in args:
            given["backup_retention_days"] = args["backup_retention_days"]
        if "auto_pause_after" in args:
            given["auto_pause_after"] = parse_duration_field(
                "Database", "auto_pause_after", args["auto_pause_after"]
            )
        real = database.Database(
            name, dataclasses.replace(required, **given), pulumi.ResourceOptions(parent=self)
        )
        self.endpoint = real.endpoint
        self.port = real.port
        self.secret_arn = real.secret_arn
        self.register_outputs(outputs(self, Database))


def parse_duration_field(component: str, field: str, text: str) -> timedelta:
    """A duration input (``4h``); a bad one is one line naming the component's field and the fix."""
    try:
        return parse_duration(text)
    except DurationError as error:
        raise InputError(f"{component}.{field}: {error}") from None


def outputs(component: pulumi.ComponentResource, kind: type) -> Mapping[str, object]:
    """The component's declared outputs, by name, for ``register_outputs``."""
    return {name: getattr(component, name) for name in kind.__annotations__}


COMPONENTS: list[type[pulumi.ComponentResource]] = [GpuPool, Network, Cache, Database]
