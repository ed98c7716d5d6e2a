"""A load balancer reachable from the internet serves HTTPS only, with TLS 1.2 or later, behind a WAF
web ACL that rate-limits each client IP; anything else must be declared ``internal``.

The inference endpoint runs GPUs on every request: open over plain HTTP, or without a per-IP limit, it is
a cost risk as much as a security one. A listener belongs to the load balancer of the same component
(its ARN is only known after deployment), and so does a web ACL and its association.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.resources import items, mapping, of_type, text
from policies.rule import PolicyContext, PolicyRule, ResourceView, Violation

LOAD_BALANCER = "aws:lb/loadBalancer:LoadBalancer"
LISTENER = "aws:lb/listener:Listener"
WEB_ACL = "aws:wafv2/webAcl:WebAcl"
WEB_ACL_ASSOCIATION = "aws:wafv2/webAclAssociation:WebAclAssociation"
# ALB security policies that refuse TLS 1.0 and 1.1.
TLS_1_2_POLICIES = frozenset({
    "ELBSecurityPolicy-TLS13-1-2-2021-06",
    "ELBSecurityPolicy-TLS13-1-2-Res-2021-06",
    "ELBSecurityPolicy-TLS13-1-2-Ext1-2021-06",
    "ELBSecurityPolicy-TLS13-1-2-Ext2-2021-06",
    "ELBSecurityPolicy-TLS13-1-3-2021-06",
    "ELBSecurityPolicy-TLS-1-2-2017-01",
    "ELBSecurityPolicy-TLS-1-2-Ext-2018-06",
    "ELBSecurityPolicy-FS-1-2-2019-08",
    "ELBSecurityPolicy-FS-1-2-Res-2019-08",
    "ELBSecurityPolicy-FS-1-2-Res-2020-10",
})  # fmt: skip


def _siblings(resources: Sequence[ResourceView], of: ResourceView, type_token: str) -> list[ResourceView]:
    return [resource for resource in of_type(resources, type_token) if resource.parent == of.parent]


def _listener_problems(listener: ResourceView) -> Iterator[str]:
    inputs = listener.inputs
    protocol = text(inputs.get("protocol")) or "HTTP"
    if protocol == "HTTPS":
        if text(inputs.get("sslPolicy")) not in TLS_1_2_POLICIES:
            yield f"its HTTPS listener's sslPolicy {inputs.get('sslPolicy')!r} allows TLS below 1.2"
        if not inputs.get("certificateArn"):
            yield "its HTTPS listener has no certificateArn"
        return
    actions = [mapping(action) for action in items(inputs.get("defaultActions"))]
    redirects = all(
        action.get("type") == "redirect" and mapping(action.get("redirect")).get("protocol") == "HTTPS"
        for action in actions
    )
    if not actions or not redirects:
        port = inputs.get("port")
        port_text = f"{port:g}" if isinstance(port, int | float) else repr(port)
        yield (
            f"its {protocol} listener on port {port_text} serves traffic in the clear; serve HTTPS "
            "(set certificate_arn) and redirect HTTP to it, or declare the endpoint internal"
        )


def _rate_limited(acl: ResourceView) -> bool:
    for rule in map(mapping, items(acl.inputs.get("rules"))):
        statement = mapping(mapping(rule.get("statement")).get("rateBasedStatement"))
        if statement.get("aggregateKeyType") == "IP" and "block" in mapping(rule.get("action")):
            return True
    return False


def endpoint_problems(resources: Sequence[ResourceView], _context: PolicyContext) -> Iterator[Violation]:
    for load_balancer in of_type(resources, LOAD_BALANCER):
        if load_balancer.inputs.get("internal") is True:
            continue
        for listener in _siblings(resources, load_balancer, LISTENER):
            for problem in _listener_problems(listener):
                yield Violation(load_balancer.urn, f"public load balancer {load_balancer.name}: {problem}")
        acls = _siblings(resources, load_balancer, WEB_ACL)
        if not _siblings(resources, load_balancer, WEB_ACL_ASSOCIATION) or not any(map(_rate_limited, acls)):
            yield Violation(
                load_balancer.urn,
                f"public load balancer {load_balancer.name} has no WAF web ACL blocking an IP over a rate "
                "limit; a public endpoint needs one (requests_per_ip), or declare it internal",
            )


RULE = PolicyRule(
    name="public-endpoints-https-behind-waf",
    description=(
        "Every internet-facing load balancer serves HTTPS only (TLS 1.2+, HTTP redirected) behind a WAF web "
        "ACL with a per-IP rate limit; otherwise it is declared internal."
    ),
    enforcement="mandatory",
    check=endpoint_problems,
)
