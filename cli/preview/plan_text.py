"""``plan``'s text output, the answer first and last: the stack, its three monthly totals and the policy
verdicts on the first lines, then (with ``--against``) what changed, the cost items, the verdict table,
the resource tree (``--tree`` only: ~185 lines), and the answer again in a few closing lines, so the
last screen of a terminal shows it whatever scrolled away above.

Item names are never cut: the item column is as wide as its longest name, and how each item is priced
is listed under the table (wrapped whole at any width) rather than squeezed into a column.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from cli.console import console as make_console
from cli.preview.plan_diff import PlanDiff
from cli.preview.plan_markdown import largest_total_change, money, signed
from cli.preview.plan_org import organisation_lines
from cli.preview.plan_report import PlanReport, how, worst_cases
from guardrails.plurals import counted

# Rich pads every table cell to its column's width, the last one too; a line's trailing spaces (before
# any closing colour codes) are dropped so what is copied or diffed carries none.
TRAILING_SPACES = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)

WORST_CASE_MEANS = "every pool at its maximum all month, on demand"

# The few inputs worth showing in the tree, per resource type.
KEY_PROPERTIES: dict[str, tuple[str, ...]] = {
    "aws:ec2/launchTemplate:LaunchTemplate": ("instanceType", "instanceInitiatedShutdownBehavior"),
    "aws:autoscaling/group:Group": ("minSize", "desiredCapacity", "maxSize"),
    "aws:ecs/service:Service": ("desiredCount",),
    "aws:appautoscaling/target:Target": ("minCapacity", "maxCapacity"),
    "aws:scheduler/schedule:Schedule": ("scheduleExpression", "state"),
    "aws:ssm/parameter:Parameter": ("name", "value"),
    "aws:rds/cluster:Cluster": ("engine", "serverlessv2ScalingConfiguration"),
    "aws:elasticache/replicationGroup:ReplicationGroup": ("nodeType", "numCacheClusters"),
    "aws:cloudwatch/metricAlarm:MetricAlarm": ("metricName", "treatMissingData"),
    "aws:lambda/function:Function": ("handler",),
}


def plan_text(
    report: PlanReport,
    diff: PlanDiff | None,
    *,
    tree: bool = False,
    summary: bool = False,
    source: str | None = None,
) -> str:
    """The plan for people; ``summary`` stops after the headline (and the change, with ``--against``).

    ``source`` is the stack file the user named with ``--config``: the headline names it.
    """
    console = make_console()
    with console.capture() as captured:
        for line in headline(report, source):
            console.print(line)
        if diff is not None:
            console.print()
            for line in diff_lines(diff):
                console.print(line)
        if not summary:
            console.print()
            for renderable in cost_items(report, console.width):
                console.print(renderable, highlight=False)
            console.print()
            console.print("How each item is priced:")
            console.print(pricing_notes(report), highlight=False)
            console.print()
            console.print(verdict_table(report))
            if diff is not None:
                console.print()
                for line in resource_change_lines(diff):
                    console.print(line, highlight=False)
            if report.organisation is not None:
                console.print()
                for line in organisation_lines(report.organisation, money):
                    console.print(line, highlight=False)
            if tree:
                console.print()
                console.print(resource_tree(report, Tree(counted(len(report.resources), "resource"))))
            console.print()
            for line in closing(report, diff, tree=tree):
                console.print(line, highlight=False)
    return TRAILING_SPACES.sub(r"\1", captured.get())


def headline(report: PlanReport, source: str | None = None) -> list[str]:
    config = report.config
    state = "parked" if config.parked else "unparked"
    where = f"{config.region}, from {escape(source)}" if source else config.region
    figures = [
        ("unparked", report.unparked.total_usd),
        ("parked", report.parked.total_usd),
        ("worst case", report.unparked.worst_case_usd),
    ]
    width = max(len(money(value)) for _, value in figures)
    lines = [
        f"[bold]Stack {escape(config.stack)}[/] ({where}), {state}: {counted(len(report.resources), 'resource')}",
        f"Monthly cost ({report.unparked.region} prices, 730 h):",
        *(f"  {name:<11} [bold]{money(value):>{width}}[/]" for name, value in figures),
        f"  (worst case: {WORST_CASE_MEANS})",
    ]
    return lines + policy_lines(report)


def policy_lines(report: PlanReport) -> list[str]:
    """The verdict in a line, each failed policy under it, and the mandatory failures named."""
    lines = []
    failed = [verdict for verdict in report.verdicts if not verdict.passed]
    mandatory = sum(1 for verdict in report.verdicts if verdict.enforcement == "mandatory")
    if not failed:
        lines.append(
            f"Policies: [green]all {len(report.verdicts)} pass[/] "
            f"({mandatory} mandatory, {len(report.verdicts) - mandatory} advisory)"
        )
    else:
        passed = len(report.verdicts) - len(failed)
        lines.append(f"Policies: {passed} of {len(report.verdicts)} pass; failed:")
        for verdict in failed:
            colour = "red" if verdict.enforcement == "mandatory" else "yellow"
            lines.append(
                f"  [{colour}]FAIL[/] {verdict.policy} ({verdict.enforcement}, "
                f"{counted(len(verdict.violations), 'violation')})"
            )
    if report.mandatory_failures:
        names = ", ".join(verdict.policy for verdict in report.mandatory_failures)
        lines.append(f"[red]Mandatory policies failed: {names}[/]")
    return lines


def closing(report: PlanReport, diff: PlanDiff | None, *, tree: bool) -> list[str]:
    """The answer again, for the last screen: the cost table, the notes and the verdicts (and the tree)
    have pushed the opening lines out of a 24-line terminal by now."""
    config = report.config
    figures = (
        f"unparked [bold]{money(report.unparked.total_usd)}[/] · parked [bold]{money(report.parked.total_usd)}[/]"
        f" · worst case [bold]{money(report.unparked.worst_case_usd)}[/]"
    )
    state = "parked" if config.parked else "unparked"
    lines = [
        f"[bold]Stack {escape(config.stack)}[/], {state}, {counted(len(report.resources), 'resource')}"
        + ("" if tree else " (the tree: --tree)"),
        f"Monthly: {figures}",
    ]
    if report.organisation is not None:
        costs = report.organisation
        lines.append(
            f"Organisation, {counted(len(costs.accounts), 'account line')}: unparked [bold]{money(costs.unparked)}[/]"
            f" · parked [bold]{money(costs.parked)}[/]"
        )
    if diff is not None:
        lines.append(diff_lines(diff)[0])
    return lines + policy_lines(report)


def diff_lines(diff: PlanDiff) -> list[str]:
    """The change against REF: the total that moved most first, then each total, then each moved item."""
    figure, change = largest_total_change(diff)
    lines = [
        f"[bold]Against {escape(diff.against)}:[/] {figure} {signed(change)} a month"
        if change
        else f"[bold]Against {escape(diff.against)}:[/] no monthly figure moved"
    ]
    before, after = diff.totals_before.named(), diff.totals_after.named()
    lines += [
        f"  {name:<11} {money(before[name])} → {money(after[name])} ({signed(after[name] - before[name])})"
        for name in before
    ]
    for item in diff.items:
        moved = [
            f"{name} {money(value)} → {money(item.after.named()[name])} "
            f"({signed(item.after.named()[name] - value)})"
            for name, value in item.before.named().items()
            if value != item.after.named()[name]
        ]
        lines.append(f"  {escape(item.name)} ({item.kind}): " + "; ".join(moved))
    return lines


def resource_change_lines(diff: PlanDiff) -> list[str]:
    marks = {"create": "[green]+[/]", "delete": "[red]-[/]", "update": "[yellow]~[/]"}
    lines = [f"Resource changes against {escape(diff.against)}:"]
    for resource in diff.resources:
        inputs = ", ".join(f"{item.input}: {item.before} → {item.after}" for item in resource.inputs)
        lines.append(
            f"  {marks[resource.action]} {resource.type} {escape(resource.name)}"
            + (f" ({escape(inputs)})" if inputs else "")
        )
    if not diff.resources:
        lines.append("  no resource changes")
    return lines


def cost_items(report: PlanReport, width: int) -> list[Any]:
    """The cost table when it fits ``width`` whole; narrower, each item on a line of its own with its
    figures on the next, so no column is dropped and no name cut."""
    table = cost_table(report)
    needed = sum(column.min_width or 0 for column in table.columns) + 2 * len(table.columns)
    if needed <= width:
        return [table]
    lines: list[Any] = [table.title]
    for name, kind, *values in cost_cells(report):
        figures = "  ".join(f"{header} {value}" for header, value in zip(FIGURES, values, strict=True))
        lines += [f" {escape(name)} ({kind})" if kind else f" [bold]{name}[/]", f"   {figures}"]
    return lines


FIGURES = ("unparked", "parked", "worst case")


def cost_cells(report: PlanReport) -> list[list[str]]:
    """Each item's name, kind and three figures as printed, the total last."""
    rows = [
        (line.name, line.kind, line.before, line.after, worst)
        for line, worst in zip(report.cost_lines, worst_cases(report), strict=True)
    ]
    total: tuple[str, str, Decimal, Decimal, Decimal] = (
        "total",
        "",
        report.unparked.total_usd,
        report.parked.total_usd,
        report.unparked.worst_case_usd,
    )
    return [[name, kind, *(f"{value:,.2f}" for value in values)] for name, kind, *values in [*rows, total]]


