"""cost-within-budgets: the unparked monthly estimate against the tenants' budgets (advisory)."""

from __future__ import annotations

from decimal import Decimal

from policy_resources import (
    STACK_URN,
    compliant_stack,
    gpu_group,
    gpu_launch_template,
    replacing,
    with_inputs,
)

from policies.engine import judge
from policies.rule import PolicyContext
from policies.rules import cost_within_budgets
from stacks.offline import RegisteredResource


def found(resources: list[RegisteredResource], context: PolicyContext) -> list[tuple[str, str]]:
    verdict = judge(cost_within_budgets.RULE, resources, context)
    assert verdict.enforcement == "advisory"
    return [(violation.resource, violation.message) for violation in verdict.violations]


def test_without_a_budget_there_is_nothing_to_exceed() -> None:
    assert found(compliant_stack(), PolicyContext(monthly_estimate_usd=Decimal("1e9"))) == []


def test_an_estimate_within_or_at_the_budget_passes() -> None:
    for estimate in ("8499.99", "8500"):
        context = PolicyContext(tenant_budget_usd=Decimal(8500), monthly_estimate_usd=Decimal(estimate))
        assert found(compliant_stack(), context) == []


def test_an_estimate_above_the_budget_is_reported_on_the_stack() -> None:
    context = PolicyContext(tenant_budget_usd=Decimal(8500), monthly_estimate_usd=Decimal("12345.678"))
    assert found(compliant_stack(), context) == [
        (
            STACK_URN,
            "the estimated monthly cost unparked, $12,345.68, is above the tenants' budgets of $8,500.00 by $3,845.68",
        )
    ]


def test_without_a_given_estimate_the_resources_are_priced() -> None:
    # One g5.12xlarge always on: 5.672 $/h × 730 h = 4,140.56 $.
    stack = [gpu_launch_template(), with_inputs(gpu_group(), desiredCapacity=1.0, minSize=1.0)]
    assert found(stack, PolicyContext(tenant_budget_usd=Decimal("4140.56"))) == []
    assert found(stack, PolicyContext(tenant_budget_usd=Decimal(4000))) == [
        (
            STACK_URN,
            "the estimated monthly cost unparked, $4,140.56, is above the tenants' budgets of $4,000.00 by $140.56",
        )
    ]


def test_a_stack_that_cannot_be_priced_is_reported_not_passed() -> None:
    stack = replacing(
        compliant_stack(),
        gpu_launch_template(instance_type="p9.96xlarge"),
        with_inputs(gpu_group(), desiredCapacity=1.0),
    )
    (violation,) = found(stack, PolicyContext(tenant_budget_usd=Decimal(100_000)))
    assert violation[0] == STACK_URN
    assert violation[1].startswith(
        "the stack cannot be priced: no on-demand price for p9.96xlarge in us-east-1"
    )
