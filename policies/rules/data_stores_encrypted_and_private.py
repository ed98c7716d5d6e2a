"""Postgres and Valkey hold tenants' data: encrypted at rest and in transit, authenticated, and reachable
from their clients' security groups only — never from the internet, and never from a CIDR.

Unset means the provider's default, which for these flags is off, so each must be set explicitly.
Aurora must refuse plain connections (``rds.force_ssl = 1`` in its cluster parameter group, a sibling in
its component since names are only known after deployment). ElastiCache must *require* TLS
(``preferred`` still accepts plain clients) and admit only the users of an RBAC user group (or an AUTH
token). A security group rule admitting a CIDR to the PostgreSQL or Valkey port lets every host in that
range try the door, which with an adopted VPC is somebody else's network.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from policies.resources import items, mapping, of_type, text
from policies.rule import PolicyContext, PolicyRule, ResourceView, Violation

RDS_CLUSTER = "aws:rds/cluster:Cluster"
RDS_CLUSTER_INSTANCE = "aws:rds/clusterInstance:ClusterInstance"
RDS_INSTANCE = "aws:rds/instance:Instance"
RDS_CLUSTER_PARAMETER_GROUP = "aws:rds/clusterParameterGroup:ClusterParameterGroup"
CACHE_REPLICATION_GROUP = "aws:elasticache/replicationGroup:ReplicationGroup"
CACHE_CLUSTER = "aws:elasticache/cluster:Cluster"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
LEGACY_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
DATA_PORTS = {5432: "PostgreSQL", 6379: "Valkey"}

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


def _flag_problems(resource: ResourceView) -> Iterator[str]:
    for flag in MUST_BE_TRUE.get(resource.type, ()):
        value = resource.inputs.get(flag)
        if not _is_true(value):
            yield f"{flag} is {'not set' if value is None else repr(value)}; it must be true"
    for flag in MUST_NOT_BE_TRUE.get(resource.type, ()):
        if _is_true(resource.inputs.get(flag)):
            yield f"{flag} is true; data stores stay inside the VPC"


def _cache_problems(group: ResourceView) -> Iterator[str]:
    mode = group.inputs.get("transitEncryptionMode")
    if mode is not None and mode != "required":
        yield f"transitEncryptionMode is {mode!r}; it must be 'required' (preferred still accepts plain clients)"
    if not items(group.inputs.get("userGroupIds")) and not group.inputs.get("authToken"):
        yield "no RBAC user group (userGroupIds) and no authToken: any client that reaches it may use it"


def _forces_tls(parameter_group: ResourceView) -> bool:
    return any(
        parameter.get("name") == "rds.force_ssl" and str(parameter.get("value")) == "1"
        for parameter in map(mapping, items(parameter_group.inputs.get("parameters")))
    )


def _aurora_tls_problems(cluster: ResourceView, resources: Sequence[ResourceView]) -> Iterator[str]:
    name = text(cluster.inputs.get("dbClusterParameterGroupName"))
    siblings = [
        group for group in of_type(resources, RDS_CLUSTER_PARAMETER_GROUP) if group.parent == cluster.parent
    ]
    if not name or name.startswith("default.") or not any(map(_forces_tls, siblings)):
        yield ("it accepts connections without TLS; give it a cluster parameter group with rds.force_ssl = 1")


def _ports(rule: Mapping[str, Any]) -> range:
    low, high = rule.get("fromPort", rule.get("from_port")), rule.get("toPort", rule.get("to_port"))
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return range(0)
    return range(int(low), int(high) + 1)


def _cidr_ingress_problems(resource: ResourceView) -> Iterator[str]:
    if resource.type == SECURITY_GROUP:
        rules = [mapping(rule) for rule in items(resource.inputs.get("ingress"))]
        cidr_keys: tuple[str, ...] = ("cidrBlocks", "ipv6CidrBlocks")
    elif resource.type == LEGACY_RULE and resource.inputs.get("type") != "ingress":
        return
    else:
        rules = [resource.inputs]
        cidr_keys = ("cidrIpv4", "cidrIpv6", "cidrBlocks", "ipv6CidrBlocks")
    for rule in rules:
        cidrs = [cidr for key in cidr_keys for cidr in (items(rule.get(key)) or [rule.get(key)]) if cidr]
        ports = _ports(rule)
        reached = [label for port, label in DATA_PORTS.items() if port in ports]
        if cidrs and reached:
            yield (
                f"admits {', '.join(map(str, cidrs))} to the {' and '.join(reached)} port; admit the clients' "
                "security groups instead"
            )


def data_store_problems(resources: Sequence[ResourceView], _context: PolicyContext) -> Iterator[Violation]:
    for resource in resources:
        found = list(_flag_problems(resource))
        if resource.type == CACHE_REPLICATION_GROUP:
            found += _cache_problems(resource)
        elif resource.type == RDS_CLUSTER:
            found += _aurora_tls_problems(resource, resources)
        elif resource.type in (SECURITY_GROUP, INGRESS_RULE, LEGACY_RULE):
            found += _cidr_ingress_problems(resource)
        yield from (Violation(resource.urn, message) for message in found)


RULE = PolicyRule(
    name="data-stores-encrypted-and-private",
    description=(
        "RDS is storage-encrypted, private and TLS-only (rds.force_ssl); ElastiCache is encrypted at rest and "
        "requires TLS and authentication; no security group admits a CIDR to the PostgreSQL or Valkey port."
    ),
    enforcement="mandatory",
    check=data_store_problems,
)
