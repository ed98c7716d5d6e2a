"""``parkbrake park`` / ``unpark`` without click: the reviewed path through ``Pulumi.<stack>.yaml``.

Parking is a change to the stack's config, reviewed and committed like any other: the one value
``parkbrake:parked`` is flipped in the file (nothing else in it moves), the difference it makes is
shown from the real program run offline in both states — which inputs change, the monthly cost
before and after, what goes to zero and what stays on — and ``--apply`` runs ``pulumi up`` through
the Automation API.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from cli.oncall.stack_file import ConfigEdit, config_region, read_config_value, set_config_value
from guardrails.errors import InputError, ParkbrakeError
from guardrails.estimate import CostChange, CostEstimate, compare_estimates
from guardrails.settings import aws_region
from stacks.config import StackConfig, load_stack_config, stack_file
from stacks.offline import InputChange, OfflineRun, input_changes

PARKED_KEY = "parkbrake:parked"
SCHEDULE_TYPE = "aws:scheduler/schedule:Schedule"
CENTS = Decimal("0.01")


@dataclass(frozen=True)
class ParkPlan:
    stack: str
    file: Path
    parked_before: bool  # what the file says now
    parked_after: bool
    changes: list[InputChange]
    costs: list[CostChange]
    always_on: list[str]  # resources that keep running either way: the guardrails' schedules, say

    @property
    def changes_anything(self) -> bool:
        return self.parked_before != self.parked_after

    @property
    def monthly_before(self) -> Decimal:
        return sum((cost.before for cost in self.costs), Decimal(0))

    @property
    def monthly_after(self) -> Decimal:
        return sum((cost.after for cost in self.costs), Decimal(0))

    @property
    def goes_to_zero(self) -> list[str]:
        """Capacities and costs that drop to nothing in the new state (schedules are switched, below)."""
        zeroed = [
            f"{change.name} ({change.input})"
            for change in self.changes
            if change.to_zero and not _is_switch(change)
        ]
        zeroed += [f"{cost.name} ({cost.kind})" for cost in self.costs if cost.before and not cost.after]
        return list(dict.fromkeys(zeroed))

    @property
    def comes_back(self) -> list[str]:
        """Capacities and costs that rise from nothing in the new state (what unparking turns on)."""
        raised = [
            f"{change.name} ({change.input})"
            for change in self.changes
            if _is_zero(change.before) and not _is_zero(change.after) and not _is_switch(change)
        ]
        raised += [f"{cost.name} ({cost.kind})" for cost in self.costs if cost.after and not cost.before]
        return list(dict.fromkeys(raised))

    @property
    def switched(self) -> list[str]:
        """Schedules the new state turns off (park) or on (unpark)."""
        return [
            f"{change.name} ({change.before} → {change.after})"
            for change in self.changes
            if _is_switch(change)
        ]

    @property
    def stays_on(self) -> list[str]:
        """What costs money, or runs, in both states."""
        priced = [
            f"{cost.name} ({cost.kind}, ${cost.after:.2f}/month)"
            for cost in self.costs
            if cost.after and cost.before
        ]
        return priced + self.always_on

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "file": str(self.file),
            "parked": {"before": self.parked_before, "after": self.parked_after},
            "cost": {
                "monthly_usd": {"before": _usd(self.monthly_before), "after": _usd(self.monthly_after)},
                "items": [
                    {
                        "name": cost.name,
                        "kind": cost.kind,
                        "before": _usd(cost.before),
                        "after": _usd(cost.after),
                        "detail": cost.detail,
                    }
                    for cost in self.costs
                ],
            },
            "changes": [
                {
                    "type": change.type,
                    "name": change.name,
                    "input": change.input,
                    "before": change.before,
                    "after": change.after,
                }
                for change in self.changes
            ],
            "goes_to_zero": self.goes_to_zero,
            "comes_back": self.comes_back,
            "switched": self.switched,
            "stays_on": self.stays_on,
        }


def _is_switch(change: InputChange) -> bool:
    return change.type == SCHEDULE_TYPE and change.input == "state"


def _is_zero(value: Any) -> bool:
    return value in (0, "DISABLED", None)


def _usd(value: Decimal) -> float:
    return float(value.quantize(CENTS))


def config_parked(stack: str, project_dir: Path) -> bool | None:
    """What ``Pulumi.<stack>.yaml`` says about parking; None when there is no such file or no such key."""
    path = stack_file(stack, project_dir)
    if not path.is_file():
        return None
    try:
        value = read_config_value(path, PARKED_KEY)
    except InputError:
        return None
    return value if isinstance(value, bool) else None


def stack_region(stack: str, project_dir: Path, explicit: str | None) -> str:
    """Where the stack lives: ``--region``, else the stack file's ``aws:region``, else ``AWS_REGION``.

    The stack file comes before the environment so that parking prod from a shell set up for
    another region acts on prod's region, not on an empty one.
    """
    from cli.oncall.regions import checked_region

    sources = (
        ("--region", explicit),
        (f"aws:region in Pulumi.{stack}.yaml", config_region(stack, project_dir)),
        ("AWS_REGION", aws_region(os.environ)),
    )
    for source, region in sources:
        if region:
            return checked_region(region, source)
    raise InputError(f"no region for stack {stack!r}: pass --region, or set aws:region or AWS_REGION")


def plan_park(stack: str, project_dir: Path, *, parked: bool) -> ParkPlan:
    """Run the program offline in both states and compare: the plan of parking (or unparking) ``stack``."""
    config = load_stack_config(stack, project_dir)
    before = _offline(config)
    after = before if parked == config.parked else _offline(config.with_parked(parked))
    estimates = (estimate(config, before), estimate(config, after))
    return ParkPlan(
        stack=stack,
        file=stack_file(stack, project_dir),
        parked_before=config.parked,
        parked_after=parked,
        changes=input_changes(before, after),
        costs=compare_estimates(*estimates),
        always_on=[
            f"{name} (schedule, stays enabled)" for name in sorted(_enabled(before) & _enabled(after))
        ],
    )


def _enabled(run: OfflineRun) -> set[str]:
    return {
        resource.name
        for resource in run.of_type(SCHEDULE_TYPE)
        if resource.inputs.get("state", "ENABLED") == "ENABLED"
    }


def _offline(config: StackConfig) -> OfflineRun:
    from cli.preview.plan_report import offline_run

    return offline_run(config)


def estimate(config: StackConfig, run: OfflineRun) -> CostEstimate:
    from cli.preview.plan_report import estimate as plan_estimate

    return plan_estimate(config, run)


def write_parked(plan: ParkPlan, *, dry_run: bool) -> ConfigEdit:
    """Set ``parkbrake:parked`` in the stack file, changing only that value's bytes."""
    return set_config_value(plan.file, PARKED_KEY, plan.parked_after, write=not dry_run)