def cost_table(report: PlanReport) -> Table:
    """Items and their three figures; every column is as wide as its widest cell, so nothing is cut."""
    cells = cost_cells(report)
    headers = ["item", "kind", *FIGURES]
    table = Table(
        title=f"Cost items (USD a month, {report.unparked.region} prices, 730 h)",
        title_justify="left",
        box=box.SIMPLE,
        show_edge=False,
        show_footer=True,  # the totals, under a rule
    )
    for index, header in enumerate(headers):
        widest = max(len(header), *(len(row[index]) for row in cells))
        table.add_column(
            header,
            footer=f"[bold]{escape(cells[-1][index])}[/]" if cells[-1][index] else "",
            justify="left" if index < 2 else "right",
            no_wrap=True,
            min_width=widest,
        )
    for row in cells[:-1]:
        table.add_row(*(escape(cell) for cell in row))
    return table


def pricing_notes(report: PlanReport) -> Table:
    """``item (kind):`` then how it is priced, wrapped under itself (a hanging indent) at any width."""
    notes = Table.grid(padding=(0, 1))
    notes.add_column(no_wrap=True)
    notes.add_column(overflow="fold")
    for line in report.cost_lines:
        notes.add_row(f"  {escape(line.name)} ({line.kind}):", escape(how(line)))
    return notes


