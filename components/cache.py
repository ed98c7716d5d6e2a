"""``Cache``: Valkey on ElastiCache for the control plane — private and encrypted in transit and at rest.

Valkey rather than Redis OSS: it speaks the same protocol (every Redis client works unchanged),
it is what AWS develops ElastiCache on now, and its node-hours cost about 20% less than Redis OSS
on the same node type. A replication group of ``nodes`` nodes: one primary and ``nodes - 1``
replicas, with automatic failover and Multi-AZ once there is a replica to fail over to.

A cache holds nothing that cannot be rebuilt, so it is not parked and keeps no snapshots.

Clients authenticate: the group admits only the users of its RBAC user group — one application user
whose generated password lives in a Secrets Manager secret (``username``, ``password``, ``host``,
``port``), which the control plane's tasks receive at start. TLS is required, never merely preferred.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws
import pulumi_random as random

from components.common import child_of, named_child_of, type_token
from components.data_store import DataStore
from guardrails import names

ENGINE = "valkey"
DEFAULT_ENGINE_VERSION = "8.0"
PARAMETER_GROUP = "default.valkey8"
CACHE_PORT = 6379
REPLICATION_GROUP_ID_LIMIT = 40
APPLICATION_USER = "parkbrake"
# Everything but the commands that can reconfigure or wipe the cache.
APPLICATION_ACCESS = "on ~* &* +@all -@dangerous"


@dataclass
class CacheArgs:
    stack: str
    node_type: str
    nodes: int
    vpc_id: pulumi.Input[str]
    subnet_ids: pulumi.Input[Sequence[str]]
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


class Cache(DataStore):
    endpoint: pulumi.Output[str]
    port: pulumi.Output[int]
    secret_arn: pulumi.Output[str]

    def __init__(self, name: str, args: CacheArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(type_token("Cache"), name, None, opts)
        self._args = args
        subnet_group = self._network(
            name,
            service="elasticache",
            description=f"parkbrake {args.stack} cache",
            port=CACHE_PORT,
            vpc_id=args.vpc_id,
            subnet_ids=args.subnet_ids,
            tags=args.tags,
        )
        user_group, password = self._users(name)
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
            subnet_group_name=subnet_group,
            security_group_ids=[self.security_group_id],
            user_group_ids=[user_group.id],
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            at_rest_encryption_enabled=True,
            apply_immediately=True,
            tags=dict(args.tags),
            opts=named_child_of(self),
        )

        self.endpoint = group.primary_endpoint_address
        self.port = group.port
        self.secret_arn = self._secret(name, password, group).arn
        self.register_outputs({"endpoint": self.endpoint, "port": self.port, "secretArn": self.secret_arn})

    def _users(self, name: str) -> tuple[aws.elasticache.UserGroup, random.RandomPassword]:
        """The one application user (password authentication) in the group's RBAC user group."""
        args = self._args
        prefix = names.prefix(args.stack)
        # ElastiCache passwords: 16–128 printable characters; letters and digits avoid its forbidden ones.
        password = random.RandomPassword(f"{name}-password", length=40, special=False, opts=child_of(self))
        user = aws.elasticache.User(
            f"{name}-user",
            user_id=f"{prefix}-app",
            user_name=APPLICATION_USER,
            engine=ENGINE,
            access_string=APPLICATION_ACCESS,
            authentication_mode={"type": "password", "passwords": [password.result]},
            tags=dict(args.tags),
            opts=named_child_of(self),
        )
        user_group = aws.elasticache.UserGroup(
            f"{name}-users",
            user_group_id=f"{prefix}-cache-users",
            engine=ENGINE,
            user_ids=[user.user_id],
            tags=dict(args.tags),
            opts=named_child_of(self),
        )
        return user_group, password

    def _secret(
        self, name: str, password: random.RandomPassword, group: aws.elasticache.ReplicationGroup
    ) -> aws.secretsmanager.Secret:
        secret = aws.secretsmanager.Secret(
            f"{name}-credentials",
            description=f"parkbrake {self._args.stack} cache: the application user's credentials",
            tags=dict(self._args.tags),
            opts=child_of(self),
        )
        aws.secretsmanager.SecretVersion(
            f"{name}-credentials",
            secret_id=secret.id,
            secret_string=pulumi.Output.json_dumps(
                {
                    "username": APPLICATION_USER,
                    "password": password.result,
                    "host": group.primary_endpoint_address,
                    "port": CACHE_PORT,
                }
            ),
            opts=child_of(self),
        )
        return secret
