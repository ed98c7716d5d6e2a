"""The ECS pieces the control-plane and the inference service share: the endpoint in front of a service
(load balancer, its security group, listeners, WAF), and the roles and logs behind it.

An endpoint is either **internal** (an internal ALB in the private subnets, reachable from the VPC only)
or **public**, and a public one is HTTPS only: an ACM certificate from config, a TLS 1.2+ security
policy, port 80 answering with a redirect to 443, and a WAF web ACL that blocks any one IP address
sending more than its rate limit. A public endpoint without a certificate is still declared (plain HTTP),
so ``plan`` shows it and the policy pack fails it, instead of the program refusing to say what it would do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.common import child_of, named_child_of
from components.iam_policies import trust_policy
from guardrails import names, tags

HTTP_PORT = 80
HTTPS_PORT = 443
ANYWHERE = "0.0.0.0/0"
ALL_EGRESS = [{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": [ANYWHERE]}]
# TLS 1.3 and 1.2 only (AWS's recommended ALB policy).
TLS_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
LOG_RETENTION_DAYS = 30
EXECUTION_ROLE_POLICY = "arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
# WAF counts requests per IP over a five-minute window.
DEFAULT_REQUESTS_PER_IP = 2000


@dataclass(frozen=True)
class EndpointArgs:
    """How a service is reached: ``internal``, or public with an ACM certificate (HTTPS only, behind WAF)."""

    internal: bool = False
    certificate_arn: str | None = None
    requests_per_ip: int = DEFAULT_REQUESTS_PER_IP  # per five minutes, before WAF blocks the address


@dataclass(frozen=True)
class Endpoint:
    load_balancer: aws.lb.LoadBalancer
    security_group: aws.ec2.SecurityGroup
    listener: aws.lb.Listener  # the one that serves: HTTPS when there is a certificate
    url: pulumi.Output[str]


@dataclass(frozen=True)
class ServiceBasics:
    """What every service declares before its task definition: tags, roles, logs, the region."""

    tags: dict[str, str]
    region: pulumi.Output[str]
    execution_role: aws.iam.Role
    task_role: aws.iam.Role
    log_group: aws.cloudwatch.LogGroup

    def awslogs(self, service: str) -> dict[str, object]:
        return {
            "logDriver": "awslogs",
            "options": {
                "awslogs-group": self.log_group.name,
                "awslogs-region": self.region,
                "awslogs-stream-prefix": service,
            },
        }


def service_basics(
    parent: pulumi.Resource, *, stack: str, service: str, revision: str, base_tags: Mapping[str, str]
) -> ServiceBasics:
    """The preamble both services share: tags, the execution role, a task role of its own, the log group.

    The task role grants nothing: neither service calls AWS (credentials reach it through ``secrets``),
    and with IMDS one hop away from the host, a container has no other credentials to fall back on.
    """
    service_tags = {**base_tags, tags.REVISION: revision, tags.SERVICE: service}
    ecs_tasks_trust = json.dumps(trust_policy("ecs-tasks.amazonaws.com"))
    execution_role = aws.iam.Role(
        f"{service}-execution", assume_role_policy=ecs_tasks_trust, tags=service_tags, opts=child_of(parent)
    )
    # AWS's managed policy for exactly this: pull the image and write the log stream.
    aws.iam.RolePolicyAttachment(
        f"{service}-execution",
        role=execution_role.name,
        policy_arn=EXECUTION_ROLE_POLICY,
        opts=child_of(parent),
    )
    task_role = aws.iam.Role(
        f"{service}-task", assume_role_policy=ecs_tasks_trust, tags=service_tags, opts=child_of(parent)
    )
    log_group = aws.cloudwatch.LogGroup(
        f"{service}-logs",
        name=f"/ecs/{names.prefix(stack)}/{service}",
        retention_in_days=LOG_RETENTION_DAYS,
        tags=service_tags,
        opts=named_child_of(parent),
    )
    region = aws.get_region_output(opts=pulumi.InvokeOutputOptions(parent=parent)).region
    return ServiceBasics(service_tags, region, execution_role, task_role, log_group)


def health_check(path: str) -> dict[str, object]:
    return {
        "path": path,
        "protocol": "HTTP",
        "matcher": "200-399",
        "interval": 15,
        "timeout": 5,
        "healthy_threshold": 2,
        "unhealthy_threshold": 3,
    }


def scalable_resource_id(stack: str, service: aws.ecs.Service) -> pulumi.Output[str]:
    """Application Auto Scaling's id of an ECS service; the cluster is always ``names.ecs_cluster``."""
    return pulumi.Output.concat("service/", names.ecs_cluster(stack), "/", service.name)


