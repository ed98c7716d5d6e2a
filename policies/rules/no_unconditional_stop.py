"""No IAM policy in the stack may stop or terminate every instance in the account.

The guardrails need ``ec2:StopInstances``/``TerminateInstances``, but only on hosts tagged
``parkbrake:managed=true``; a grant on ``*`` without a resource-tag condition would let a bug in a
guardrail stop somebody else's database host. Wildcards count (``ec2:*``, ``ec2:Stop*``, ``*``), as do
``NotAction``/``NotResource`` statements that leave those actions or all instances in, and attachments of
AWS-managed policies known to grant them on ``*``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from policies.resources import items, mapping, text
from policies.rule import PolicyContext, PolicyRule, ResourceView, per_resource

STOP_ACTIONS = ("ec2:StopInstances", "ec2:TerminateInstances")
# Two instance ids with nothing in common past ``i-``: a pattern matching both matches every instance.
PROBE_INSTANCE_IDS = ("i-0123456789abcdef0", "i-fedcba98765432100")
TAG_CONDITION_KEYS = ("aws:resourcetag/", "ec2:resourcetag/")
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


def covers_every_instance(statement: Mapping[str, Any]) -> bool:
    if "NotResource" in statement:
        # Everything but the listed resources: every instance unless the list itself covers them all.
        return not any(map(_pattern_covers_every_instance, _strings(statement["NotResource"])))
    return any(map(_pattern_covers_every_instance, _strings(statement.get("Resource"))))


def has_tag_condition(statement: Mapping[str, Any]) -> bool:
    return any(
        str(key).lower().startswith(TAG_CONDITION_KEYS)
        for clause in mapping(statement.get("Condition")).values()
        for key in mapping(clause)
    )


def document_problems(document: object, where: str) -> Iterator[str]:
    """Every unconditional stop grant in one policy document (a JSON string, or already a mapping)."""
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
        if actions and covers_every_instance(statement) and not has_tag_condition(statement):
            label = text(statement.get("Sid")) or f"#{index}"
            yield (
                f"{where} statement {label} allows {', '.join(actions)} on every instance without a tag "
                "condition; add a Condition on aws:ResourceTag/parkbrake:managed"
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
        "No IAM statement allows ec2:StopInstances or ec2:TerminateInstances (wildcards included) on every "
        "instance without a resource-tag condition."
    ),
    enforcement="mandatory",
    check=per_resource((*POLICY_DOCUMENT_TYPES, ROLE, *ATTACHMENT_TYPES), iam_problems),
)
