"""What one sweep tells people: every host stopped, failed to stop, orphaned, unmanaged or clamped.

Pure: the reaper passes the verdicts, what the stop path did and the errors; this module decides which
notices there are, the key each is remembered by (so a repeated finding is sent at most once a day)
and the text of the one message a sweep publishes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from guardrails.durations import format_duration
from guardrails.hosts import Host
from guardrails.owners import owner_of, owners_of
from guardrails.pricing import cost_since_start, load_price_table
from guardrails.rules.base import instant
from guardrails.sweep import Verdict

# How often the same finding about the same host may reach people.
REPEAT_AFTER = timedelta(days=1)
SUBJECT_LIMIT = 100  # SNS refuses longer subjects

# The rule behind a report, in the words of a notice.
KIND_OF_RULE = {
    "untagged-accelerator": "unmanaged",
    "orphaned": "orphaned",
    "cap-above-ceiling": "clamped",
    "malformed-tags": "malformed-tags",
}
SECTIONS = (
    ("stopped", "Stopped"),
    ("failed", "Failed to stop"),
    ("finding", "Findings"),
    ("error", "Errors"),
)
ACTION_WORDS = {
    "tag": "tagged as managed, to be stopped",
    "stop": "stopped",
    "terminate": "terminated (spot)",
    "remove-from-group": "removed from its Auto Scaling group (desired capacity decremented)",
    "rotate": "rotated: removed from its group once its replacement was healthy",
    "retire": "terminated after a snapshot of each of its volumes (stopped too long)",
}


@dataclass(frozen=True)
class Notice:
    section: str  # stopped, failed, finding or error
    subject: str  # the instance id, or the region for an error that is not about one host
    action: str
    reason: str
    # What de-duplication remembers; None for a stop, which happens once and is always sent.
    key: str | None
    host: Host | None = None
    running: timedelta | None = None
    cost_usd: Decimal | None = None

    def lines(self) -> list[str]:
        if self.host is None:
            return [f"- {self.subject}: {self.action}: {self.reason}"]
        host = self.host
        cost = f"${self.cost_usd:,.2f}" if self.cost_usd is not None else "unknown (no price for the type)"
        # A stopped host bills its volumes, not its compute: the reason says what they cost.
        state = (
            f"running {format_duration(self.running or timedelta(0))}, cost so far {cost}"
            if host.state == "running"
            else f"{host.state} (no compute billed)"
        )
        return [
            f"- {host.instance_id} ({host.region}) Name={host.tags.get('Name') or '-'} "
            f"tenant={host.tenant or '-'} pool={host.pool or '-'} type={host.instance_type} "
            f"owner={owner_of(host.tags) or '-'}",
            f"  {state}",
            f"  action: {self.action}",
            f"  reason: {self.reason}",
        ]


def sweep_notices(
    verdicts: Iterable[Verdict],
    *,
    acted: Mapping[str, str],
    errors: Sequence[Mapping[str, str]],
    now: datetime,
) -> list[Notice]:
    """One notice per host stopped or failed to stop, per report about a host left running, per error.

    ``acted`` maps each instance id taken off the bill to its action (stop, terminate,
    remove-from-group); ``errors`` are ``{"instance_id" or "region", "action", "error"}``.
    """
    failures = {
        error["instance_id"]: error
        for error in errors
        if "instance_id" in error and error.get("action") in ACTION_WORDS
    }
    notices: list[Notice] = []
    for verdict in verdicts:
        host = verdict.host
        found = "; ".join(f"{finding.rule}: {finding.reason}" for finding in verdict.reports)
        if host.instance_id in acted:
            reason = verdict.reason + (f" (also {found})" if found else "")
            words = ACTION_WORDS.get(acted[host.instance_id], acted[host.instance_id])
            notices.append(_about(host, "stopped", words, reason, key=None, now=now))
        elif host.instance_id in failures:
            failure = failures[host.instance_id]
            action = f"failed to {failure['action']}: {failure['error']}"
            key = f"{host.instance_id}/failed-{failure['action']}"
            notices.append(_about(host, "failed", action, verdict.reason, key=key, now=now))
        else:
            for finding in verdict.reports:
                kind = KIND_OF_RULE.get(finding.rule, finding.rule)
                notices.append(
                    _about(
                        host,
                        "finding",
                        f"reported ({kind})",
                        finding.reason,
                        key=f"{host.instance_id}/{kind}",
                        now=now,
                    )
                )
    for error in errors:
        if error.get("instance_id") in failures and error.get("action") in ACTION_WORDS:
            continue  # told above, with the host
        subject = error.get("instance_id") or error.get("region") or "sweep"
        action = f"could not {error.get('action', 'act')}"
        notices.append(Notice("error", subject, action, error["error"], f"{subject}/{error.get('action')}"))
    return notices


def _about(host: Host, section: str, action: str, reason: str, *, key: str | None, now: datetime) -> Notice:
    running, cost = running_cost(host, now)
    return Notice(section, host.instance_id, action, reason, key, host, running, cost)


def running_cost(host: Host, now: datetime) -> tuple[timedelta, Decimal | None]:
    """How long the host has run since its last start, and what that cost (None: no price for its type)."""
    running = now - host.launch_time
    price = load_price_table().on_demand_in(host.instance_type, host.region)
    return running, cost_since_start(price.usd_per_hour, running) if price else None


def owners(notices: Iterable[Notice]) -> list[str]:
    """The valid owners of the hosts the notices are about, each once, in order."""
    return owners_of(notice.host.tags for notice in notices if notice.host is not None)


def compose(stack: str | None, notices: Sequence[Notice], *, repeats: int, now: datetime) -> tuple[str, str]:
    """The subject and body of the sweep's one message; the subject counts exactly what the body holds."""
    counts = {section: sum(notice.section == section for notice in notices) for section, _ in SECTIONS}
    subject = (
        f"parkbrake {stack or ''} sweep: {counts['stopped']} stopped, "
        f"{counts['failed'] + counts['error']} error(s), {counts['finding']} finding(s)"
    )
    body = [f"The parkbrake sweep of stack {stack or '-'} at {instant(now)}.", ""]
    for section, title in SECTIONS:
        chosen = [notice for notice in notices if notice.section == section]
        if chosen:
            body.append(f"{title} ({len(chosen)}):")
            body += [line for notice in chosen for line in notice.lines()]
            body.append("")
    if repeats:
        body.append(
            f"{repeats} finding(s) already sent within the last {format_duration(REPEAT_AFTER)} "
            "are not repeated."
        )
    return " ".join(subject.split())[:SUBJECT_LIMIT], "\n".join(body).rstrip() + "\n"
