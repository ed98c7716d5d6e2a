"""Database and Cache admit clients by security group, one ingress rule per client, never a CIDR."""

from __future__ import annotations

from typing import Any

import pytest

from components.cache import Cache, CacheArgs
from components.database import Database, DatabaseArgs
from stacks.offline import run_offline

INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
COMMON: dict[str, Any] = {"stack": "dev", "vpc_id": "vpc-0abc", "subnet_ids": ["subnet-a", "subnet-b"]}


def database() -> Database:
    return Database("database", DatabaseArgs(min_acu=0.5, max_acu=4, storage_gb=20, parked=False, **COMMON))


def cache() -> Cache:
    return Cache("cache", CacheArgs(node_type="cache.t4g.small", nodes=1, **COMMON))


@pytest.mark.parametrize(("make", "port"), [(database, 5432), (cache, 6379)])
def test_each_client_gets_one_rule_on_the_store_port_from_its_security_group(make: Any, port: int) -> None:
    def program() -> None:
        store = make()
        store.admit("control-plane", "sg-0control")
        store.admit("guardrails", "sg-0lambdas")

    run = run_offline(program, stack="dev", region="us-east-1")

    (access,) = run.of_type(SECURITY_GROUP)
    assert "ingress" not in access.inputs
    assert "port" in access.inputs["description"]
    rules = {rule.name: rule.inputs for rule in run.of_type(INGRESS_RULE)}
    name = access.name.removesuffix("-access")
    assert set(rules) == {f"{name}-from-control-plane", f"{name}-from-guardrails"}
    for client, security_group in (("control-plane", "sg-0control"), ("guardrails", "sg-0lambdas")):
        rule = rules[f"{name}-from-{client}"]
        assert (rule["ipProtocol"], rule["fromPort"], rule["toPort"]) == ("tcp", port, port)
        assert rule["referencedSecurityGroupId"] == security_group
        assert not {"cidrIpv4", "cidrIpv6", "prefixListId"} & set(rule)
        assert rule["securityGroupId"].rsplit("-", 1)[0] == access.name
