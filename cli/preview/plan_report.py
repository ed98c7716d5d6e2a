"""``parkbrake plan`` without click: run the real program offline, price it parked and unparked, judge it.

The program runs twice under the mock engine — once parked, once not — so the cost of the switch is
read from what Pulumi would declare in each case, not from a second model of the stack.

Everything a report shows is in a fixed order (resources by URN, cost items by kind and name,
violations by resource, as the policy engine orders them), so the same input gives the same bytes in every
output format.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cli.preview.plan_org import OrganisationCosts, organisation_costs, organisation_json
from guardrails.estimate import (
    CostChange,
    CostEstimate,
    compare_estimates,
    estimate_monthly_cost,
)
from guardrails.pricing import load_price_table
from policies.engine import PolicyVerdict, evaluate
from policies.rule import PolicyContext
from stacks.config import StackConfig
from stacks.offline import OfflineRun, RegisteredResource, jsonable, run_offline


@dataclass(frozen=True)
class PlanReport:
    config: StackConfig
    run: OfflineRun
    unparked: CostEstimate
    parked: CostEstimate
    verdicts: list[PolicyVerdict]
    # An organisation's hub: each account's share of both figures (cli/preview/plan_org.py).
    organisation: OrganisationCosts | None = None

    @property
    def mandatory_failures(self) -> list[PolicyVerdict]:
        return [
            verdict for verdict in self.verdicts if verdict.enforcement == "mandatory" and not verdict.passed
        ]

    @property
    def cost_lines(self) -> list[CostChange]:
        """Every priced item: ``before`` unparked, ``after`` parked."""
        return compare_estimates(self.unparked, self.parked)

    @property
    def resources(self) -> list[RegisteredResource]:
        """The shown state's resources in URN order."""
        return sorted(self.run.resources, key=lambda resource: resource.urn)

    @property
    def shown(self) -> CostEstimate:
        """The estimate of the state the config is in."""
        return self.parked if self.config.parked else self.unparked


def offline_run(config: StackConfig) -> OfflineRun:
    """The stack's resources as the real Pulumi program declares them, without an engine or a cloud."""
    from stacks.platform import build_platform

    return run_offline(lambda: build_platform(config), stack=config.stack, region=config.region)


def estimate(config: StackConfig, run: OfflineRun) -> CostEstimate:
    return estimate_monthly_cost(run.resources, region=config.region, prices=load_price_table())


def policy_context(config: StackConfig, unparked: CostEstimate) -> PolicyContext:
    return PolicyContext(
        max_pool_size=config.policy.max_pool_size,
        allowed_instance_types=frozenset(config.policy.allowed_instance_types),
        tenant_budget_usd=Decimal(str(config.total_budget_usd)),
        monthly_estimate_usd=unparked.total_usd,
        region=config.region,
    )


def plan_stack(config: StackConfig) -> PlanReport:
    """Run the program in the config's own park state and in the other one, and judge the former."""
    runs = {parked: offline_run(config.with_parked(parked)) for parked in (False, True)}
    estimates = {parked: estimate(config, run) for parked, run in runs.items()}
    shown = runs[config.parked]
    return PlanReport(
        config=config,
        run=shown,
        unparked=estimates[False],
        parked=estimates[True],
        verdicts=evaluate(shown.resources, policy_context(config, estimates[False])),
        organisation=organisation_costs(config, runs),
    )


def usd(value: Decimal) -> float:
    return float(value.quantize(Decimal("0.01")))


def canonical(value: Any) -> Any:
    """``value`` with every mapping's keys sorted, so equal inputs serialise to equal bytes."""
    if isinstance(value, dict):
        return {key: canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


def resource_json(resource: RegisteredResource) -> dict[str, Any]:
    return {
        "type": resource.type,
        "name": resource.name,
        "urn": resource.urn,
        "parent": resource.parent,
        "inputs": canonical(jsonable(resource.inputs)),
    }


def cost_json(report: PlanReport) -> dict[str, Any]:
    return {
        "region": report.unparked.region,
        "prices_taken": load_price_table().regions[report.unparked.region].taken,
        "monthly_usd": {
            "unparked": usd(report.unparked.total_usd),
            "parked": usd(report.parked.total_usd),
            "worst_case": usd(report.unparked.worst_case_usd),
        },
        "items": [
            {
                "name": line.name,
                "kind": line.kind,
                "unparked": usd(line.before),
                "parked": usd(line.after),
                "worst_case": usd(worst),
                "detail": line.detail,
                "parked_detail": line.after_detail or None,
            }
            for line, worst in zip(report.cost_lines, worst_cases(report), strict=True)
        ],
    }


def how(line: CostChange) -> str:
    """How a line is priced unparked, and parked when that differs."""
    return f"{line.detail}; parked: {line.after_detail}" if line.after_detail else line.detail


def worst_cases(report: PlanReport) -> list[Decimal]:
    """Each cost line's worst case (unparked, every pool at its maximum all month)."""
    worst = {(item.kind, item.name): item.worst_case_usd for item in report.unparked.items}
    return [worst.get((line.kind, line.name), line.before) for line in report.cost_lines]


def plan_json(report: PlanReport) -> dict[str, Any]:
    """docs/architecture.md's ``plan --output json`` shape (with a few more fields)."""
    document = {
        "stack": report.config.stack,
        "parked": report.config.parked,
        "region": report.config.region,
        "resources": [resource_json(resource) for resource in report.resources],
        "cost": cost_json(report),
        "policies": [verdict.to_json() for verdict in report.verdicts],  # violations in the engine's order
    }
    if report.organisation is not None:
        document["organisation"] = organisation_json(report.organisation)
    return document
