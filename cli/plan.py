"""``parkbrake plan``: the stack's resources, its monthly cost parked and unparked, and the policy verdicts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.options import project_dir_option, stack_option

if TYPE_CHECKING:
    from cli.preview.plan_diff import PlanDiff
    from cli.preview.plan_report import PlanReport


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
@project_dir_option
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
@click.option(
    "--tree/--no-tree",
    default=False,
    show_default=True,
    help="Text output: also print the resource tree (every resource under its parent, with key inputs; "
    "~185 lines), before the closing totals.",
)
@click.option(
    "--summary",
    is_flag=True,
    help="Text output: only the stack, its monthly totals, the policy verdicts and the change against REF.",
)
def plan(
    *,
    stack: str,
    config_file: Path | None,
    parked: bool | None,
    project_dir: Path,
    against: str | None,
    output: str,
    tree: bool,
    summary: bool,
) -> None:
    """Preview a stack offline: resources, monthly cost parked and unparked, policy verdicts.

    Runs the real Pulumi program under the SDK's mock engine (no Pulumi CLI, no cloud account).
    Text opens with the answer (monthly totals, verdicts, the change against REF), then the cost
    items and the verdict table (and with --tree the resource tree), and closes with the answer again.
    Exit 0 when every mandatory policy passes, 1 when one fails, 2 for a bad config or an unpriced region.

    \b
    Example:
      parkbrake plan --stack dev --output markdown
    """
    report, diff = plan_with_diff(stack, config_file, parked, project_dir, against)
    source = str(config_file) if config_file is not None else None
    click.echo(render(report, diff, output, tree=tree, summary=summary, source=source), nl=False)
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


def render(
    report: PlanReport,
    diff: PlanDiff | None,
    output: str,
    *,
    tree: bool = False,
    summary: bool = False,
    source: str | None = None,
) -> str:
    from cli.preview.plan_markdown import plan_markdown
    from cli.preview.plan_report import plan_json
    from cli.preview.plan_text import plan_text

    if output == "json":
        document = plan_json(report)
        if diff is not None:
            document["diff"] = diff.to_json()
        return json.dumps(document, indent=2) + "\n"
    if output == "markdown":
        return plan_markdown(report, diff)
    return plan_text(report, diff, tree=tree, summary=summary, source=source)
