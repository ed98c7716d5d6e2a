"""``parkbrake log``: the guardrails' decision log, from the ledger database (``PARKBRAKE_DATABASE_URL``)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from cli.options import ACCOUNT_ID, TENANT, WHEN, output_option, wide_option
from guardrails.errors import InputError

if TYPE_CHECKING:
    from lambdas.ledger.decisions import LoggedDecision

NARROWEST = 40  # below this the blocks are laid out as if for 40 columns
DEFAULT_LIMIT = 200


def check_instance_id(instance_id: str | None) -> str | None:
    if instance_id is not None and not (instance_id.startswith("i-") and instance_id[2:].isalnum()):
        raise InputError(f"--instance: {instance_id!r} is not an EC2 instance id, e.g. i-0123456789abcdef0")
    return instance_id


@click.command(name="log")
@click.option("--instance", "instance_id", metavar="ID", help="Only this host's decisions (i-…).")
@click.option(
    "--tenant", type=TENANT, metavar="T", help="Only decisions about this tenant's hosts and budget."
)
@click.option("--since", type=WHEN, help="From WHEN on: 7d, 12h (ago), a date or an ISO-8601 instant.")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    metavar="KIND",
    help="Only these kinds (repeatable): stop, skip, extend, …",
)
@click.option(
    "--limit",
    default=DEFAULT_LIMIT,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="The newest this many decisions (shown oldest first).",
)
@click.option(
    "--account", "accounts", type=ACCOUNT_ID, multiple=True,
    help="Only decisions about hosts in this AWS account (repeatable): the hub's one ledger holds the "
    "central sweep's decisions for every member account.",
)  # fmt: skip
@click.option(
    "--accounts", "accounts_file", type=click.Path(exists=True, dir_okay=False),
    help="Only the accounts of this c7n-org account list (accounts.yml), each shown by its name.",
)  # fmt: skip
@output_option
@wide_option
def log(
    *,
    instance_id: str | None,
    tenant: str | None,
    since: datetime | None,
    kinds: tuple[str, ...],
    accounts: tuple[str, ...],
    accounts_file: str | None,
    limit: int,
    output: str,
) -> None:
    """The guardrails' decision log: who decided what about a host, and why.

    Every stop, skip, clamp, exemption, extension, budget action and notification, with its actor
    (the guardrail, or the person's ARN) and reason.

    \b
    Example:
      parkbrake log --instance i-0123456789abcdef0
      parkbrake log --tenant research --since 7d --output json
      parkbrake log --accounts accounts.yml --kind stop
    """
    names = account_names(accounts_file)
    entries, limit = read_log(
        instance_id=check_instance_id(instance_id),
        tenant=tenant,
        since=since,
        kinds=check_kinds(kinds),
        accounts=[*accounts, *names],
        limit=limit,
    )
    if output == "json":
        click.echo(json.dumps(as_json(entries, limit), indent=2))
    else:
        from cli.console import console

        click.echo(as_text(entries, limit, width=console().width, account_names=names))


def account_names(accounts_file: str | None) -> dict[str, str]:
    """Each account id of a c7n-org account list, with its name (guardrails/accounts.py checks it:
    every problem with its path, exit 2)."""
    if accounts_file is None:
        return {}
    from pathlib import Path

    from guardrails.accounts import load_accounts

    listed = load_accounts(Path(accounts_file).read_text(encoding="utf-8"), source=accounts_file)
    return {account.account_id: account.name for account in listed}


def check_kinds(kinds: Sequence[str]) -> list[str]:
    from guardrails.decisions import KINDS

    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise InputError(f"--kind: {', '.join(map(repr, unknown))} unknown; the kinds are {', '.join(KINDS)}")
    return list(kinds)


def read_log(
    *,
    instance_id: str | None,
    tenant: str | None,
    since: datetime | None,
    kinds: list[str],
    limit: int,
    accounts: Sequence[str] = (),
) -> tuple[list[LoggedDecision], int]:
    from lambdas.ledger.decisions import DecisionLedger
    from lambdas.ledger.store import store_from_environment

    store = store_from_environment()
    try:
        entries = DecisionLedger.of(store).read(
            instance_id=instance_id,
            tenant=tenant,
            since=since,
            kinds=kinds,
            accounts=accounts or None,
            limit=limit,
        )
    finally:
        store.close()
    return entries, limit


def as_json(entries: Sequence[LoggedDecision], limit: int) -> dict[str, Any]:
    return {
        "decisions": [{"id": entry.id, "key": entry.key, **entry.decision.as_dict()} for entry in entries],
        "count": len(entries),
        "truncated": len(entries) == limit,
    }


def as_text(
    entries: Sequence[LoggedDecision],
    limit: int,
    *,
    width: int = 80,
    account_names: Mapping[str, str] | None = None,
) -> str:
    """One block per decision: when, what and about which host; who; why; the details; each line
    fits ``width`` (the terminal's), and an id, ARN or timestamp is never cut, only moved."""
    if not entries:
        return "no decisions match"
    width = max(width, NARROWEST)

    def wrap(text: str) -> list[str]:
        return textwrap.wrap(
            text,
            width,
            initial_indent="  ",
            subsequent_indent="    ",
            break_long_words=False,
            break_on_hyphens=False,
        )

    blocks = []
    for entry in entries:
        decision = entry.decision
        header = [decision.as_dict()["at"], decision.kind, decision.instance_id or "-"]
        header += [f"tenant={decision.tenant}"] if decision.tenant else []
        account = decision.details.get("account_id")
        header += [f"account={(account_names or {}).get(account, account)}"] if account else []
        header += [f"#{entry.id}"]  # what `ledger savings` cites each figure by
        lines = textwrap.wrap(
            "  ".join(header), width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )
        by = f"  by {decision.actor}"
        # An ARN longer than a line gets a line of its own, whole: an id is never cut.
        lines += [by] if len(by) <= width else ["  by", decision.actor]
        lines += wrap(decision.reason)
        details = " ".join(f"{key}={_plain(value)}" for key, value in sorted(decision.details.items()))
        lines += wrap(details) if details else []
        blocks.append("\n".join(lines))
    if len(entries) == limit:
        blocks.append(
            f"(the newest {limit}; narrow with --since, --instance, --tenant or --kind, or raise --limit)"
        )
    return "\n\n".join(blocks)


def _plain(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value)) or "-"
    return str(value)
