"""``parkbrake plan``: the stack's resources, its monthly cost parked and unparked, and the policy verdicts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.options import stack_option

if TYPE_CHECKING:
    from cli.preview.plan_diff import PlanDiff
    from cli.preview.plan_report import PlanReport

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


@click.command()
@stack_option
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read this stack config file instead of Pulumi.<stack>.yaml.",
)
@click.option(
    "--parked/--unparked",
    default=None,
    help="Preview the stack with the park switch flipped, without editing the file.",
)
@click.option(
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Folder holding Pulumi.yaml and the stack files.",
)
@click.option(
    "--against",
    metavar="REF",
    help="Also show the resource and monthly-cost difference from another stack file, or from the "
    "stack file at a git ref (e.g. main).",
)
@click.option(
    "--output",
    "-o",
    type=click.Choice(["text", "json", "markdown"]),
    default="text",
    show_default=True,
    help="text for people, json for scripts and CI, markdown for a pull-request comment.",
)
def plan(
    *,
    stack: str,
    config_file: Path | None,
    parked: bool | None,
    project_dir: Path,
    against: str | None,
    output: str,
) -> None:
    """Preview a stack offline: resources, monthly cost parked and unparked, policy verdicts.

    Runs the real Pulumi program under the SDK's mock engine (no Pulumi CLI, no cloud account).
    Exit 0 when every mandatory policy passes, 1 when one fails, 2 for a bad config or an unpriced region.

    \b
    Example:
      parkbrake plan --stack dev --output markdown
    """
    report, diff = plan_with_diff(stack, config_file, parked, project_dir, against)
    click.echo(render(report, diff, output), nl=False)
    if report.mandatory_failures:
        sys.exit(1)


def plan_with_diff(
    stack: str, config_file: Path | None, parked: bool | None, project_dir: Path, against: str | None
) -> tuple[PlanReport, PlanDiff | None]:
    from cli.preview.plan_diff import config_against, plan_diff
    from cli.preview.plan_report import plan_stack
    from stacks.config import load_stack_config, stack_file

    config = load_stack_config(stack, project_dir, config_file=config_file)
    if parked is not None:
        config = config.with_parked(parked)
    report = plan_stack(config)
    if against is None:
        return report, None
    base = config_against(against, config, config_file or stack_file(stack, project_dir))
    return report, plan_diff(plan_stack(base), report, against)


def render(report: PlanReport, diff: PlanDiff | None, output: str) -> str:
    from cli.preview.plan_markdown import plan_markdown
    from cli.preview.plan_report import plan_json

    if output == "json":
        document = plan_json(report)
        if diff is not None:
            document["diff"] = diff.to_json()
        return json.dumps(document, indent=2) + "\n"
    if output == "markdown":
        return plan_markdown(report, diff)
    return plan_text(report, diff)


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


def plan_text(report: PlanReport, diff: PlanDiff | None) -> str:
    from rich.table import Table
    from rich.tree import Tree

    from cli.console import console as make_console
    from cli.preview.plan_markdown import money
    from cli.preview.plan_report import how, worst_cases

    console = make_console()
    with console.capture() as captured:
        state = "parked" if report.config.parked else "unparked"
        console.print(f"[bold]Stack {report.config.stack}[/] ({report.config.region}), {state}")
        console.print(resource_tree(report, Tree(f"{len(report.resources)} resources")))

        taken = report.unparked.region
        costs = Table(title=f"Monthly cost estimate (USD, {taken} prices, 730 h)", title_justify="left")
        for column in ("item", "kind", "unparked", "parked", "worst case", "how"):
            costs.add_column(
                column, justify="right" if column in ("unparked", "parked", "worst case") else "left"
            )
        for line, worst in zip(report.cost_lines, worst_cases(report), strict=True):
            costs.add_row(
                line.name,
                line.kind,
                f"{line.before:,.2f}",
                f"{line.after:,.2f}",
                f"{worst:,.2f}",
                how(line),
            )
        costs.add_row(
            "[bold]total[/]",
            "",
            f"[bold]{report.unparked.total_usd:,.2f}[/]",
            f"[bold]{report.parked.total_usd:,.2f}[/]",
            f"[bold]{report.unparked.worst_case_usd:,.2f}[/]",
            "worst case: every pool at its maximum all month, on demand",
        )
        console.print(costs)
        if diff is not None:
            print_diff(console, diff, money)
        console.print(verdict_table(report))
        if report.mandatory_failures:
            names = ", ".join(verdict.policy for verdict in report.mandatory_failures)
            console.print(f"[red]Mandatory policies failed: {names}[/]")
    return captured.get()


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


def verdict_table(report: PlanReport) -> Any:
    from rich.table import Table

    verdicts = Table(title="Policies", title_justify="left")
    for column in ("policy", "enforcement", "verdict", "violations"):
        verdicts.add_column(column)
    for verdict in report.verdicts:
        mark = "[green]pass[/]" if verdict.passed else "[red]FAIL[/]"
        details = "\n".join(
            sorted(
                f"{violation.resource.split('::')[-1]}: {violation.message}"
                for violation in verdict.violations
            )
        )
        verdicts.add_row(verdict.policy, verdict.enforcement, mark, details)
    return verdicts


def print_diff(console: Any, diff: PlanDiff, money: Any) -> None:
    from rich.markup import escape

    change = diff.monthly_after - diff.monthly_before
    console.print(
        f"[bold]Against {escape(diff.against)}:[/] monthly cost {money(diff.monthly_before)} → "
        f"{money(diff.monthly_after)} ({'+' if change >= 0 else '-'}{money(abs(change))})"
    )
    for cost in diff.costs:
        if cost.difference:
            sign = "+" if cost.difference > 0 else "-"
            console.print(
                f"  {sign} {cost.kind} {cost.name}: {money(cost.before)} → {money(cost.after)} "
                f"({sign}{money(abs(cost.difference))})"
            )
    marks = {"create": "[green]+[/]", "delete": "[red]-[/]", "update": "[yellow]~[/]"}
    for resource in diff.resources:
        inputs = ", ".join(f"{item.input}: {item.before} → {item.after}" for item in resource.inputs)
        console.print(
            f"  {marks[resource.action]} {resource.type} {escape(resource.name)}"
            + (f" ({escape(inputs)})" if inputs else "")
        )
    if not diff.resources:
        console.print("  no resource changes")
