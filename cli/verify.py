"""``parkbrake verify``: prove which revision a service runs, or exit non-zero saying why not."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from cli.options import output_option, stack_option, wide_option

if TYPE_CHECKING:
    from rich.console import Console

    from cli.oncall.deploy.revision_checks import RevisionReport


@click.command()
@click.argument("service")
@click.option("--revision", required=True, help="The git commit the service must be running.")
@stack_option
@click.option("--url", help="The service's base URL; URL/version must answer the revision.")
@click.option(
    "--image",
    help="The image built for the revision (an ECR tag or REPO@sha256:…); what runs must be its digest.",
)
@output_option
@wide_option
def verify(
    *, service: str, revision: str, stack: str, url: str | None, image: str | None, output: str
) -> None:
    """Prove that SERVICE (e.g. inference) runs REVISION.

    For every ECS service that any listener route can send SERVICE's traffic to (every listener
    default action and rule, with its weights, on the colours' load balancers): the PRIMARY
    deployment is COMPLETED on a task definition labelled REVISION and pinned to an image digest,
    no other deployment runs tasks, and every running task runs that task definition. A route that
    sends any traffic to a colour running another revision fails, naming the rule. A circuit-breaker
    rollback, which ECS reports as a COMPLETED deployment of the old task definition, fails with
    "rolled back to …".

    Exit 0 only when every check holds, 1 when one fails (or AWS cannot be read), 2 for bad input
    (a malformed --revision or --image, an image tag that does not exist, an unknown service or stack).

    \b
    Example:
      parkbrake verify inference --stack dev --revision 9e8d7c6 \\
          --url https://inference.example.com
    """
    from cli.oncall.deploy.revision_checks import verify_revision
    from cli.oncall.deploy.revisions import resolve_image, revision_text
    from cli.oncall.deploy.runtime import Runtime
    from guardrails import names

    runtime = Runtime.of(click.get_current_context().obj)
    clients = runtime.clients
    expected_digest = resolve_image(image, allow_tag=False, ecr_in=clients.ecr_in).digest if image else None
    report = verify_revision(
        clients.ecs,
        clients.elbv2,
        runtime.source,
        cluster=names.ecs_cluster(stack),
        service=service,
        revision=revision_text(revision),
        expected_digest=expected_digest,
        url=url,
    )
    if output == "json":
        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        from cli.console import console as make_console

        console = make_console()
        print_checks(console, report)
        verdict = "runs" if report.passed else "does NOT run"
        console.print(f"{service} {verdict} {revision}", style="bold green" if report.passed else "bold red")
    sys.exit(0 if report.passed else 1)


def print_checks(console: Console, report: RevisionReport) -> None:
    from rich.text import Text

    from cli.table import Column, Table, print_table

    table = Table(
        f"{report.service} @ {report.revision}",
        [Column("check", 0), Column("result", 0), Column("subject", 1), Column("detail", 2, detail=True)],
    )
    for check in report.checks:
        result = Text("pass", style="green") if check.passed else Text("FAIL", style="red")
        table.add_row(check.name, result, check.subject, check.detail)
    print_table(console, table)
