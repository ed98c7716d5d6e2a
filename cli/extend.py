"""``parkbrake extend``: move one host's deadline, within the stack's limits, with who and why recorded."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from cli.oncall.organisation import DEFAULT_ORG_ROLE, member_role_arn
from cli.options import DURATION, confirm_or_abort, dry_run_option, output_option, stack_option, yes_option
from guardrails.errors import ParkbrakeError
from guardrails.settings import REGIONS, STACK

if TYPE_CHECKING:
    from lambdas.aws.environment import ClientFactory


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
@click.option(
    "--account",
    help="A member account's host with no deadline armed yet: its 12-digit account id (run from the "
    "hub; the account of an armed deadline is read from it).",
)
@click.option(
    "--org-role",
    default=DEFAULT_ORG_ROLE,
    show_default=True,
    help="A member account's host: the role assumed there to read and tag it (a name, or an ARN "
    "with {account_id}).",
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
    account: str | None,
    org_role: str,
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
    planned = engine.plan(
        instance_id,
        by=by,
        reason=reason,
        environ=environ,
        clients=default_clients,
        now=now,
        account=account,
        member_clients=lambda member, caller: member_account_clients(member, org_role, caller),
    )
    extension, place = planned.extension, planned.place
    if output == "text":
        click.echo("\n".join(engine.describe(extension, planned.host, planned.settings)))
    if dry_run:
        outcome = engine.ExtendOutcome(extension, planned.host, True, None, place.account if place else None)
        click.echo(
            json.dumps(outcome.as_dict(), indent=2) if output == "json" else "Dry run: nothing changed."
        )
        return
    confirm_or_abort(f"Extend {instance_id} to {extension.as_dict()['deadline']}?", assume_yes=yes)
    outcome = engine.apply(planned, environ=environ, clients=default_clients, now=now)
    _echo_outcome(outcome.as_dict(), output)
    if outcome.errors:
        raise ParkbrakeError(
            "the extension is recorded on the host, but: "
            + "; ".join(f"{error['action']}: {error['error']}" for error in outcome.errors)
        )


def _echo_outcome(outcome: dict[str, Any], output: str) -> None:
    if output == "json":
        click.echo(json.dumps(outcome, indent=2))
        return
    warned = outcome["warning_at"]
    click.echo(
        f"Extended {outcome['instance_id']} to {outcome['deadline']}"
        + (f"; its owner is warned at {warned}." if warned else ".")
    )


def member_account_clients(account: str, role: str, caller_arn: str) -> ClientFactory:
    """Clients acting in a member account through ``--org-role`` (as ``status --org`` enters one)."""
    from lambdas.aws.assumed import AccountAccess, AccountSessions

    return AccountSessions().clients(AccountAccess(account, (member_role_arn(role, account, caller_arn),)))
