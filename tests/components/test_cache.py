"""Cache under the offline engine: a private, encrypted Valkey replication group."""

from __future__ import annotations

import json
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
        "tags": TAGS,
    }
    return CacheArgs(**{**fields, **overrides})


def build(args: CacheArgs) -> tuple[OfflineRun, dict[str, Any]]:
    outputs: dict[str, Any] = {}

    def program() -> None:
        cache = Cache("cache", args)
        capture({"endpoint": cache.endpoint, "port": cache.port}, into=outputs)

    return run_offline(program, stack="dev", region=REGION), outputs


INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
USER = "aws:elasticache/user:User"
USER_GROUP = "aws:elasticache/userGroup:UserGroup"
SECRET_VERSION = "aws:secretsmanager/secretVersion:SecretVersion"
PASSWORD = "random:index/randomPassword:RandomPassword"


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


def build_with_a_client(args: CacheArgs) -> OfflineRun:
    def program() -> None:
        Cache("cache", args).admit("control-plane", "sg-0client")

    return run_offline(program, stack="dev", region=REGION)


def test_cache_admits_its_clients_security_groups_on_6379_and_no_cidr() -> None:
    run = build_with_a_client(cache_args())

    group = only(run, REPLICATION_GROUP)
    access = only(run, SECURITY_GROUP)
    assert "ingress" not in access.inputs  # no inline rule, so no CIDR
    assert access.inputs["vpcId"] == "vpc-0abc"
    rule = only(run, INGRESS_RULE).inputs
    assert (rule["ipProtocol"], rule["fromPort"], rule["toPort"]) == ("tcp", 6379, 6379)
    assert rule["referencedSecurityGroupId"] == "sg-0client"
    assert "cidrIpv4" not in rule
    assert rule["securityGroupId"].rsplit("-", 1)[0] == access.name, "the mock engine's ids are <name>-<hash>"
    (security_group_id,) = group.inputs["securityGroupIds"]
    assert security_group_id.rsplit("-", 1)[0] == access.name
    assert only(run, SUBNET_GROUP).inputs["subnetIds"] == ["subnet-private-a", "subnet-private-b"]
    assert group.inputs["subnetGroupName"] == only(run, SUBNET_GROUP).name


def test_clients_authenticate_as_the_rbac_user_whose_password_is_in_a_secret() -> None:
    run, outputs = build(cache_args())

    group = only(run, REPLICATION_GROUP)
    user = only(run, USER).inputs
    users = only(run, USER_GROUP).inputs
    (user_group_id,) = group.inputs["userGroupIds"]
    assert user_group_id.rsplit("-", 1)[0] == only(run, USER_GROUP).name
    assert (user["engine"], user["userName"], user["userId"]) == ("valkey", "parkbrake", "parkbrake-dev-app")
    assert user["accessString"].startswith("on ")
    assert "-@dangerous" in user["accessString"]
    assert user["authenticationMode"]["type"] == "password"
    (password,) = user["authenticationMode"]["passwords"]
    assert users["userIds"] == ["parkbrake-dev-app"]
    assert users["engine"] == "valkey"
    # A secret input: the engine records it wrapped, with its value beside the secret marker.
    secret = json.loads(only(run, SECRET_VERSION).inputs["secretString"]["value"])
    assert secret == {
        "username": "parkbrake",
        "password": password,
        "host": "cache-replication-group.cache.amazonaws.com",
        "port": 6379,
    }
    assert outputs == {"endpoint": "cache-replication-group.cache.amazonaws.com", "port": 6379}


def test_every_cache_resource_is_a_tagged_child_of_the_component() -> None:
    run = build_with_a_client(cache_args())

    (component,) = run.of_type("parkbrake:aws:Cache")
    children = list(run.children_of(component))
    assert [child.urn for child in children] == [
        resource.urn for resource in run.resources if resource.custom
    ]
    untaggable = {PASSWORD, SECRET_VERSION}
    assert all(child.inputs["tags"] == TAGS for child in children if child.type not in untaggable)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"nodes": 0}, "at least one node"), ({"stack": "a-very-long-stack-name-for-x"}, "longer than")],
)
def test_impossible_caches_are_refused_before_anything_is_declared(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        cache_args(**overrides)
