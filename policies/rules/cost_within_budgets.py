"""The stack, unparked, should cost no more a month than its tenants' budgets add up to.

Advisory: a plan over budget is a conversation with the tenants, not a broken deployment. ``plan``
passes the estimate of the unparked program; the Pulumi pack estimates the resources it is shown.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from decimal import Decimal

from guardrails.errors import ParkbrakeError
from guardrails.pricing import PriceNotFound
from policies.rule import PolicyContext, PolicyRule, ResourceView, Violation, stack_urn

CENT = Decimal("0.01")


def _usd(amount: Decimal) -> str:
    return f"${amount.quantize(CENT):,}"


def monthly_estimate_usd(resources: Sequence[ResourceView], context: PolicyContext) -> Decimal:
    if context.monthly_estimate_usd is not None:
        return context.monthly_estimate_usd
    from guardrails.estimate import estimate_monthly_cost
    from guardrails.pricing import HOME_REGION

    return estimate_monthly_cost(resources, region=context.region or HOME_REGION).total_usd


def budget_problems(resources: Sequence[ResourceView], context: PolicyContext) -> Iterator[Violation]:
    if context.tenant_budget_usd is None or not resources:
        return
    where = stack_urn(resources[0])
    try:
        estimate = monthly_estimate_usd(resources, context)
    except (PriceNotFound, ParkbrakeError) as error:
        yield Violation(where, f"the stack cannot be priced: {error}")
        return
    if estimate > context.tenant_budget_usd:
        yield Violation(
            where,
            f"the estimated monthly cost unparked, {_usd(estimate)}, is above the tenants' budgets of "
            f"{_usd(context.tenant_budget_usd)} by {_usd(estimate - context.tenant_budget_usd)}",
        )


RULE = PolicyRule(
    name="cost-within-budgets",
    description="The stack's estimated monthly cost when unparked is at most the sum of its tenants' monthly budgets.",
    enforcement="advisory",
    check=budget_problems,
    settings=("tenant_budget_usd",),
)