def endpoint(
    parent: pulumi.Resource,
    *,
    stack: str,
    service: str,
    args: EndpointArgs,
    vpc_id: pulumi.Input[str],
    public_subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]],
    private_subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]],
    default_actions: Sequence[Mapping[str, object]],
    resource_tags: Mapping[str, str],
) -> Endpoint:
    """The load balancer in front of ``service``, its listeners, and (public) its web ACL."""
    https = args.certificate_arn is not None
    security_group = _load_balancer_security_group(
        parent,
        service,
        args=args,
        vpc_id=vpc_id,
        ports=[HTTP_PORT, HTTPS_PORT] if https else [HTTP_PORT],
        resource_tags=resource_tags,
    )
    load_balancer = aws.lb.LoadBalancer(
        service,
        name=names.load_balancer(stack, service),
        load_balancer_type="application",
        internal=args.internal,
        subnets=private_subnet_ids if args.internal else public_subnet_ids,
        security_groups=[security_group.id],
        drop_invalid_header_fields=True,
        tags=dict(resource_tags),
        opts=named_child_of(parent),
    )
    listener = _listeners(
        parent,
        service,
        load_balancer,
        args.certificate_arn,
        default_actions=default_actions,
        resource_tags=resource_tags,
    )
    if not args.internal:
        _rate_limited_web_acl(
            parent,
            stack,
            service=service,
            load_balancer=load_balancer,
            requests_per_ip=args.requests_per_ip,
            resource_tags=resource_tags,
        )
    scheme = "https://" if https else "http://"
    return Endpoint(
        load_balancer, security_group, listener, pulumi.Output.concat(scheme, load_balancer.dns_name)
    )


def _listeners(
    parent: pulumi.Resource,
    service: str,
    load_balancer: aws.lb.LoadBalancer,
    certificate_arn: str | None,
    *,
    default_actions: Sequence[Mapping[str, object]],
    resource_tags: Mapping[str, str],
) -> aws.lb.Listener:
    """With a certificate: HTTPS on 443 (TLS 1.2+) and 80 redirecting to it; without: HTTP on 80.

    Returns the listener that serves.
    """
    https = certificate_arn is not None
    if https:
        listener = aws.lb.Listener(
            f"{service}-https",
            load_balancer_arn=load_balancer.arn,
            port=HTTPS_PORT,
            protocol="HTTPS",
            ssl_policy=TLS_POLICY,
            certificate_arn=certificate_arn,
            default_actions=list(default_actions),
            tags=dict(resource_tags),
            opts=child_of(parent),
        )
        aws.lb.Listener(
            f"{service}-http-redirect",
            load_balancer_arn=load_balancer.arn,
            port=HTTP_PORT,
            protocol="HTTP",
            default_actions=[
                {
                    "type": "redirect",
                    "redirect": {"protocol": "HTTPS", "port": str(HTTPS_PORT), "status_code": "HTTP_301"},
                }
            ],
            tags=dict(resource_tags),
            opts=child_of(parent),
        )
    else:
        listener = aws.lb.Listener(
            service,
            load_balancer_arn=load_balancer.arn,
            port=HTTP_PORT,
            protocol="HTTP",
            default_actions=list(default_actions),
            tags=dict(resource_tags),
            opts=child_of(parent),
        )
    return listener


def _load_balancer_security_group(
    parent: pulumi.Resource,
    service: str,
    *,
    args: EndpointArgs,
    vpc_id: pulumi.Input[str],
    ports: Sequence[int],
    resource_tags: Mapping[str, str],
) -> aws.ec2.SecurityGroup:
    """Public: the listener ports from anywhere. Internal: from the VPC's own range only."""
    if args.internal:
        vpc = aws.ec2.get_vpc_output(id=vpc_id, opts=pulumi.InvokeOutputOptions(parent=parent))
        sources: pulumi.Input[str] = vpc.cidr_block
        reach = "from inside the VPC"
    else:
        sources, reach = ANYWHERE, "from anywhere"
    return aws.ec2.SecurityGroup(
        f"{service}-alb",
        description=f"{service} load balancer: ports {', '.join(map(str, ports))} {reach}",
        vpc_id=vpc_id,
        ingress=[
            {"protocol": "tcp", "from_port": port, "to_port": port, "cidr_blocks": [sources]}
            for port in ports
        ],
        egress=ALL_EGRESS,
        tags=dict(resource_tags),
        opts=child_of(parent),
    )


def _rate_limited_web_acl(
    parent: pulumi.Resource,
    stack: str,
    *,
    service: str,
    load_balancer: aws.lb.LoadBalancer,
    requests_per_ip: int,
    resource_tags: Mapping[str, str],
) -> None:
    """Allow by default; block an IP address above ``requests_per_ip`` requests in five minutes."""
    metric = f"{names.prefix(stack)}-{service}"
    web_acl = aws.wafv2.WebAcl(
        f"{service}-web-acl",
        scope="REGIONAL",
        description=f"{service}: per-IP rate limit",
        default_action={"allow": {}},
        rules=[
            {
                "name": "per-ip-rate-limit",
                "priority": 0,
                "action": {"block": {}},
                "statement": {"rate_based_statement": {"limit": requests_per_ip, "aggregate_key_type": "IP"}},
                "visibility_config": {
                    "cloudwatch_metrics_enabled": True,
                    "sampled_requests_enabled": True,
                    "metric_name": f"{metric}-rate-limit",
                },
            }
        ],
        visibility_config={
            "cloudwatch_metrics_enabled": True,
            "sampled_requests_enabled": True,
            "metric_name": metric,
        },
        tags=dict(resource_tags),
        opts=child_of(parent),
    )
    aws.wafv2.WebAclAssociation(
        f"{service}-web-acl",
        resource_arn=load_balancer.arn,
        web_acl_arn=web_acl.arn,
        opts=child_of(parent),
    )
