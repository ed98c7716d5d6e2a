"""Cache under the offline engine: a private, encrypted Valkey replication group."""

from __future__ import annotations

from typing import Any

import pytest
from offline_outputs import capture

from components.cache import Cache, CacheArgs
from stacks.offline import OfflineRun, RegisteredResource, run_offline

REGION = "us-east-1"
TAGS = {"parkbrake:managed": "true", "parkbrake:stack": "dev", "parkbrake:revision": "abc123"}
REPLICATION_GROUP = "aws:elasticache/replicationGroup:ReplicationGroup"
SUBNET_GROUP = "aws:elasticache/subnetGroup:SubnetGroup"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"


def cache_args(**overrides: Any) -> CacheArgs:
    fields: dict[str, Any] = {
        "stack": "dev",
        "node_type": "cache.t4g.small",
        "nodes": 1,
        "vpc_id": "vpc-0abc",
        "subnet_ids": ["subnet-private-a", "subnet-private-b"],
        "ingress_cidr": "10.40.0.0/16",
        "tags": TAGS,
    }
    return CacheArgs(**{**fields, **overrides})


def build(args: CacheArgs) -> tuple[OfflineRun, dict[str, Any]]:
    outputs: dict[str, Any] = {}

    def program() -> None:
        cache = Cache("cache", args)
        capture({"endpoint": cache.endpoint, "port": cache.port}, into=outputs)

    return run_offline(program, stack="dev", region=REGION), outputs


def only(run: OfflineRun, type_token: str) -> RegisteredResource:
    (resource,) = run.of_type(type_token)
    return resource


def test_cache_is_encrypted_in_transit_and_at_rest() -> None:
    run, _ = build(cache_args())

    group = only(run, REPLICATION_GROUP)
    assert group.inputs["transitEncryptionEnabled"] is True
    assert group.inputs["transitEncryptionMode"] == "required"
    assert group.inputs["atRestEncryptionEnabled"] is True


def test_cache_is_valkey_of_the_configured_node_type_and_count() -> None:
    run, _ = build(cache_args(node_type="cache.r7g.large", nodes=3))

    group = only(run, REPLICATION_GROUP)
    assert group.inputs["engine"] == "valkey"
    assert group.inputs["parameterGroupName"].startswith("default.valkey")
    assert group.inputs["nodeType"] == "cache.r7g.large"
    assert group.inputs["numCacheClusters"] == 3
    assert group.inputs["replicationGroupId"] == "parkbrake-dev-cache"


@pytest.mark.parametrize(("nodes", "fails_over"), [(1, False), (2, True), (4, True)])
def test_automatic_failover_and_multi_az_need_a_replica(nodes: int, fails_over: bool) -> None:
    run, _ = build(cache_args(nodes=nodes))

    group = only(run, REPLICATION_GROUP)
    assert group.inputs["automaticFailoverEnabled"] is fails_over
    assert group.inputs["multiAzEnabled"] is fails_over


def test_cache_is_reachable_only_on_6379_from_the_vpc() -> None:
    run, outputs = build(cache_args())

    group = only(run, REPLICATION_GROUP)
    access = only(run, SECURITY_GROUP)
    assert [
        (rule["protocol"], rule["fromPort"], rule["toPort"], rule["cidrBlocks"])
        for rule in access.inputs["ingress"]
    ] == [("tcp", 6379, 6379, ["10.40.0.0/16"])]
    assert access.inputs["vpcId"] == "vpc-0abc"
    (security_group_id,) = group.inputs["securityGroupIds"]
    assert security_group_id.rsplit("-", 1)[0] == access.name, "the mock engine's ids are <name>-<hash>"
    assert only(run, SUBNET_GROUP).inputs["subnetIds"] == ["subnet-private-a", "subnet-private-b"]
    assert group.inputs["subnetGroupName"] == only(run, SUBNET_GROUP).name
    assert outputs == {"endpoint": "cache-replication-group.cache.amazonaws.com", "port": 6379}


def test_every_cache_resource_is_a_tagged_child_of_the_component() -> None:
    run, _ = build(cache_args())

    (component,) = run.of_type("parkbrake:aws:Cache")
    children = list(run.children_of(component))
    assert {child.type for child in children} == {REPLICATION_GROUP, SUBNET_GROUP, SECURITY_GROUP}
    assert [child.urn for child in children] == [
        resource.urn for resource in run.resources if resource.custom
    ]
    assert all(child.inputs["tags"] == TAGS for child in children)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"nodes": 0}, "at least one node"), ({"stack": "a-very-long-stack-name-for-x"}, "longer than")],
)
def test_impossible_caches_are_refused_before_anything_is_declared(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        cache_args(**overrides)
