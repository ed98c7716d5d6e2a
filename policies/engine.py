"""Judge a stack's resources against every registered rule: what ``parkbrake plan`` reports and exits on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from policies.registry import RULES
from policies.rule import Enforcement, PolicyContext, PolicyRule, ResourceView, Violation


@dataclass(frozen=True)
class PolicyVerdict:
    policy: str
    enforcement: Enforcement
    passed: bool
    violations: tuple[Violation, ...]

    def to_json(self) -> dict[str, Any]:
        """One entry of ``plan --output json``'s ``policies`` list (docs/architecture.md)."""
        return {
            "policy": self.policy,
            "enforcement": self.enforcement,
            "passed": self.passed,
            "violations": [{"resource": v.resource, "message": v.message} for v in self.violations],
        }


def judge(rule: PolicyRule, resources: Sequence[ResourceView], context: PolicyContext) -> PolicyVerdict:
    """A rule's verdict, its violations in (resource, message) order: a function of the resources, not
    of the order the program registered them in, which the Pulumi SDK's mocks do not fix (a rule
    yields in the order it reads)."""
    violations = tuple(sorted(rule.check(resources, context), key=lambda v: (v.resource, v.message)))
    return PolicyVerdict(rule.name, rule.enforcement, passed=not violations, violations=violations)


def evaluate(
    resources: Sequence[ResourceView], context: PolicyContext, rules: Sequence[PolicyRule] = RULES
) -> list[PolicyVerdict]:
    """One verdict per rule, in registry order."""
    return [judge(rule, resources, context) for rule in rules]
