"""``parkbrake plan`` without click: run the real program offline, price it parked and unparked, judge it.

The program runs twice under the mock engine — once parked, once not — so the cost of the switch is
read from what Pulumi would declare in each case, not from a second model of the stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from guardrails.estimate import CostChange, CostEstimate, compare_estimates, estimate_monthly_cost
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

    @property
    def mandatory_failures(self) -> list[PolicyVerdict]:
        return [
            verdict for verdict in self.verdicts if verdict.enforcement == "mandatory" and not verdict.passed
        ]

    @property
    def cost_lines(self) -> list[CostChange]:
        """Every priced item: ``before`` unparked, ``after`` parked."""
        return compare_estimates(self.unparked, self.parked)


def offline_run(config: StackConfig) -> OfflineRun:
    """The stack's resources as the real Pulumi program declares them, without an engine or a cloud."""
    from stacks.program import build_platform

    return run_offline(lambda: build_platform(config), stack=config.stack, region=config.region)


def policy_context(config: StackConfig, unparked: CostEstimate) -> PolicyContext:
    return PolicyContext(
        max_pool_size=config.policy.max_pool_size,
        allowed_instance_types=frozenset(config.policy.allowed_instance_types),
        tenant_budget_usd=Decimal(str(config.total_budget_usd)),
        monthly_estimate_usd=unparked.total_usd,
    )


def plan_stack(config: StackConfig) -> PlanReport:
    """Run the program in the config's own park state and in the other one, and judge the former."""
    runs = {parked: offline_run(config.with_parked(parked)) for parked in (False, True)}
    estimates = {parked: estimate_monthly_cost(run.resources) for parked, run in runs.items()}
    shown = runs[config.parked]
    return PlanReport(
        config=config,
        run=shown,
        unparked=estimates[False],
        parked=estimates[True],
        verdicts=evaluate(shown.resources, policy_context(config, estimates[False])),
    )


def _usd(value: Decimal) -> float:
    return float(value.quantize(Decimal("0.01")))


def resource_json(resource: RegisteredResource) -> dict[str, Any]:
    return {
        "type": resource.type,
        "name": resource.name,
        "urn": resource.urn,
        "parent": resource.parent,
        "inputs": jsonable(resource.inputs),
    }


def plan_json(report: PlanReport) -> dict[str, Any]:
    """docs/architecture.md's ``plan --output json`` shape (with a few more fields)."""
    return {
        "stack": report.config.stack,
        "parked": report.config.parked,
        "region": report.config.region,
        "resources": [resource_json(resource) for resource in report.run.resources],
        "cost": {
            "monthly_usd": {
                "unparked": _usd(report.unparked.total_usd),
                "parked": _usd(report.parked.total_usd),
                "worst_case": _usd(report.unparked.worst_case_usd),
                "worst_case_capped": _usd(report.unparked.worst_case_capped_usd),
            },
            "items": [
                {
                    "name": line.name,
                    "kind": line.kind,
                    "unparked": _usd(line.before),
                    "parked": _usd(line.after),
                    "detail": line.detail,
                }
                for line in report.cost_lines
            ],
        },
        "policies": [verdict.to_json() for verdict in report.verdicts],
    }
