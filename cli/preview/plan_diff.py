"""``parkbrake plan --against REF``: what changes, in resources and monthly cost, between two stack files.

``REF`` is another stack file, or a git ref whose copy of the stack file is read with ``git show`` —
the way Infracost's diff compares a pull request with its base branch. Both sides run through the
same offline program and the same estimate; each is priced in its own park state.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from cli.preview.plan_report import PlanReport, usd, worst_cases
from guardrails.errors import InputError
from guardrails.estimate import CostChange, compare_estimates
from stacks.config import StackConfig, load_stack_config
from stacks.offline import InputChange, input_changes


@dataclass(frozen=True)
class ResourceChange:
    action: str  # "create", "delete" or "update"
    type: str
    name: str
    inputs: tuple[InputChange, ...] = ()


@dataclass(frozen=True)
class Figures:
    """One item's (or the stack's) three monthly figures."""

    unparked: Decimal
    parked: Decimal
    worst_case: Decimal

    def named(self) -> dict[str, Decimal]:
        return {"unparked": self.unparked, "parked": self.parked, "worst case": self.worst_case}


NO_COST = Figures(Decimal(0), Decimal(0), Decimal(0))


@dataclass(frozen=True)
class ItemChange:
    """A cost item's three figures on each side: what a reviewer weighs, whichever of them moved."""

    name: str
    kind: str
    before: Figures
    after: Figures

    def differences(self) -> dict[str, Decimal]:
        after = self.after.named()
        return {figure: after[figure] - value for figure, value in self.before.named().items()}

    @property
    def largest(self) -> Decimal:
        """The largest of the three changes, by size (a worst case can move while the others stay)."""
        return max(abs(difference) for difference in self.differences().values())


@dataclass(frozen=True)
class PlanDiff:
    against: str  # what the current file was compared with, as the user named it
    resources: list[ResourceChange]
    costs: list[CostChange]  # the shown state's figures only: the JSON ``diff`` (kept as it was)
    totals_before: Figures = NO_COST
    totals_after: Figures = NO_COST
    items: tuple[ItemChange, ...] = ()  # items with any figure moved, the largest change first

    def total_differences(self) -> dict[str, Decimal]:
        after = self.totals_after.named()
        return {figure: after[figure] - value for figure, value in self.totals_before.named().items()}

    @property
    def monthly_before(self) -> Decimal:
        return sum((cost.before for cost in self.costs), Decimal(0))

    @property
    def monthly_after(self) -> Decimal:
        return sum((cost.after for cost in self.costs), Decimal(0))

    def to_json(self) -> dict[str, Any]:
        return {
            "against": self.against,
            "resources": [
                {
                    "action": change.action,
                    "type": change.type,
                    "name": change.name,
                    "inputs": [
                        {"input": item.input, "before": item.before, "after": item.after}
                        for item in change.inputs
                    ],
                }
                for change in self.resources
            ],
            "monthly_usd": {
                "before": usd(self.monthly_before),
                "after": usd(self.monthly_after),
                "difference": usd(self.monthly_after - self.monthly_before),
            },
            "items": [
                {
                    "name": cost.name,
                    "kind": cost.kind,
                    "before": usd(cost.before),
                    "after": usd(cost.after),
                    "difference": usd(cost.difference),
                }
                for cost in self.costs
                if cost.difference
            ],
        }


def config_against(ref: str, config: StackConfig, stack_path: Path) -> StackConfig:
    """The stack config ``ref`` names: a file when one exists at that path, else the stack file at a git ref."""
    candidate = Path(ref)
    if candidate.is_file():
        return load_stack_config(config.stack, stack_path.parent, config_file=candidate)
    text = _git_show(ref, stack_path)
    with tempfile.TemporaryDirectory(prefix="parkbrake-against-") as folder:
        copy = Path(folder) / stack_path.name
        copy.write_text(text)
        return load_stack_config(config.stack, Path(folder), config_file=copy)


def _git_show(ref: str, stack_path: Path) -> str:
    folder = stack_path.resolve().parent
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=folder, capture_output=True, text=True, check=True
        ).stdout.strip()
        relative = stack_path.resolve().relative_to(Path(top).resolve()).as_posix()
        shown = subprocess.run(
            ["git", "show", f"{ref}:{relative}"], cwd=top, capture_output=True, text=True, check=False
        )
    except (OSError, subprocess.CalledProcessError, ValueError):
        raise InputError(
            f"--against {ref!r}: no such file, and {stack_path} is not in a git repository to read a ref from"
        ) from None
    if shown.returncode != 0:
        raise InputError(
            f"--against {ref!r}: neither a file nor a git ref holding {relative} ({shown.stderr.strip()})"
        )
    return shown.stdout


def plan_diff(before: PlanReport, after: PlanReport, against: str) -> PlanDiff:
    old = {(resource.type, resource.name): resource for resource in before.run.resources}
    new = {(resource.type, resource.name): resource for resource in after.run.resources}
    updates: dict[tuple[str, str], list[InputChange]] = {}
    for change in input_changes(before.run, after.run):
        updates.setdefault((change.type, change.name), []).append(change)
    changes = [
        *(ResourceChange("create", *key) for key in new.keys() - old.keys()),
        *(ResourceChange("delete", *key) for key in old.keys() - new.keys()),
        *(ResourceChange("update", *key, inputs=tuple(items)) for key, items in updates.items()),
    ]
    return PlanDiff(
        against=against,
        resources=sorted(changes, key=lambda change: (change.type, change.name, change.action)),
        costs=compare_estimates(before.shown, after.shown),
        totals_before=totals(before),
        totals_after=totals(after),
        items=item_changes(before, after),
    )


def totals(report: PlanReport) -> Figures:
    return Figures(report.unparked.total_usd, report.parked.total_usd, report.unparked.worst_case_usd)


def item_figures(report: PlanReport) -> dict[tuple[str, str], Figures]:
    return {
        (line.kind, line.name): Figures(line.before, line.after, worst)
        for line, worst in zip(report.cost_lines, worst_cases(report), strict=True)
    }


def item_changes(before: PlanReport, after: PlanReport) -> tuple[ItemChange, ...]:
    """Every item whose unparked, parked or worst-case figure moved, the largest change first.

    Ties keep the estimate's order (kind, then name), so the same pair of files gives the same list.
    """
    old, new = item_figures(before), item_figures(after)
    order = list(dict.fromkeys([*old, *new]))
    changes = [
        ItemChange(name, kind, old.get((kind, name), NO_COST), new.get((kind, name), NO_COST))
        for kind, name in order
    ]
    moved = [change for change in changes if change.largest]
    return tuple(sorted(moved, key=lambda change: -change.largest))
