"""``parkbrake plan``: the stack's resources, its monthly cost parked and unparked, and the policy verdicts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.options import output_option, stack_option

if TYPE_CHECKING:
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
@output_option
def plan(stack: str, config_file: Path | None, parked: bool | None, project_dir: Path, output: str) -> None:
    """Preview a stack offline: resources, monthly cost parked and unparked, policy verdicts.

    Runs the real Pulumi program under the SDK's mock engine (no Pulumi CLI, no cloud account).
    Exit 0 when every mandatory policy passes, 1 when one fails, 2 for a bad config.
    """
    from cli.preview.plan_report import plan_json, plan_stack
    from stacks.config import load_stack_config

    config = load_stack_config(stack, project_dir, config_file=config_file)
    if parked is not None:
        config = config.with_parked(parked)
    report = plan_stack(config)
    if output == "json":
        click.echo(json.dumps(plan_json(report), indent=2))
    else:
        print_plan(report)
    if report.mandatory_failures:
        sys.exit(1)


def _properties(resource_type: str, inputs: dict[str, Any]) -> str:
    shown = []
    for key in KEY_PROPERTIES.get(resource_type, ()):
        if key in inputs:
            value = inputs[key]
            if isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            shown.append(f"{key}={value}")
    return " ".join(shown)


def print_plan(report: PlanReport) -> None:
    from rich.table import Table
    from rich.tree import Tree

    from cli.console import console as make_console

    console = make_console()
    state = "parked" if report.config.parked else "unparked"
    console.print(f"[bold]Stack {report.config.stack}[/] ({report.config.region}), {state}")

    tree = Tree(f"{len(report.run.resources)} resources")
    nodes: dict[str | None, Tree] = {None: tree}
    for resource in report.run.resources:  # the mock engine registers parents before children
        parent_node = nodes.get(resource.parent, tree)
        label = f"[cyan]{resource.type}[/] [bold]{resource.name}[/]"
        properties = _properties(resource.type, resource.inputs)
        nodes[resource.urn] = parent_node.add(f"{label} [dim]{properties}[/]" if properties else label)
    console.print(tree)

    costs = Table(title="Monthly cost estimate (USD, on-demand, 730 h)", title_justify="left")
    for column in ("item", "kind", "unparked", "parked", "how"):
        costs.add_column(column, justify="right" if column in ("unparked", "parked") else "left")
    for line in report.cost_lines:
        costs.add_row(line.name, line.kind, f"{line.before:,.2f}", f"{line.after:,.2f}", line.detail)
    costs.add_row(
        "[bold]total[/]",
        "",
        f"[bold]{report.unparked.total_usd:,.2f}[/]",
        f"[bold]{report.parked.total_usd:,.2f}[/]",
        "",
    )
    console.print(costs)
    console.print(
        f"Worst case: every pool at max all month ${report.unparked.worst_case_usd:,.2f}; "
        f"at max but only up to the caps ${report.unparked.worst_case_capped_usd:,.2f}"
    )

    verdicts = Table(title="Policies", title_justify="left")
    for column in ("policy", "enforcement", "verdict", "violations"):
        verdicts.add_column(column)
    for verdict in report.verdicts:
        mark = "[green]pass[/]" if verdict.passed else "[red]FAIL[/]"
        details = "\n".join(
            f"{violation.resource.split('::')[-1]}: {violation.message}" for violation in verdict.violations
        )
        verdicts.add_row(verdict.policy, verdict.enforcement, mark, details)
    console.print(verdicts)
    if report.mandatory_failures:
        names = ", ".join(verdict.policy for verdict in report.mandatory_failures)
        console.print(f"[red]Mandatory policies failed: {names}[/]")
