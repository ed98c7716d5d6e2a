"""The warning a host's owner receives before its deadline, and when it is sent.

Pure: the warn schedule fires ``warn_before`` ahead of the deadline; when it fires, the host is judged
again, since an extension or a new exemption may have moved its deadline since the schedule was armed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Literal

from guardrails import tags
from guardrails.deadlines import Deadline
from guardrails.decisions import Decision
from guardrails.durations import format_duration
from guardrails.hosts import Host
from guardrails.owners import owner_of
from guardrails.rules.base import instant
from guardrails.sweep_notice import SUBJECT_LIMIT

# Scheduler fires within a minute of its time; a deadline no further off than this is the one warned about.
SLACK = timedelta(minutes=1)
REASON_PLACEHOLDER = "what still needs the host"

# Where a cap came from (guardrails.deadlines.Deadline.cap_source), in a warning's words.
CAP_SOURCES = {
    "tag": f"its {tags.MAX_RUNTIME} tag",
    "pool": "its pool's default",
    "stack": "the stack's default",
    "ceiling": "the stack's ceiling (its tag asked for more)",
}

WarningTiming = Literal["warn", "moved", "due"]


def warning_at(enforce_at: datetime, warn_before: timedelta) -> datetime:
    return enforce_at - warn_before


def warning_timing(deadline: Deadline, now: datetime, warn_before: timedelta) -> WarningTiming:
    """``warn`` now; ``moved`` (the deadline is later than when the schedule was armed: re-arm); ``due``
    (already at its deadline: the deadline's own schedule stops it, a warning would come too late)."""
    if deadline.due(now):
        return "due"
    if deadline.enforce_at - now > warn_before + SLACK:
        return "moved"
    return "warn"


def extend_command(host: Host, stack: str | None) -> str:
    """The exact command that moves this host's deadline, for the owner to copy."""
    where = f" --stack {stack}" if stack else ""
    return (
        f"parkbrake extend {host.instance_id}{where} --region {host.region} "
        f'--by 1h --reason "{REASON_PLACEHOLDER}"'
    )


@dataclass(frozen=True)
class OwnerWarning:
    host: Host
    deadline: Deadline
    now: datetime
    running: timedelta
    cost_usd: Decimal | None
    stack: str | None
    max_exemption: timedelta

    @property
    def owner(self) -> str | None:
        return owner_of(self.host.tags)

    def subject(self) -> str:
        name = self.host.tags.get("Name")
        named = f" ({name})" if name else ""
        text = (
            f"parkbrake {self.stack or ''}: {self.host.instance_id}{named} stops at "
            f"{instant(self.deadline.enforce_at)} unless extended"
        )
        return " ".join(text.split())[:SUBJECT_LIMIT]

    def body(self) -> str:
        host, deadline = self.host, self.deadline
        cost = f"${self.cost_usd:,.2f}" if self.cost_usd is not None else "unknown (no price for the type)"
        owner = self.owner or f"nobody (no valid {tags.OWNER} tag; the on-call subscribers get this)"
        left = format_duration(deadline.enforce_at - self.now)
        lines = [
            f"The GPU host {host.instance_id} will be stopped in {left}, at {instant(deadline.enforce_at)}.",
            "",
            f"  host      {host.instance_id} ({host.region}) Name={host.tags.get('Name') or '-'}",
            f"  tenant    {host.tenant or '-'}  pool={host.pool or '-'}  type={host.instance_type}",
            f"  owner     {owner}",
            f"  running   {format_duration(self.running)} since {instant(host.launch_time)}",
            f"  cost      {cost} so far",
            f"  deadline  {instant(deadline.enforce_at)} ({self._why_then()})",
            "",
            "To keep it running, extend it (at most "
            f"{format_duration(self.max_exemption)} from now, and never past the stack's runtime ceiling):",
            f"  {extend_command(host, self.stack)}",
            "",
            f"Sent {instant(self.now)} by the parkbrake guardrails of stack {self.stack or '-'}.",
        ]
        return "\n".join(lines) + "\n"

    def _why_then(self) -> str:
        deadline = self.deadline
        if deadline.exempt_until is not None and deadline.exempt_until > deadline.deadline:
            return f"exempt until then; its cap of {format_duration(deadline.cap)} ended earlier"
        return f"the end of its {format_duration(deadline.cap)} cap, from {CAP_SOURCES.get(deadline.cap_source, deadline.cap_source)}"


def warning_decision(warning: OwnerWarning, *, actor: str, errors: list[dict[str, str]]) -> Decision:
    """The decision log's record of a warning sent (and any delivery that failed)."""
    owner = warning.owner
    details: dict[str, object] = {
        "deadline": instant(warning.deadline.enforce_at),
        "subject": warning.subject(),
    }
    if owner:
        details["owner"] = owner
    if errors:
        details["errors"] = errors
    return Decision(
        "warn",
        actor,
        f"told {owner or 'the on-call subscribers (no owner)'} that it stops at "
        f"{instant(warning.deadline.enforce_at)} unless extended",
        warning.now,
        warning.host.instance_id,
        warning.host.tenant,
        details,
    )
