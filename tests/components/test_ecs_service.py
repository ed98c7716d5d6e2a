"""The endpoint in front of a service: public means HTTPS only behind a rate-limiting WAF; or internal."""

from __future__ import annotations

from typing import Any

import pytest

from components.control_plane_service import ControlPlaneService, ControlPlaneServiceArgs
from components.ecs_service import TLS_POLICY, EndpointArgs
from guardrails.capacity import Capacity
from stacks.offline import MOCK_VPC_CIDR, OfflineRun, RegisteredResource, run_offline

LOAD_BALANCER = "aws:lb/loadBalancer:LoadBalancer"
LISTENER = "aws:lb/listener:Listener"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
WEB_ACL = "aws:wafv2/webAcl:WebAcl"
WEB_ACL_ASSOCIATION = "aws:wafv2/webAclAssociation:WebAclAssociation"
CERTIFICATE = "arn:aws:acm:us-east-1:123456789012:certificate/0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"


def build(endpoint: EndpointArgs) -> OfflineRun:
    args: dict[str, Any] = {
        "stack": "dev",
        "image": "ghcr.io/acme/control-plane:1.4.2",
        "cpu": 512,
        "memory": 1024,
        "capacity": Capacity(min=1, desired=1, max=2),
        "health_path": "/healthz",
        "port": 8080,
        "revision": "3f9c2ab",
        "cluster_arn": "arn:aws:ecs:us-east-1:123456789012:cluster/parkbrake-dev",
        "vpc_id": "vpc-0abc",
        "public_subnet_ids": ["subnet-public-a", "subnet-public-b"],
        "private_subnet_ids": ["subnet-private-a", "subnet-private-b"],
        "database_endpoint": None,
        "database_secret_arn": None,
        "cache_endpoint": None,
        "tags": {"parkbrake:managed": "true"},
        "endpoint": endpoint,
    }
    return run_offline(
        lambda: ControlPlaneService("control-plane", ControlPlaneServiceArgs(**args)),
        stack="dev",
        region="us-east-1",
    )


def listeners(run: OfflineRun) -> dict[int, dict[str, Any]]:
    return {int(listener.inputs["port"]): listener.inputs for listener in run.of_type(LISTENER)}


def alb_ingress(run: OfflineRun) -> list[tuple[int, list[str]]]:
    group = run.named(SECURITY_GROUP, "control-plane-alb").inputs
    return [(rule["fromPort"], rule["cidrBlocks"]) for rule in group["ingress"]]


def only(run: OfflineRun, type_token: str) -> RegisteredResource:
    (resource,) = run.of_type(type_token)
    return resource


def test_a_public_endpoint_serves_https_with_tls_1_2_and_redirects_http() -> None:
    run = build(EndpointArgs(certificate_arn=CERTIFICATE))

    assert only(run, LOAD_BALANCER).inputs["internal"] is False
    by_port = listeners(run)
    assert set(by_port) == {80, 443}
    https = by_port[443]
    assert (https["protocol"], https["sslPolicy"], https["certificateArn"]) == (
        "HTTPS",
        TLS_POLICY,
        CERTIFICATE,
    )
    assert https["defaultActions"][0]["type"] == "forward"
    (redirect,) = by_port[80]["defaultActions"]
    assert redirect["type"] == "redirect"
    assert redirect["redirect"] == {"protocol": "HTTPS", "port": "443", "statusCode": "HTTP_301"}
    assert alb_ingress(run) == [(80, ["0.0.0.0/0"]), (443, ["0.0.0.0/0"])]


@pytest.mark.parametrize("limit", [100, 2000])
def test_a_public_endpoint_sits_behind_a_web_acl_blocking_any_ip_over_its_rate(limit: int) -> None:
    run = build(EndpointArgs(certificate_arn=CERTIFICATE, requests_per_ip=limit))

    acl = only(run, WEB_ACL).inputs
    assert acl["scope"] == "REGIONAL"
    assert acl["defaultAction"] == {"allow": {}}
    (rule,) = acl["rules"]
    assert rule["action"] == {"block": {}}
    assert rule["statement"]["rateBasedStatement"] == {"limit": limit, "aggregateKeyType": "IP"}
    association = only(run, WEB_ACL_ASSOCIATION).inputs
    assert association["resourceArn"].endswith(":control-plane")  # the mock engine's ALB ARN
    assert association["webAclArn"].endswith(":control-plane-web-acl")


def test_an_internal_endpoint_is_an_internal_alb_reachable_from_the_vpc_only() -> None:
    run = build(EndpointArgs(internal=True))

    load_balancer = only(run, LOAD_BALANCER).inputs
    assert load_balancer["internal"] is True
    assert load_balancer["subnets"] == ["subnet-private-a", "subnet-private-b"]
    assert alb_ingress(run) == [(80, [MOCK_VPC_CIDR])]
    assert run.of_type(WEB_ACL) == []


def test_a_public_endpoint_without_a_certificate_is_declared_as_it_is_for_the_pack_to_refuse() -> None:
    run = build(EndpointArgs())

    assert set(listeners(run)) == {80}
    assert listeners(run)[80]["protocol"] == "HTTP"
    assert only(run, LOAD_BALANCER).inputs["internal"] is False
