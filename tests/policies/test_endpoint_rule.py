"""public-endpoints-https-behind-waf, resource by resource."""

from __future__ import annotations

from typing import Any

import pytest
from policy_resources import resource, with_inputs

from policies.engine import judge
from policies.rule import PolicyContext
from policies.rules import public_endpoints_https_behind_waf as rule
from stacks.offline import RegisteredResource

PARENT = "urn:pulumi:dev::parkbrake::parkbrake:aws:InferenceService::inference"
HTTPS = {
    "port": 443,
    "protocol": "HTTPS",
    "sslPolicy": "ELBSecurityPolicy-TLS13-1-2-2021-06",
    "certificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/abc",
    "defaultActions": [{"type": "forward"}],
}
REDIRECT = {
    "port": 80,
    "protocol": "HTTP",
    "defaultActions": [{"type": "redirect", "redirect": {"protocol": "HTTPS", "port": "443"}}],
}
RATE_RULE = {
    "action": {"block": {}},
    "statement": {"rateBasedStatement": {"limit": 1000, "aggregateKeyType": "IP"}},
}


def endpoint(**replacements: RegisteredResource | None) -> list[RegisteredResource]:
    parts: dict[str, RegisteredResource | None] = {
        "alb": resource(rule.LOAD_BALANCER, "inference", {"internal": False}, PARENT),
        "https": resource(rule.LISTENER, "inference-https", HTTPS, PARENT),
        "redirect": resource(rule.LISTENER, "inference-http-redirect", REDIRECT, PARENT),
        "acl": resource(rule.WEB_ACL, "inference-web-acl", {"rules": [RATE_RULE]}, PARENT),
        "association": resource(rule.WEB_ACL_ASSOCIATION, "inference-web-acl", {}, PARENT),
    }
    parts.update(replacements)
    return [part for part in parts.values() if part is not None]


def messages(resources: list[RegisteredResource]) -> list[str]:
    return [violation.message for violation in judge(rule.RULE, resources, PolicyContext()).violations]


def test_https_with_a_redirect_behind_a_rate_limit_passes() -> None:
    assert messages(endpoint()) == []


def test_an_internal_load_balancer_needs_neither() -> None:
    internal = resource(rule.LOAD_BALANCER, "inference", {"internal": True}, PARENT)
    plain = resource(
        rule.LISTENER, "inference", {**REDIRECT, "defaultActions": [{"type": "forward"}]}, PARENT
    )

    assert messages(endpoint(alb=internal, https=plain, redirect=None, acl=None, association=None)) == []


@pytest.mark.parametrize(
    ("part", "change", "expected"),
    [
        ("https", {"sslPolicy": "ELBSecurityPolicy-2016-08"}, "allows TLS below 1.2"),
        ("https", {"certificateArn": None}, "has no certificateArn"),
        (
            "redirect",
            {"defaultActions": [{"type": "forward"}]},
            "listener on port 80 serves traffic in the clear",
        ),
        ("acl", {"rules": [{**RATE_RULE, "action": {"count": {}}}]}, "no WAF web ACL blocking an IP"),
        ("acl", {"rules": []}, "no WAF web ACL blocking an IP"),
    ],
)
def test_each_weakness_is_a_violation(part: str, change: dict[str, Any], expected: str) -> None:
    name = {"https": "inference-https", "redirect": "inference-http-redirect", "acl": "inference-web-acl"}[
        part
    ]
    typed = next(item for item in endpoint() if item.name == name and item.type != rule.WEB_ACL_ASSOCIATION)
    found = messages(endpoint(**{part: with_inputs(typed, **change)}))

    assert len(found) == 1, found
    assert expected in found[0]


def test_an_unassociated_web_acl_protects_nothing() -> None:
    (found,) = messages(endpoint(association=None))
    assert "no WAF web ACL" in found