def require_pulumi_cli() -> str:
    """The Automation API drives the ``pulumi`` program; say so plainly when it is not there."""
    found = shutil.which("pulumi")
    if found is None:
        raise ParkbrakeError(
            "the Pulumi CLI is not installed (no `pulumi` on PATH), so --apply cannot run `pulumi up`; "
            "install it (https://www.pulumi.com/docs/install/) or apply the committed change from CI"
        )
    return found


def apply_stack(stack: str, project_dir: Path, *, on_output: Callable[[str], Any]) -> dict[str, int]:
    """``pulumi up --refresh`` on ``stack`` through the Automation API; the resource changes, by operation."""
    require_pulumi_cli()
    from pulumi import automation

    try:
        workspace_stack = automation.select_stack(stack_name=stack, work_dir=str(project_dir))
        # refresh first: a `park --now` since the last update left live capacities Pulumi's state does not know
        result = workspace_stack.up(on_output=on_output, refresh=True)
    except automation.StackNotFoundError:
        raise ParkbrakeError(
            f"Pulumi stack {stack!r} does not exist in the current backend; `pulumi login` to the right one "
            f"or `pulumi stack init {stack}`"
        ) from None
    except automation.CommandError as error:
        raise ParkbrakeError(f"pulumi up failed for stack {stack!r}: {str(error).strip()}") from None
    return {operation: int(count) for operation, count in (result.summary.resource_changes or {}).items()}
