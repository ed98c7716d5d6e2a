"""``Cache``: Valkey on ElastiCache for the control plane — private and encrypted in transit and at rest.

Valkey rather than Redis OSS: it speaks the same protocol (every Redis client works unchanged),
it is what AWS develops ElastiCache on now, and its node-hours cost about 20% less than Redis OSS
on the same node type. A replication group of ``nodes`` nodes: one primary and ``nodes - 1``
replicas, with automatic failover and Multi-AZ once there is a replica to fail over to.

A cache holds nothing that cannot be rebuilt, so it is not parked and keeps no snapshots.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.common import child_of, type_token, vpc_only_security_group
from guardrails import names

ENGINE = "valkey"
DEFAULT_ENGINE_VERSION = "8.0"
PARAMETER_GROUP = "default.valkey8"
CACHE_PORT = 6379
REPLICATION_GROUP_ID_LIMIT = 40


@dataclass
class CacheArgs:
    stack: str
    node_type: str
    nodes: int
    vpc_id: pulumi.Input[str]
    subnet_ids: pulumi.Input[Sequence[str]]
    ingress_cidr: str
    tags: Mapping[str, str] = field(default_factory=dict)
    engine_version: str = DEFAULT_ENGINE_VERSION

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"a cache needs at least one node; got {self.nodes}")
        if len(self.replication_group_id) > REPLICATION_GROUP_ID_LIMIT:
            raise ValueError(
                f"{self.replication_group_id!r} is longer than ElastiCache's {REPLICATION_GROUP_ID_LIMIT} "
                "characters; use a shorter stack name"
            )

    @property
    def replication_group_id(self) -> str:
        return f"{names.prefix(self.stack)}-cache"

    @property
    def fails_over(self) -> bool:
        """Failover needs a replica to promote."""
        return self.nodes >= 2


class Cache(pulumi.ComponentResource):
    endpoint: pulumi.Output[str]
    port: pulumi.Output[int]

    def __init__(self, name: str, args: CacheArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(type_token("Cache"), name, None, opts)
        subnet_group = aws.elasticache.SubnetGroup(
            f"{name}-subnets",
            description=f"parkbrake {args.stack} cache: private subnets",
            subnet_ids=args.subnet_ids,
            tags=dict(args.tags),
            opts=child_of(self),
        )
        security_group = vpc_only_security_group(
            self,
            f"{name}-access",
            description=f"parkbrake {args.stack} cache: Valkey from inside the VPC only",
            vpc_id=args.vpc_id,
            port=CACHE_PORT,
            cidr=args.ingress_cidr,
            protocol_label="Valkey",
            tags=args.tags,
        )
        group = aws.elasticache.ReplicationGroup(
            f"{name}-replication-group",
            replication_group_id=args.replication_group_id,
            description=f"parkbrake {args.stack} cache",
            engine=ENGINE,
            engine_version=args.engine_version,
            parameter_group_name=PARAMETER_GROUP,
            node_type=args.node_type,
            num_cache_clusters=args.nodes,
            automatic_failover_enabled=args.fails_over,
            multi_az_enabled=args.fails_over,
            port=CACHE_PORT,
            subnet_group_name=subnet_group.name,
            security_group_ids=[security_group.id],
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            at_rest_encryption_enabled=True,
            apply_immediately=True,
            tags=dict(args.tags),
            opts=child_of(self),
        )

        self.endpoint = group.primary_endpoint_address
        self.port = group.port
        self.register_outputs({"endpoint": self.endpoint, "port": self.port})
