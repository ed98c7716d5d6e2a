"""``parkbrake deploy``: a blue-green deploy of the inference service, pinned to an image digest."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

import click

from cli.console import console as make_console
from cli.main import INTERRUPTED_EXIT
from cli.options import (
    DURATION,
    confirm_or_abort,
    dry_run_option,
    output_option,
    project_dir_option,
    stack_option,
    wide_option,
    yes_option,
)

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from cli.oncall.deploy.abort import AbortResult
    from cli.oncall.deploy.engine import DeploySettings
    from cli.oncall.deploy.phases import DeployResult, DeployTarget


def rollout_options(*, canary_takes: str, draining: str) -> Callable[[F], F]:
    """--canary, --bake and --timeout, shared by deploy and rollback (only the help's subject differs)."""

    def decorate(command: F) -> F:
        command = click.option(
            "--timeout",
            type=DURATION,
            default="20m",
            show_default=True,
            help=f"How long the colour may take to become healthy (and {draining} to drain).",
        )(command)
        command = click.option(
            "--bake",
            type=DURATION,
            default="5m",
            show_default=True,
            help="How long the canary must stay healthy.",
        )(command)
        return click.option(
            "--canary",
            "canary_percent",
            type=click.IntRange(1, 50),
            default=10,
            show_default=True,
            help=f"Percent of traffic {canary_takes} takes while it bakes.",
        )(command)

    return decorate


def steal_lock_option(command: F) -> F:
    """--steal-lock, shared by deploy (and --abort) and rollback."""
    return click.option(
        "--steal-lock",
        is_flag=True,
        help="Take over the service's deploy lease when its holder is gone (the lease expired), after "
        "a confirmation (or --yes). A lease still renewed by a running deploy is never taken.",
    )(command)


@click.command()
@click.argument("service")
@click.option(
    "--image",
    help="The image: an ECR tag (resolved to its digest) or REPO@sha256:…. Required unless --abort.",
)
@click.option("--revision", help="The git commit the image was built from. Required unless --abort.")
@click.option(
    "--abort",
    is_flag=True,
    help="Stop the deploy in progress: all traffic back to the live colour, the other colour to zero, "
    "the extra host removed.",
)
@stack_option
@rollout_options(canary_takes="the new colour", draining="the old one")
@click.option("--allow-tag", is_flag=True, help="Accept a tag that cannot be resolved to a digest.")
@steal_lock_option
@project_dir_option
@dry_run_option
@yes_option
@output_option
@wide_option
def deploy(
    *,
    service: str,
    image: str | None,
    revision: str | None,
    abort: bool,
    stack: str,
    canary_percent: int,
    bake: timedelta,
    timeout: timedelta,
    allow_tag: bool,
    steal_lock: bool,
    project_dir: Path,
    dry_run: bool,
    yes: bool,
    output: str,
) -> None:
    """Deploy IMAGE as REVISION to SERVICE (e.g. inference), blue-green; or --abort one.

    Registers a task definition pinned to the image's digest and labelled with the revision,
    starts it on the idle colour with one extra GPU host, waits for healthy targets, sends it
    the canary share, bakes, sends it everything, verifies, then scales the old colour and the
    extra host away and sets the stack's live_colour (commit that file).

    Any failure rolls back (the old revision keeps serving) and exits 1. Ctrl-C leaves the service
    serving and exits 130: run the same command again to resume, --abort to undo it, or deploy
    another revision to roll the interrupted one back. State is read from AWS, so any engineer can
    resume or abort.

    A deploy, a rollback or an abort holds the service's lease in the stack's guardrails table while
    it runs; a second one exits 1 naming the holder. --steal-lock takes over a lease whose holder is
    gone (expired), after a confirmation. A run that lost its lease (taken over, or lapsed while it
    stood still) stops before its next AWS write and exits 1, rolling nothing back.

    \b
    Example:
      parkbrake deploy inference --stack dev --revision 9e8d7c6 \\
          --image 123456789012.dkr.ecr.us-east-1.amazonaws.com/inference:9e8d7c6
      parkbrake deploy inference --stack dev --abort
    """
    from cli.oncall.deploy.engine import DeploySettings
    from cli.oncall.deploy.phases import DeployTarget
    from stacks.config import stack_file

    target = DeployTarget.from_stack_file(stack, service, stack_file(stack, project_dir))
    if abort:
        if image or revision:
            raise click.UsageError("--abort takes no --image or --revision: it returns to the live colour")
        _abort(target, timeout=timeout, dry_run=dry_run, yes=yes, output=output, steal_lock=steal_lock)
        return
    if not image or not revision:
        missing = [flag for flag, value in (("--image", image), ("--revision", revision)) if not value]
        raise click.UsageError(f"missing {' and '.join(missing)} (or pass --abort)")
    settings = DeploySettings(canary_percent, bake, timeout, dry_run, steal_lock)
    _deploy(
        target, image=image, revision=revision, allow_tag=allow_tag, settings=settings, yes=yes, output=output
    )


@click.command()
@click.argument("service")
@stack_option
@rollout_options(canary_takes="the previous revision", draining="the other one")
@steal_lock_option
@project_dir_option
@dry_run_option
@yes_option
@output_option
@wide_option
def rollback(
    *,
    service: str,
    stack: str,
    canary_percent: int,
    bake: timedelta,
    timeout: timedelta,
    steal_lock: bool,
    project_dir: Path,
    dry_run: bool,
    yes: bool,
    output: str,
) -> None:
    """Deploy SERVICE's previous verified revision again, blue-green, as `deploy` would.

    The previous verified revision is the newest task definition a deploy verified serving
    (tagged parkbrake:verified) whose revision is not the one serving now; its image is the digest
    it ran. Exit codes as for deploy.

    \b
    Example:
      parkbrake rollback inference --stack dev
    """
    from cli.oncall.deploy.engine import DeploySettings, previous_revision
    from cli.oncall.deploy.phases import DeployTarget
    from cli.oncall.deploy.runtime import Runtime
    from stacks.config import stack_file

    target = DeployTarget.from_stack_file(stack, service, stack_file(stack, project_dir))
    runtime = Runtime.of(click.get_current_context().obj)
    serving, previous = previous_revision(target, runtime, dry_run=dry_run, steal_lock=steal_lock)
    facts = previous.facts
    assert facts.revision_label is not None
    if output == "text":
        click.echo(
            f"Rolling {service} back from {serving.revision_label} to {facts.revision_label} "
            f"({facts.name}, verified {previous.verified_at})",
            err=True,
        )
    settings = DeploySettings(canary_percent, bake, timeout, dry_run, steal_lock, "rollback")
    _deploy(
        target,
        image=facts.image,
        revision=facts.revision_label,
        allow_tag=False,
        settings=settings,
        yes=yes,
        output=output,
    )


def _deploy(
    target: DeployTarget,
    *,
    image: str,
    revision: str,
    allow_tag: bool,
    settings: DeploySettings,
    yes: bool,
    output: str,
) -> None:
    """The engine's deploy, shown: the plan or the result, exit 1 when it did not succeed, 130 on Ctrl-C."""
    from cli.oncall.deploy import engine
    from cli.oncall.deploy.runtime import Runtime

    runtime = Runtime.of(click.get_current_context().obj)
    with ConsoleProgress(quiet=output == "json") as progress:
        try:
            result = engine.deploy(
                target,
                image=image,
                revision=revision,
                allow_tag=allow_tag,
                settings=settings,
                runtime=runtime,
                progress=progress,
                confirm=partial(confirm_or_abort, assume_yes=yes),
            )
        except KeyboardInterrupt:
            progress.close()
            click.echo(
                "\nInterrupted; the service is still serving. Run the same command again to resume, "
                f"`parkbrake deploy {target.service} --stack {target.stack} --abort` to undo it, "
                "or deploy another revision to roll this one back.",
                err=True,
            )
            sys.exit(INTERRUPTED_EXIT)
    _print(result, output)
    if not result.succeeded:
        sys.exit(1)


def _abort(
    target: DeployTarget,
    *,
    timeout: timedelta,
    dry_run: bool,
    yes: bool,
    output: str,
    steal_lock: bool = False,
) -> None:
    from cli.oncall.deploy import engine
    from cli.oncall.deploy.runtime import Runtime

    def confirm_plan(plan: AbortResult) -> None:
        if output == "text":
            _print_abort(plan)
        confirm_or_abort(
            f"Abort the deploy of {target.service}, returning it to {plan.live}?", assume_yes=yes
        )

    with ConsoleProgress(quiet=output == "json") as progress:
        result = engine.abort(
            target,
            timeout=timeout,
            dry_run=dry_run,
            steal_lock=steal_lock,
            runtime=Runtime.of(click.get_current_context().obj),
            progress=progress,
            confirm_plan=confirm_plan,
            confirm=partial(confirm_or_abort, assume_yes=yes),
        )
    if output == "json":
        click.echo(json.dumps(result.as_json(), indent=2))
    else:
        _print_abort(result)
    if result.errors:
        sys.exit(1)


def _print_abort(result: AbortResult) -> None:
    console = make_console()
    if result.outcome == "nothing-to-abort":
        console.print(
            f"No deploy in progress: {result.live} serves {result.service} alone; nothing to abort."
        )
        return
    heading = {"dry-run": "Dry run: an abort would", "aborted": "Aborted", "failed": "Abort incomplete"}
    console.print(f"[bold]{heading.get(result.outcome, 'An abort will')}[/bold]:")
    for step in result.steps:
        console.print(f"  • {step}")
    for warning in result.warnings:
        console.print(f"[yellow]warning[/yellow]: {warning}")
    for error in result.errors:
        console.print(f"[red]step failed[/red]: {error}")
    if result.outcome == "aborted":
        console.print(f"[bold green]{result.live} serves {result.service} alone again.[/bold green]")


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
