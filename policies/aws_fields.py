"""AWS's documented character sets and lengths for the names, descriptions and tag values a stack declares.

The mock engine accepts any string; AWS refuses some at ``pulumi up`` time (an apostrophe in a security
group description, a load balancer name of 33 characters). One table, by resource type and input path,
so ``plan`` catches them first. ``*`` in a path stands for every item of a list.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Field:
    """What AWS accepts in one field: a length range and a pattern the whole value must match."""

    what: str  # e.g. "an EC2 security group description"
    max_length: int
    pattern: re.Pattern[str]
    allowed: str  # the character set in words, for the message
    min_length: int = 1


def _field(what: str, max_length: int, pattern: str, allowed: str, min_length: int = 1) -> Field:
    return Field(what, max_length, re.compile(pattern), allowed, min_length)


# EC2: security group names and descriptions, and the descriptions of their rules.
EC2_TEXT = r"[a-zA-Z0-9. _\-:/()#,@\[\]+=&;{}!$*]*"
EC2_TEXT_ALLOWED = "letters, digits, spaces and ._-:/()#,@[]+=&;{}!$*"
# Tags, as AWS's tagging guide allows them across services.
TAG_TEXT = r"[\w\s.:/=+\-@]*"
TAG_TEXT_ALLOWED = "letters, digits, spaces and _.:/=+-@"
ALNUM_HYPHEN = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
RDS_IDENTIFIER = r"[a-zA-Z](?!.*--)[a-zA-Z0-9-]*(?<!-)"
PRINTABLE = r"[\t\n\r\x20-\x7e\u00a1-\u00ff]*"

TAG_KEY = _field("a tag key", 128, TAG_TEXT, TAG_TEXT_ALLOWED)
TAG_VALUE = _field("a tag value", 256, TAG_TEXT, TAG_TEXT_ALLOWED, min_length=0)

SECURITY_GROUP_DESCRIPTION = _field("an EC2 security group description", 255, EC2_TEXT, EC2_TEXT_ALLOWED)
SECURITY_GROUP_RULE_DESCRIPTION = _field(
    "an EC2 security group rule description", 255, EC2_TEXT, EC2_TEXT_ALLOWED, min_length=0
)

FIELDS: dict[str, dict[str, Field]] = {
    "aws:ec2/securityGroup:SecurityGroup": {
        "name": _field("an EC2 security group name", 255, EC2_TEXT, EC2_TEXT_ALLOWED),
        "description": SECURITY_GROUP_DESCRIPTION,
        "ingress.*.description": SECURITY_GROUP_RULE_DESCRIPTION,
        "egress.*.description": SECURITY_GROUP_RULE_DESCRIPTION,
    },
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": {
        "description": SECURITY_GROUP_RULE_DESCRIPTION
    },
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": {
        "description": SECURITY_GROUP_RULE_DESCRIPTION
    },
    "aws:ec2/launchTemplate:LaunchTemplate": {
        "description": _field(
            "a launch template version description", 255, PRINTABLE, "printable characters"
        ),
    },
    "aws:autoscaling/group:Group": {
        "name": _field("an Auto Scaling group name", 255, r"[^:]*", "any character but ':'"),
    },
    "aws:lb/loadBalancer:LoadBalancer": {
        "name": _field("a load balancer name", 32, ALNUM_HYPHEN, "letters, digits and inner hyphens"),
    },
    "aws:lb/targetGroup:TargetGroup": {
        "name": _field("a target group name", 32, ALNUM_HYPHEN, "letters, digits and inner hyphens"),
    },
    "aws:lambda/function:Function": {
        "name": _field("a Lambda function name", 64, r"[a-zA-Z0-9_-]+", "letters, digits, - and _"),
        "handler": _field("a Lambda handler", 128, r"[^\s]+", "no whitespace"),
    },
    "aws:iam/role:Role": {
        "name": _field("an IAM role name", 64, r"[\w+=,.@-]+", "letters, digits and +=,.@_-"),
        "description": _field("an IAM role description", 1000, PRINTABLE, "printable characters"),
    },
    "aws:cloudwatch/logGroup:LogGroup": {
        "name": _field("a log group name", 512, r"[.\-_/#A-Za-z0-9]+", "letters, digits and ._-/#"),
    },
    "aws:cloudwatch/eventBus:EventBus": {
        "name": _field(
            "an EventBridge event bus name", 256, r"[/.\-_A-Za-z0-9]+", "letters, digits and /._-"
        ),
    },
    "aws:cloudwatch/eventRule:EventRule": {
        "name": _field("an EventBridge rule name", 64, r"[.\-_A-Za-z0-9]+", "letters, digits and ._-"),
        "description": _field("an EventBridge rule description", 512, r".*", "any characters"),
    },
    "aws:cloudwatch/metricAlarm:MetricAlarm": {
        "name": _field("a CloudWatch alarm name", 255, PRINTABLE, "printable characters"),
        "alarmDescription": _field("a CloudWatch alarm description", 1024, r"(?s).*", "any characters", 0),
    },
    "aws:scheduler/schedule:Schedule": {
        "name": _field("a Scheduler schedule name", 64, r"[0-9a-zA-Z\-_.]+", "letters, digits and -_."),
        "groupName": _field("a Scheduler group name", 64, r"[0-9a-zA-Z\-_.]+", "letters, digits and -_."),
        "description": _field("a Scheduler schedule description", 512, r"(?s).*", "any characters", 0),
    },
    "aws:scheduler/scheduleGroup:ScheduleGroup": {
        "name": _field("a Scheduler group name", 64, r"[0-9a-zA-Z\-_.]+", "letters, digits and -_."),
    },
    "aws:sns/topic:Topic": {
        "name": _field("an SNS topic name", 256, r"[A-Za-z0-9_-]+", "letters, digits, - and _"),
    },
    "aws:ssm/parameter:Parameter": {
        "name": _field("an SSM parameter name", 2048, r"[a-zA-Z0-9_.\-/]+", "letters, digits and _.-/"),
        "description": _field("an SSM parameter description", 1024, r"(?s).*", "any characters", 0),
    },
    "aws:ecs/cluster:Cluster": {
        "name": _field("an ECS cluster name", 255, r"[a-zA-Z0-9_-]+", "letters, digits, - and _"),
    },
    "aws:ecs/service:Service": {
        "name": _field("an ECS service name", 255, r"[a-zA-Z0-9_-]+", "letters, digits, - and _"),
    },
    "aws:ecs/taskDefinition:TaskDefinition": {
        "family": _field("an ECS task definition family", 255, r"[a-zA-Z0-9_-]+", "letters, digits, - and _"),
    },
    "aws:ecs/capacityProvider:CapacityProvider": {
        "name": _field(
            "an ECS capacity provider name",
            255,
            r"(?!aws|ecs|fargate)[a-zA-Z0-9_-]+",
            "letters, digits, - and _, not starting with aws, ecs or fargate",
        ),
    },
    "aws:rds/cluster:Cluster": {
        "clusterIdentifier": _field(
            "an RDS cluster identifier",
            63,
            RDS_IDENTIFIER,
            "a letter, then letters, digits and single inner hyphens",
        ),
        "finalSnapshotIdentifier": _field(
            "an RDS snapshot identifier",
            255,
            RDS_IDENTIFIER,
            "a letter, then letters, digits and single inner hyphens",
        ),
    },
    "aws:rds/clusterInstance:ClusterInstance": {
        "identifier": _field(
            "an RDS instance identifier",
            63,
            RDS_IDENTIFIER,
            "a letter, then letters, digits and single inner hyphens",
        ),
    },
    "aws:elasticache/replicationGroup:ReplicationGroup": {
        "replicationGroupId": _field(
            "an ElastiCache replication group id",
            40,
            r"[a-zA-Z](?!.*--)[a-zA-Z0-9-]*(?<!-)",
            "a letter, then letters, digits and single inner hyphens",
        ),
    },
    "aws:elasticache/user:User": {
        "userId": _field(
            "an ElastiCache user id", 40, r"[a-zA-Z][a-zA-Z0-9-]*", "a letter, then letters, digits, -"
        ),
        "userName": _field("an ElastiCache user name", 120, r"[^\s]+", "no whitespace"),
    },
    "aws:elasticache/userGroup:UserGroup": {
        "userGroupId": _field(
            "an ElastiCache user group id", 40, r"[a-zA-Z][a-zA-Z0-9-]*", "a letter, then letters, digits, -"
        ),
    },
    "aws:wafv2/webAcl:WebAcl": {
        "description": _field(
            "a WAF web ACL description",
            256,
            r"[\w+=:#@/\-,.][\w+=:#@/\-,.\s]*[\w+=:#@/\-,.]",
            "letters, digits, spaces and +=:#@/-,.",
        ),
        "visibilityConfig.metricName": _field(
            "a WAF metric name", 128, r"[\w#:.\-/]+", "letters, digits and _#:.-/"
        ),
        "rules.*.visibilityConfig.metricName": _field(
            "a WAF metric name", 128, r"[\w#:.\-/]+", "letters, digits and _#:.-/"
        ),
    },
}


def values_at(inputs: Mapping[str, Any], path: str) -> Iterator[tuple[str, object]]:
    """Each value at ``path`` (``*`` fans out over a list), with its concrete path."""
    head, _, rest = path.partition(".")
    if head == "*":
        raise ValueError(f"a path starts with a field name, not '*': {path}")
    value = inputs.get(head)
    if not rest:
        yield head, value
        return
    if rest.startswith("*"):
        remainder = rest[2:]
        if isinstance(value, list | tuple):
            for index, item in enumerate(value):
                if isinstance(item, Mapping):
                    for found_path, found in values_at(item, remainder):
                        yield f"{head}[{index}].{found_path}", found
        return
    if isinstance(value, Mapping):
        for found_path, found in values_at(value, rest):
            yield f"{head}.{found_path}", found


def problem(field: Field, value: str) -> str | None:
    """Why AWS would refuse ``value`` in ``field``, or None. Unknown values (not strings) are not judged."""
    if not field.min_length <= len(value) <= field.max_length:
        return (
            f"{value!r} is {len(value)} characters; {field.what} takes {field.min_length}–{field.max_length}"
        )
    if field.pattern.fullmatch(value) is None:
        # For a plain character class, name the characters it refuses.
        plain_class = re.fullmatch(r"(\[[^\]]*(?:\\\][^\]]*)*\])[*+]", field.pattern.pattern)
        refused = (
            sorted({char for char in value if re.fullmatch(plain_class.group(1), char) is None})
            if plain_class
            else []
        )
        shown = f" (refused: {''.join(refused)!r})" if refused else ""
        return f"{value!r} is not accepted as {field.what}{shown}; allowed: {field.allowed}"
    return None
