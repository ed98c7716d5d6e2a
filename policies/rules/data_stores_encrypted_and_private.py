"""Postgres and Redis hold tenants' data: encrypted at rest and in transit, and never reachable from the internet.

Unset means the provider's default, which for these flags is off, so each must be set explicitly.
ElastiCache has no public endpoint at all (it lives in the VPC's subnets), so for it "private" needs no
flag; RDS instances can be made public and must not be.
"""

from __future__ import annotations

from collections.abc import Iterator

from policies.rule import PolicyContext, PolicyRule, ResourceView, per_resource

RDS_CLUSTER = "aws:rds/cluster:Cluster"
RDS_CLUSTER_INSTANCE = "aws:rds/clusterInstance:ClusterInstance"
RDS_INSTANCE = "aws:rds/instance:Instance"
CACHE_REPLICATION_GROUP = "aws:elasticache/replicationGroup:ReplicationGroup"
CACHE_CLUSTER = "aws:elasticache/cluster:Cluster"

# Per type: the flags that must be true, and the flags that must not be.
MUST_BE_TRUE: dict[str, tuple[str, ...]] = {
    RDS_CLUSTER: ("storageEncrypted",),
    RDS_INSTANCE: ("storageEncrypted",),
    CACHE_REPLICATION_GROUP: ("atRestEncryptionEnabled", "transitEncryptionEnabled"),
    CACHE_CLUSTER: ("transitEncryptionEnabled",),
}
MUST_NOT_BE_TRUE: dict[str, tuple[str, ...]] = {
    RDS_CLUSTER_INSTANCE: ("publiclyAccessible",),
    RDS_INSTANCE: ("publiclyAccessible",),
}


def _is_true(value: object) -> bool:
    # Pulumi may carry booleans of nested or older inputs as strings.
    return value is True or value == "true"


def data_store_problems(resource: ResourceView, _context: PolicyContext) -> Iterator[str]:
    for flag in MUST_BE_TRUE.get(resource.type, ()):
        value = resource.inputs.get(flag)
        if not _is_true(value):
            yield f"{flag} is {'not set' if value is None else repr(value)}; it must be true"
    for flag in MUST_NOT_BE_TRUE.get(resource.type, ()):
        if _is_true(resource.inputs.get(flag)):
            yield f"{flag} is true; data stores stay inside the VPC"


RULE = PolicyRule(
    name="data-stores-encrypted-and-private",
    description=(
        "RDS clusters and instances are storage-encrypted and not publicly accessible; ElastiCache is "
        "encrypted at rest and in transit."
    ),
    enforcement="mandatory",
    check=per_resource({*MUST_BE_TRUE, *MUST_NOT_BE_TRUE}, data_store_problems),
)