def _properties(resource_type: str, inputs: dict[str, Any]) -> str:
    shown = []
    for key in KEY_PROPERTIES.get(resource_type, ()):
        if key in inputs:
            value = inputs[key]
            text = (
                ", ".join(f"{k}={_number(v)}" for k, v in value.items())
                if isinstance(value, dict)
                else _number(value)
            )
            shown.append(f"{key}={text}")
    return " ".join(shown)


def _number(value: Any) -> str:
    """Counts as counts: the mock engine hands numbers back as floats (1.0), people read 1."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def resource_tree(report: PlanReport, tree: Any) -> Any:
    """Resources under their parents, siblings by type and name."""
    children: dict[str | None, list[Any]] = {}
    for resource in report.resources:
        children.setdefault(resource.parent, []).append(resource)
    known = {resource.urn for resource in report.resources}

    def add(node: Any, parent: str | None) -> None:
        for resource in sorted(children.get(parent, []), key=lambda r: (r.type, r.name)):
            label = f"[cyan]{resource.type}[/] [bold]{resource.name}[/]"
            properties = _properties(resource.type, resource.inputs)
            add(node.add(f"{label} [dim]{properties}[/]" if properties else label), resource.urn)

    add(tree, None)
    for orphan_parent in sorted(parent for parent in children if parent is not None and parent not in known):
        add(tree, orphan_parent)
    return tree


def verdict_table(report: PlanReport) -> Table:
    verdicts = Table(title="Policies", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    for column in ("policy", "enforcement", "verdict", "violations"):
        verdicts.add_column(column, no_wrap=column != "violations")
    for verdict in report.verdicts:
        mark = "[green]pass[/]" if verdict.passed else "[red]FAIL[/]"
        details = "\n".join(
            sorted(
                f"{violation.resource.split('::')[-1]}: {violation.message}"
                for violation in verdict.violations
            )
        )
        verdicts.add_row(verdict.policy, verdict.enforcement, mark, escape(details))
    return verdicts
