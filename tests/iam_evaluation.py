"""A fake of IAM's policy evaluation for the tests, named as one: it decides a request against policy
documents by AWS's documented rules, each rule below with the page of the IAM User Guide it follows.

Why a fake: moto (5.2.6, the version pinned here) has no ``SimulatePrincipalPolicy``, and its own access
control evaluates no condition key but ``sts:ExternalId`` (``moto/iam/access_control.py``,
``IAMPolicyStatement._check_conditions``; ``moto/iam/utils.py``, ``format_incoming_conditional_values``),
so it cannot tell whether a ``aws:ResourceTag/parkbrake:stack`` condition holds. Only what the stack's
policies use is implemented; anything else raises rather than guessing.

Rules (https://docs.aws.amazon.com/IAM/latest/UserGuide/…):
- reference_policies_evaluation-logic.html: an explicit ``Deny`` in any applicable policy wins; else an
  ``Allow`` in an identity-based policy or (same account) a resource-based policy allows; else the request
  is implicitly denied.
- reference_policies_elements_action.html, reference_policies_elements_resource.html: ``*`` and ``?``
  wildcards; action names are case-insensitive, ARNs case-sensitive, matched part by part between colons
  (the ARN operators' rule too, reference_policies_elements_condition_operators.html#Conditions_ARN).
- reference_policies_elements_condition_operators.html: a key absent from the request makes a condition
  false, except a negated operator (true), ``...IfExists`` (true) and ``Null`` (``"true"``: the key is absent).
- reference_policies_multi-value-conditions.html: operators AND, keys within one operator AND, values of
  one key OR (NOR for a negated operator); ``ForAllValues`` holds when every request value matches (and
  for an absent key), ``ForAnyValue`` when one does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

Decision = Literal["Allow", "Deny", "ImplicitDeny"]
STRING_OPERATORS = {"StringEquals", "StringNotEquals", "StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase",
                    "StringLike", "StringNotLike", "ArnEquals", "ArnNotEquals", "ArnLike", "ArnNotLike", "Bool"}  # fmt: skip


@dataclass(frozen=True)
class Request:
    """One API call as IAM sees it: who, what, on which resource, and the request context's keys."""

    action: str
    resource: str
    principal: str = "arn:aws:iam::123456789012:role/anyone"
    context: Mapping[str, str | Sequence[str]] = field(default_factory=dict)

    def values(self, key: str) -> list[str]:
        """The request's values of ``key``: none when absent. Keys are case-insensitive."""
        for name, value in self.context.items():
            if name.lower() == key.lower():
                return [value] if isinstance(value, str) else list(value)
        return []


def decide(
    request: Request,
    identity_policies: Sequence[Mapping[str, Any]],
    resource_policies: Sequence[Mapping[str, Any]] = (),
) -> Decision:
    """The documented evaluation: explicit deny, then allow, else implicit deny (same account)."""
    applicable = [
        statement
        for policy in (*identity_policies, *resource_policies)
        for statement in _statements(policy)
        if applies(statement, request)
    ]
    if any(statement["Effect"] == "Deny" for statement in applicable):
        return "Deny"
    return "Allow" if any(statement["Effect"] == "Allow" for statement in applicable) else "ImplicitDeny"


def applies(statement: Mapping[str, Any], request: Request) -> bool:
    """Whether the statement's action, resource, principal (a resource policy's) and condition match."""
    if "Action" in statement and not _any_wildcard(_strings(statement["Action"]), request.action, True):
        return False
    if "NotAction" in statement and _any_wildcard(_strings(statement["NotAction"]), request.action, True):
        return False
    if "Resource" in statement and not any(
        _arn_like(p, request.resource) for p in _strings(statement["Resource"])
    ):
        return False
    if "NotResource" in statement and any(
        _arn_like(p, request.resource) for p in _strings(statement["NotResource"])
    ):
        return False
    if "Principal" in statement and not _principal_matches(statement["Principal"], request.principal):
        return False
    return all(
        condition_holds(operator, key, values, request)
        for operator, keys in statement.get("Condition", {}).items()
        for key, values in keys.items()
    )


def condition_holds(operator: str, key: str, expected: object, request: Request) -> bool:
    """One key of one condition operator (set qualifier, ``IfExists`` and ``Null`` included)."""
    values, patterns = request.values(key), _strings(expected)
    if operator == "Null":
        (wanted,) = patterns
        return (not values) == (wanted.lower() == "true")
    qualifier, _, base = operator.rpartition(":")
    if_exists = base.endswith("IfExists")
    base = base.removesuffix("IfExists")
    if base not in STRING_OPERATORS or qualifier not in ("", "ForAllValues", "ForAnyValue"):
        raise NotImplementedError(f"condition operator {operator} is not modelled")
    negated = "Not" in base
    if not values:
        if if_exists or qualifier == "ForAllValues":
            return True
        return negated and qualifier != "ForAnyValue"
    if qualifier == "ForAllValues":
        return all(_one(base, value, patterns) for value in values)
    if qualifier == "ForAnyValue":
        return any(_one(base, value, patterns) for value in values)
    if len(values) > 1:
        raise NotImplementedError(
            f"{key} has several values: qualify {operator} with ForAllValues/ForAnyValue"
        )
    return _one(base, values[0], patterns)


def _one(base: str, value: str, patterns: list[str]) -> bool:
    """A single value against the policy's values: any matches (OR); a negated operator, none (NOR)."""
    positive = base.replace("Not", "")
    if positive == "StringEquals":
        hit = value in patterns
    elif positive == "StringEqualsIgnoreCase":
        hit = value.lower() in {pattern.lower() for pattern in patterns}
    elif positive == "StringLike":
        hit = _any_wildcard(patterns, value, False)
    elif positive in ("ArnEquals", "ArnLike"):
        hit = any(_arn_like(pattern, value) for pattern in patterns)
    else:  # Bool
        hit = value.lower() in {pattern.lower() for pattern in patterns}
    return not hit if "Not" in base else hit


def _principal_matches(principal: object, arn: str) -> bool:
    if principal == "*":
        return True
    if not isinstance(principal, Mapping) or set(principal) != {"AWS"}:
        raise NotImplementedError(f"principal {principal!r} is not modelled")
    return any(entry in ("*", arn) for entry in _strings(principal["AWS"]))


def _statements(policy: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    statements = policy["Statement"]
    return [statements] if isinstance(statements, Mapping) else list(statements)


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and all(isinstance(item, str) for item in value):
        return list(value)
    raise NotImplementedError(f"{value!r} is not a string or a list of strings")


@cache
def _wildcard(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    text = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(text, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL)


def _any_wildcard(patterns: list[str], value: str, ignore_case: bool) -> bool:
    return any(_wildcard(pattern, ignore_case).fullmatch(value) for pattern in patterns)


def _arn_like(pattern: str, arn: str) -> bool:
    """``*`` alone matches everything; else the six colon-separated parts match each other's wildcards."""
    if pattern == "*":
        return True
    wanted, actual = pattern.split(":", 5), arn.split(":", 5)
    return len(wanted) == len(actual) == 6 and all(
        _wildcard(part, False).fullmatch(value) for part, value in zip(wanted, actual, strict=True)
    )
