"""``plan --output markdown``: the plan as a pull-request comment (GitHub-flavoured tables)."""

from __future__ import annotations

from decimal import Decimal

from cli.preview.plan_diff import PlanDiff
from cli.preview.plan_report import PlanReport, how, worst_cases
from guardrails.plurals import counted


def money(value: Decimal) -> str:
    return f"${value:,.2f}"


def signed(value: Decimal) -> str:
    return f"+${value:,.2f}" if value >= 0 else f"-${-value:,.2f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def _table(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if kind == "r" else "---" for kind in align) + "|",
        *("| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows),
    ]


def plan_markdown(report: PlanReport, diff: PlanDiff | None = None) -> str:
    config = report.config
    state = "parked" if config.parked else "unparked"
    lines = [f"### parkbrake plan: stack `{config.stack}` ({config.region}, {state})", ""]
    if report.mandatory_failures:
        names = ", ".join(f"`{verdict.policy}`" for verdict in report.mandatory_failures)
        lines += [f"**Mandatory policies failed: {names}**", ""]
    if diff is not None:
        lines += [*diff_markdown(diff), "", "**This change's monthly cost**", ""]
    lines += _table(
        ["monthly cost", "USD"],
        [
            ["unparked", money(report.unparked.total_usd)],
            ["parked", money(report.parked.total_usd)],
            [
                "worst case (every pool at its maximum all month, on demand)",
                money(report.unparked.worst_case_usd),
            ],
        ],
        "lr",
    )
    lines += ["", "<details><summary>Cost items</summary>", ""]
    lines += _table(
        ["item", "kind", "unparked", "parked", "worst case", "how"],
        [
            [line.name, line.kind, money(line.before), money(line.after), money(worst), how(line)]
            for line, worst in zip(report.cost_lines, worst_cases(report), strict=True)
        ],
        "llrrrl",
    )
    lines += ["", "</details>", "", "**Policies**", ""]
    lines += _table(
        ["policy", "enforcement", "verdict", "violations"],
        [
            [
                verdict.policy,
                verdict.enforcement,
                "pass" if verdict.passed else "**FAIL**",
                "\n".join(sorted(f"`{v.resource.split('::')[-1]}`: {v.message}" for v in verdict.violations)),
            ]
            for verdict in report.verdicts
        ],
        "llll",
    )
    lines += ["", f"<details><summary>{counted(len(report.resources), 'resource')}</summary>", ""]
    lines += _table(
        ["type", "name"], [[f"`{resource.type}`", resource.name] for resource in report.resources], "ll"
    )
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def moved(before: Decimal, after: Decimal) -> str:
    """``before → after (±change)`` when a figure moved, the figure alone when it did not."""
    return money(after) if before == after else f"{money(before)} → {money(after)} ({signed(after - before)})"


def largest_total_change(diff: PlanDiff) -> tuple[str, Decimal]:
    """The stack total that moved most (unparked first on a tie): the change a reviewer must see."""
    differences = diff.total_differences()
    figure = max(differences, key=lambda name: abs(differences[name]))
    return figure, differences[figure]


def diff_markdown(diff: PlanDiff) -> list[str]:
    figure, change = largest_total_change(diff)
    headline = (
        f"**Against `{diff.against}`**: {figure} {signed(change)} a month"
        if change
        else f"**Against `{diff.against}`**: no monthly figure moved"
    )
    before, after = diff.totals_before.named(), diff.totals_after.named()
    lines = [headline, ""]
    lines += _table(
        ["monthly", f"`{diff.against}`", "this change", "difference"],
        [
            [name, money(before[name]), money(after[name]), signed(after[name] - before[name])]
            for name in before
        ],
        "lrrr",
    )
    lines.append("")
    if diff.items:
        lines += _table(
            ["item", "kind", "unparked", "parked", "worst case"],
            [
                [
                    item.name,
                    item.kind,
                    *(moved(value, item.after.named()[name]) for name, value in item.before.named().items()),
                ]
                for item in diff.items
            ],
            "llrrr",
        )
        lines.append("")
    marks = {"create": "+", "delete": "-", "update": "~"}
    lines += _table(
        ["", "type", "name", "changed inputs"],
        [
            [
                marks[resource.action],
                f"`{resource.type}`",
                resource.name,
                ", ".join(f"`{item.input}`: {item.before} → {item.after}" for item in resource.inputs),
            ]
            for resource in diff.resources
        ],
        "llll",
    ) if diff.resources else ["No resource changes."]  # fmt: skip
    return lines
