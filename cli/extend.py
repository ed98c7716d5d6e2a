"""``parkbrake extend``: move one host's deadline, within the stack's limits, with who and why recorded."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import click

from cli.options import DURATION, confirm_or_abort, dry_run_option, output_option, stack_option, yes_option
from guardrails.errors import ParkbrakeError
from guardrails.settings import REGIONS, STACK


@click.command()
@click.argument("instance_id")
@click.option(
    "--by", "by", type=DURATION, required=True, help="How much later the deadline moves: 30m, 1h, 2h30m."
)
@click.option(
    "--reason",
    required=True,
    help="Why the host must run longer; recorded on the host (parkbrake:extended-reason) and in the log.",
)
@stack_option
@click.option(
    "--region",
    "regions",
    help="Region(s) to look for the host in [default: PARKBRAKE_REGIONS, else aws:region of "
    "Pulumi.<stack>.yaml here, else AWS_REGION].",
)
@dry_run_option
@yes_option
@output_option
def extend(
    *,
    instance_id: str,
    by: timedelta,
    reason: str,
    stack: str,
    regions: str | None,
    dry_run: bool,
    yes: bool,
    output: str,
) -> None:
    """Move one GPU host's deadline later, within the stack's exemption limit and runtime ceiling.

    The deadline moves by --by from where it is now. A request beyond the exemption limit
    (PARKBRAKE_MAX_EXEMPTION) or the runtime ceiling (PARKBRAKE_MAX_RUNTIME_CEILING) is refused,
    naming the limit and the most allowed. Who asked (the caller's ARN), when and why are tagged on
    the host; its deadline and warning schedules move with it.

    \b
    Example:
      parkbrake extend i-0abc123def4567890 --stack dev --by 1h \\
          --reason "eval finishing, ETA 40m"
    """
    from cli.oncall.deadlines import extend as engine
    from cli.oncall.regions import choose_regions
    from lambdas.aws.environment import default_clients

    chosen = choose_regions(regions, "--region", stack=stack)
    now = datetime.now(UTC)
    environ = {**os.environ, STACK: stack, REGIONS: ",".join(chosen)}
    extension, host, settings = engine.plan(
        instance_id,
        by=by,
        reason=reason,
        environ=environ,
        clients=default_clients,
        now=now,
    )
    if output == "text":
        click.echo("\n".join(engine.describe(extension, host, settings)))
    if dry_run:
        outcome = engine.ExtendOutcome(extension, host, True, None)
        click.echo(
            json.dumps(outcome.as_dict(), indent=2) if output == "json" else "Dry run: nothing changed."
        )
        return
    confirm_or_abort(f"Extend {instance_id} to {extension.as_dict()['deadline']}?", assume_yes=yes)
    outcome = engine.apply(extension, host, settings, environ=environ, clients=default_clients, now=now)
    if output == "json":
        click.echo(json.dumps(outcome.as_dict(), indent=2))
    else:
        warned = outcome.as_dict()["warning_at"]
        click.echo(
            f"Extended {instance_id} to {outcome.as_dict()['deadline']}"
            + (f"; its owner is warned at {warned}." if warned else ".")
        )
    if outcome.errors:
        raise ParkbrakeError(
            "the extension is recorded on the host, but: "
            + "; ".join(f"{error['action']}: {error['error']}" for error in outcome.errors)
        )
