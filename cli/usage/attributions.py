"""``parkbrake ledger attribute``: give usage the ledger holds as ``unattributed`` its tenant.

The ledger records the attribution (``lambdas.ledger.attributions``), derives the host again from
``--since`` on (its intervals, the rollups, so reports and runway), and logs it as a decision of
kind ``attribute`` with the caller's ARN and the reason.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from cli.options import TENANT, WHEN, confirm_or_abort, dry_run_option, output_option, yes_option
from guardrails.plurals import counted


def caller_arn() -> str:
    """Who attributes: the caller's ARN (STS), as ``parkbrake extend`` records it."""
    from lambdas.aws.environment import default_clients

    return str(default_clients("sts", None).get_caller_identity()["Arn"])


@click.command()
@click.argument("instance_id")
@click.option("--tenant", type=TENANT, required=True, help="Whose the usage is, e.g. --tenant research.")
@click.option(
    "--since", type=WHEN, required=True,
    help="From when: 7d, 12h (ago), a date or an ISO-8601 instant; the intervals the host opened from "
    "then on take the tenant.",
)  # fmt: skip
@click.option("--until", type=WHEN, help="Up to when, exclusive (as --since); default: from then on.")
@click.option("--pool", help="The pool too (default: the one the events carry), e.g. --pool training.")
@click.option("--reason", required=True, help="Why the usage is this tenant's; recorded in the log.")
@dry_run_option
@yes_option
@output_option
def attribute(
    *,
    instance_id: str,
    tenant: str,
    since: datetime,
    until: datetime | None,
    pool: str | None,
    reason: str,
    dry_run: bool,
    yes: bool,
    output: str,
) -> None:
    """Attribute a host's usage the ledger holds as unattributed (run as the ledger's owner).

    An event of the same launch that names a tenant takes precedence (the ledger attributes those
    itself). The attribution is kept: events of the host that arrive later, inside --since/--until,
    take it too.

    \b
    Example:
      parkbrake ledger attribute i-0abc123def4567890 --tenant research \\
          --since 2026-11-03 --reason "backfill of November; OPS-42"
    """
    from lambdas.ledger.attributions import AttributionRequest, log_attribution
    from lambdas.ledger.attributions import attribute as record
    from lambdas.ledger.store import store_from_environment

    request = AttributionRequest(instance_id, tenant, since, until, pool, caller_arn(), reason)
    store = store_from_environment()
    try:
        preview = record(store, request, dry_run=True)
        if output == "text":
            click.echo(_describe(request, preview))
        if dry_run:
            _report(output, request, preview, dry_run=True)
            return
        confirm_or_abort(
            f"Attribute {instance_id}'s usage from {since.isoformat()} to {tenant}?", assume_yes=yes
        )
        changed = record(store, request, dry_run=False)
        log_attribution(store, request, changed, now=datetime.now(UTC))
    finally:
        store.close()
    _report(output, request, changed, dry_run=False)


def _describe(request: Any, changed: list[Any]) -> str:
    seconds = sum(item.accelerator_ms for item in changed) / 1000
    lines = [
        f"{request.instance_id}: {counted(len(changed), 'interval')}, {seconds:,.0f} accelerator-s "
        f"from {request.since.isoformat()}"
        + (f" until {request.until.isoformat()}" if request.until else "")
        + f" → tenant {request.tenant}"
        + (f", pool {request.pool}" if request.pool else "")
    ]
    lines += [
        f"  {item.as_dict()['started']} – {item.as_dict()['ended'] or 'running'}: "
        f"{item.tenant_before}/{item.pool_before} → {item.tenant_after}/{item.pool_after}"
        for item in changed
    ]
    return "\n".join(lines)


def _report(output: str, request: Any, changed: list[Any], *, dry_run: bool) -> None:
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "instance_id": request.instance_id,
                    "tenant": request.tenant,
                    "pool": request.pool,
                    "since": request.since.isoformat(),
                    "until": request.until.isoformat() if request.until else None,
                    "dry_run": dry_run,
                    "intervals": [item.as_dict() for item in changed],
                },
                indent=2,
            )
        )
    elif dry_run:
        click.echo("Dry run: nothing changed.")
    else:
        click.echo(
            f"Attributed {counted(len(changed), 'interval')} of {request.instance_id} to {request.tenant}."
        )
