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
    "--account", "-a", "accounts", multiple=True, metavar="ID",
    help="Only decisions about hosts in this AWS account (repeatable): the hub's one ledger holds the "
    "central sweep's decisions for every member account. With --accounts or --org: a name or id of that "
    "list, as c7n-org's -a.",
)  # fmt: skip
@click.option(
    "--accounts", "accounts_file", type=click.Path(exists=True, dir_okay=False),
    help="Only the accounts of this c7n-org account list (accounts.yml), each shown by its name.",
)  # fmt: skip
@click.option(
    "--org", is_flag=True,
    help="Only the AWS Organization's active accounts (ListAccounts, as the management account or a "
    "delegated administrator), each shown by its name.",
)  # fmt: skip
@click.option(
    "--not-account", "not_accounts", multiple=True, metavar="NAME",
    help="With --accounts or --org: leave out this account (name or id), as c7n-org's --not-accounts.",
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
    org: bool,
    not_accounts: tuple[str, ...],
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
      parkbrake log --org --not-account sandbox --since 1d
    """
    ids, names = selected_accounts(accounts, accounts_file=accounts_file, org=org, excluded=not_accounts)
    entries, limit = read_log(
        instance_id=check_instance_id(instance_id),
        tenant=tenant,
        since=since,
        kinds=check_kinds(kinds),
        accounts=ids,
        limit=limit,
    )
    if output == "json":
        click.echo(json.dumps(as_json(entries, limit), indent=2))
    else:
        from cli.console import console

        click.echo(as_text(entries, limit, width=console().width, account_names=names))


def selected_accounts(
    accounts: Sequence[str], *, accounts_file: str | None, org: bool, excluded: Sequence[str]
) -> tuple[list[str], dict[str, str]]:
    """The account ids whose decisions are shown, and the name each is shown by.

    ``--account`` alone: those ids. With a list, c7n-org's account list (``--accounts FILE``) or the
    organisation's (``--org``, read from Organizations as ``status --org`` reads it:
    cli/oncall/organisation.py), its accounts narrowed by ``--account`` (a name or id) and
    ``--not-account``, each named as the list names it. Bad input is one line, exit 2."""
    from pathlib import Path

    from cli.oncall.organisation import OrganisationScope, scope_accounts

    scope = OrganisationScope(
        accounts_file=Path(accounts_file) if accounts_file else None,
        org=org,
        names=tuple(accounts),
        excluded=tuple(excluded),
    )
    if not scope.spans_accounts:
        if excluded:
            raise InputError("--not-account leaves an account out of --accounts FILE or --org: add one")
        return [check_account_id(account) for account in accounts], {}
    from lambdas.clients import one_session_clients

    named = {account.account_id: account.name for account in scope_accounts(scope, one_session_clients())}
    return list(named), named


def check_account_id(account: str) -> str:
    try:
        return ACCOUNT_ID.convert(account, None, None)
    except click.BadParameter as error:
        raise InputError(f"--account: {error.message}") from None


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
