"""Every IAM grant to stop or terminate a host is limited to managed hosts, by exactly one condition.

The guardrails need ``ec2:StopInstances``/``TerminateInstances`` and
``autoscaling:TerminateInstanceInAutoScalingGroup``, but only on hosts (and groups) tagged
``parkbrake:managed=true``. So every ``Allow`` statement granting one of them must carry
``"StringEquals": {"aws:ResourceTag/parkbrake:managed": "true"}``: any other operator
(``StringNotEquals``, ``StringLike``, ``…IfExists``, ``Null``), any other key (another tag, the ``ec2:``
prefix) or another value is a violation, since each of them lets the grant reach hosts that are not
managed. Further conditions are allowed: they are ANDed, so they only narrow the grant. Wildcards
count (``ec2:*``, ``ec2:Stop*``, ``*``), as do ``NotAction`` statements that leave those actions in, and
attachments of AWS-managed policies known to grant them on ``*``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from guardrails import tags
from policies.resources import items, mapping, text
from policies.rule import PolicyContext, PolicyRule, ResourceView, per_resource

GROUP_ACTION = "autoscaling:TerminateInstanceInAutoScalingGroup"
STOP_ACTIONS = ("ec2:StopInstances", "ec2:TerminateInstances", GROUP_ACTION)
# Two instance ids with nothing in common past ``i-``: a pattern matching both matches every instance.
PROBE_INSTANCE_IDS = ("i-0123456789abcdef0", "i-fedcba98765432100")
REQUIRED_OPERATOR = "StringEquals"
REQUIRED_KEY = f"aws:ResourceTag/{tags.MANAGED}"
REQUIRED_VALUE = "true"
# AWS-managed policies that allow both actions on "*".
BROAD_MANAGED_POLICIES = frozenset({"AdministratorAccess", "PowerUserAccess", "AmazonEC2FullAccess"})

POLICY_DOCUMENT_TYPES = (
    "aws:iam/policy:Policy",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/userPolicy:UserPolicy",
    "aws:iam/groupPolicy:GroupPolicy",
)
ROLE = "aws:iam/role:Role"
ATTACHMENT_TYPES = (
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:iam/userPolicyAttachment:UserPolicyAttachment",
    "aws:iam/groupPolicyAttachment:GroupPolicyAttachment",
    "aws:iam/policyAttachment:PolicyAttachment",
)


@cache
def _wildcard(pattern: str) -> re.Pattern[str]:
    """IAM's ``*`` and ``?`` wildcards; action names are case-insensitive."""
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.IGNORECASE
    )


def _matches_any(patterns: list[str], value: str) -> bool:
    return any(_wildcard(pattern).fullmatch(value) for pattern in patterns)


def _strings(value: object) -> list[str]:
    """IAM's "one string or a list of strings"."""
    return [value] if isinstance(value, str) else [entry for entry in items(value) if isinstance(entry, str)]


def stop_actions_allowed(statement: Mapping[str, Any]) -> list[str]:
    if statement.get("Effect") != "Allow":
        return []
    if "NotAction" in statement:
        excluded = _strings(statement["NotAction"])
        return [action for action in STOP_ACTIONS if not _matches_any(excluded, action)]
    granted = _strings(statement.get("Action"))
    return [action for action in STOP_ACTIONS if _matches_any(granted, action)]


def _pattern_covers_every_instance(pattern: str) -> bool:
    fields = pattern.split(":", 5)
    if len(fields) == 6:
        # Partition, region and account do not matter: the stack's own account is where the harm is.
        arn, _partition, service, _region, _account, resource = fields
        return (
            _matches_any([arn], "arn")
            and _matches_any([service], "ec2")
            and all(_matches_any([resource], f"instance/{instance}") for instance in PROBE_INSTANCE_IDS)
        )
    return all(
        _matches_any([pattern], f"arn:aws:ec2:us-east-1:111111111111:instance/{instance}")
        for instance in PROBE_INSTANCE_IDS
    )


def excludes_every_instance(statement: Mapping[str, Any]) -> bool:
    """A ``NotResource`` statement whose exclusions cover every instance cannot stop one."""
    return "NotResource" in statement and any(
        map(_pattern_covers_every_instance, _strings(statement["NotResource"]))
    )


def limited_to_managed_hosts(statement: Mapping[str, Any]) -> bool:
    """True when the statement carries exactly ``StringEquals aws:ResourceTag/parkbrake:managed = "true"``."""
    clause = mapping(mapping(statement.get("Condition")).get(REQUIRED_OPERATOR))
    values = [value for key, value in clause.items() if str(key).lower() == REQUIRED_KEY.lower()]
    return len(values) == 1 and _strings(values[0]) == [REQUIRED_VALUE]


def document_problems(document: object, where: str) -> Iterator[str]:
    """Every stop grant in one policy document (a JSON string, or already a mapping) not limited to managed hosts."""
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            yield f"{where} is not valid JSON, so it cannot be shown to be safe"
            return
    statements = mapping(document).get("Statement")
    for index, raw in enumerate(items(statements) or [statements]):
        statement = mapping(raw)
        actions = stop_actions_allowed(statement)
        # An EC2-only grant whose NotResource leaves out every instance reaches no host.
        reaches_hosts = bool(actions) and not (
            excludes_every_instance(statement) and GROUP_ACTION not in actions
        )
        if reaches_hosts and not limited_to_managed_hosts(statement):
            label = text(statement.get("Sid")) or f"#{index}"
            yield (
                f"{where} statement {label} allows {', '.join(actions)} without exactly the condition "
                f'{REQUIRED_OPERATOR} {REQUIRED_KEY} = "{REQUIRED_VALUE}"; any other operator, key or '
                "value reaches hosts that are not managed"
            )


def _managed_policy_problems(arns: object) -> Iterator[str]:
    for arn in _strings(arns):
        if (
            arn.startswith("arn:")
            and ":iam::aws:policy/" in arn
            and arn.rsplit("/", 1)[-1] in BROAD_MANAGED_POLICIES
        ):
            yield f"attaches {arn}, which allows {', '.join(STOP_ACTIONS)} on every instance"


def iam_problems(resource: ResourceView, _context: PolicyContext) -> Iterator[str]:
    inputs = resource.inputs
    if resource.type in POLICY_DOCUMENT_TYPES:
        yield from document_problems(inputs.get("policy"), "the policy")
    elif resource.type == ROLE:
        for inline in map(mapping, items(inputs.get("inlinePolicies"))):
            yield from document_problems(
                inline.get("policy"), f"inline policy {inline.get('name', '')!s}".strip()
            )
        yield from _managed_policy_problems(inputs.get("managedPolicyArns"))
    elif resource.type in ATTACHMENT_TYPES:
        yield from _managed_policy_problems(inputs.get("policyArn"))


RULE = PolicyRule(
    name="no-unconditional-stop",
    description=(
        "Every IAM statement allowing ec2:StopInstances, ec2:TerminateInstances or "
        "autoscaling:TerminateInstanceInAutoScalingGroup (wildcards included) carries exactly StringEquals "
        'aws:ResourceTag/parkbrake:managed = "true".'
    ),
    enforcement="mandatory",
    check=per_resource((*POLICY_DOCUMENT_TYPES, ROLE, *ATTACHMENT_TYPES), iam_problems),
)
