"""``parkbrake deploy``: a blue-green deploy of the inference service, pinned to an image digest."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Self

import click

from cli.console import console as make_console
from cli.options import confirm_or_abort, dry_run_option, output_option, stack_option, yes_option

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from cli.oncall.deploy_phases import DeployResult

INTERRUPTED_EXIT = 130  # the shell's code for a process ended by Ctrl-C


@click.command()
@click.argument("service")
@click.option(
    "--image", required=True, help="The image: an ECR tag (resolved to its digest) or REPO@sha256:…."
)
@click.option("--revision", required=True, help="The git commit the image was built from.")
@stack_option
@click.option(
    "--canary",
    "canary_percent",
    type=click.IntRange(1, 50),
    default=10,
    show_default=True,
    help="Percent of traffic the new colour takes while it bakes.",
)
@click.option("--bake", default="5m", show_default=True, help="How long the canary must stay healthy.")
@click.option(
    "--timeout",
    default="20m",
    show_default=True,
    help="How long the new colour may take to become healthy (and the old one to drain).",
)
@click.option("--allow-tag", is_flag=True, help="Accept a tag that cannot be resolved to a digest.")
@click.option(
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Folder holding the stack files; Pulumi.<stack>.yaml gets the new live colour.",
)
@dry_run_option
@yes_option
@output_option
def deploy(
    *,
    service: str,
    image: str,
    revision: str,
    stack: str,
    canary_percent: int,
    bake: str,
    timeout: str,
    allow_tag: bool,
    project_dir: Path,
    dry_run: bool,
    yes: bool,
    output: str,
) -> None:
    """Deploy IMAGE as REVISION to SERVICE (e.g. inference), blue-green.

    Registers a task definition pinned to the image's digest and labelled with the revision,
    starts it on the idle colour with one extra GPU host, waits for healthy targets, sends it
    the canary share, bakes, sends it everything, verifies, then scales the old colour and the
    extra host away and sets the stack's live_colour (commit that file).

    Any failure rolls back (the old revision keeps serving) and exits 1. Ctrl-C leaves the service
    serving and exits 130: run the same command again to resume, or deploy another revision to
    roll the interrupted one back. State is read from AWS, so any engineer can resume.
    """
    from cli.oncall.blue_green_deploy import BlueGreenDeploy, Runtime
    from cli.oncall.deploy_phases import DeployRequest, DeployTarget
    from cli.oncall.revisions import resolve_image, revision_text
    from stacks.config import stack_file

    runtime = Runtime.of(click.get_current_context().obj)
    request = DeployRequest(
        target=DeployTarget.from_stack_file(stack, service, stack_file(stack, project_dir)),
        image=resolve_image(image, allow_tag=allow_tag, ecr_in=runtime.clients.ecr_in),
        revision=revision_text(revision),
        canary_percent=canary_percent,
        bake=_duration("--bake", bake),
        timeout=_duration("--timeout", timeout),
    )
    with ConsoleProgress(quiet=output == "json") as progress:
        deployer = BlueGreenDeploy(request, runtime.clients, runtime.source, runtime.clock, progress)
        if dry_run:
            _print(deployer.plan(), output)
            return
        confirm_or_abort(
            f"Deploy {revision} ({request.image.image}) to {service} in stack {stack}?", assume_yes=yes
        )
        try:
            result = deployer.run()
        except KeyboardInterrupt:
            progress.close()
            click.echo(
                "\nInterrupted; the service is still serving. Run the same command again to resume, "
                "or deploy another revision to roll this one back.",
                err=True,
            )
            sys.exit(INTERRUPTED_EXIT)
    _print(result, output)
    if not result.succeeded:
        sys.exit(1)


def _duration(flag: str, text: str) -> timedelta:
    from guardrails.durations import DurationError, parse_duration

    try:
        return parse_duration(text)
    except DurationError as error:
        raise click.BadParameter(str(error), param_hint=flag) from None


def _print(result: DeployResult, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(result.as_json(), indent=2))
        return

    from cli.verify import print_checks

    console = make_console()
    if result.outcome == "dry-run":
        console.print(f"[bold]Dry run[/bold]: {result.service} is {result.phase}; a deploy would:")
        for number, step in enumerate(result.steps, 1):
            console.print(f"  {number}. {step}")
        return
    if result.verification:
        print_checks(console, result.verification)
    _print_outcome(console, result)


def _print_outcome(console: Console, result: DeployResult) -> None:
    for warning in result.warnings:
        console.print(f"[yellow]warning[/yellow]: {warning}")
    if result.outcome == "rolled-back":
        console.print(f"[bold red]Rolled back[/bold red]: {result.reason}")
        for error in result.rollback_errors:
            console.print(f"[red]rollback step failed[/red]: {error}")
        serving = "still serves" if not result.rollback_errors else "should still serve; check it"
        console.print(f"{result.old_colour} {serving} the previous revision.")
        return
    if result.outcome == "verify-failed":
        console.print(
            f"[bold red]{result.new_colour} takes the traffic but does not verify[/bold red]: {result.reason}"
        )
        return
    verb = "already serves" if result.outcome == "already-serving" else "now serves"
    console.print(f"[bold green]{result.new_colour} {verb} {result.revision}[/bold green] ({result.image})")
    edit = result.config_edit
    if edit and edit.changed:
        console.print(
            f"{edit.path.name}: {edit.key} is now {edit.after}. Commit it, so the next "
            "`pulumi up` keeps this colour live."
        )


class ConsoleProgress:
    """Steps as lines and waits as live progress bars, on stderr so stdout stays the result.

    Quiet (for ``--output json``) it shows nothing: the JSON result says everything.
    """

    def __init__(self, *, quiet: bool = False) -> None:

        self.console = make_console(stderr=True, quiet=quiet)
        self._bars: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()

    def step(self, message: str) -> None:
        self.close()
        self.console.print(f"• {message}")

    def waiting(self, label: str, done: int, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

        if self._bars is None:
            columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
            self._bars = Progress(*columns, console=self.console)
            self._bars.start()
        if label not in self._tasks:
            self._tasks[label] = self._bars.add_task(label, total=total)
        self._bars.update(self._tasks[label], completed=done, total=max(total, 1))

    def close(self) -> None:
        if self._bars is not None:
            self._bars.stop()
        self._bars, self._tasks = None, {}
