"""``parkbrake log``: the guardrails' decision log, from the ledger database (``PARKBRAKE_DATABASE_URL``)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from cli.options import TENANT, output_option
from guardrails.durations import DurationError, parse_duration
from guardrails.errors import InputError

if TYPE_CHECKING:
    from lambdas.ledger.decisions import LoggedDecision

WIDTH = 80  # the text output fits an 80-column terminal; an id or ARN is never cut, only moved
DEFAULT_LIMIT = 200
SINCE_HINT = (
    "a duration back from now (90m, 2h, 7d) or an ISO-8601 date or time (2025-05-01, 2025-05-01T12:00Z)"
)


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: ``7d`` (ago) or an ISO-8601 date or time; a time without an offset is UTC."""
    try:
        return now - parse_duration(text, ceiling=None)
    except DurationError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"--since: {text!r} is neither {SINCE_HINT}") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def check_instance_id(instance_id: str | None) -> str | None:
    if instance_id is not None and not (instance_id.startswith("i-") and instance_id[2:].isalnum()):
        raise InputError(f"--instance: {instance_id!r} is not an EC2 instance id, e.g. i-0123456789abcdef0")
    return instance_id


@click.command(name="log")
@click.option("--instance", "instance_id", metavar="ID", help="Only this host's decisions (i-…).")
@click.option(
    "--tenant", type=TENANT, metavar="T", help="Only decisions about this tenant's hosts and budget."
)
@click.option("--since", metavar="WHEN", help="From WHEN on: 7d, 2h (ago) or an ISO-8601 date or time.")
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
@output_option
def log(
    *,
    instance_id: str | None,
    tenant: str | None,
    since: str | None,
    kinds: tuple[str, ...],
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
    """
    entries, limit = read_log(
        instance_id=check_instance_id(instance_id),
        tenant=tenant,
        since=parse_since(since, datetime.now(UTC)) if since else None,
        kinds=check_kinds(kinds),
        limit=limit,
    )
    if output == "json":
        click.echo(json.dumps(as_json(entries, limit), indent=2))
    else:
        click.echo(as_text(entries, limit))


def check_kinds(kinds: Sequence[str]) -> list[str]:
    from guardrails.decisions import KINDS

    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise InputError(f"--kind: {', '.join(map(repr, unknown))} unknown; the kinds are {', '.join(KINDS)}")
    return list(kinds)


def read_log(
    *, instance_id: str | None, tenant: str | None, since: datetime | None, kinds: list[str], limit: int
) -> tuple[list[LoggedDecision], int]:
    from lambdas.ledger.decisions import DecisionLedger
    from lambdas.ledger.store import store_from_environment

    store = store_from_environment()
    try:
        entries = DecisionLedger.of(store).read(
            instance_id=instance_id, tenant=tenant, since=since, kinds=kinds, limit=limit
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


def as_text(entries: Sequence[LoggedDecision], limit: int) -> str:
    """One block per decision: when, what and about which host; who; why; the details."""
    if not entries:
        return "no decisions match"

    def wrap(text: str) -> list[str]:
        return textwrap.wrap(
            text,
            WIDTH,
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
        lines = textwrap.wrap(
            "  ".join(header), WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )
        by = f"  by {decision.actor}"
        # An ARN longer than a line gets a line of its own, whole: an id is never cut.
        lines += [by] if len(by) <= WIDTH else ["  by", decision.actor]
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
