"""``parkbrake extend``: move one host's deadline, within the stack's exemption limit and its ceiling.

Pure: the new deadline and the tags that record it. The extension is an exemption
(``parkbrake:exempt-until``), so the sweep and the deadline schedule honour it by the rules they
already apply to exemptions, bound included; who asked, when and why are recorded beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from guardrails import settings, tags
from guardrails.deadlines import Deadline
from guardrails.decisions import Decision
from guardrails.durations import format_duration
from guardrails.errors import InputError, ParkbrakeError
from guardrails.hosts import Host
from guardrails.rules.base import instant

# EC2 tag values hold at most 256 characters.
TAG_VALUE_LIMIT = 256


class ExtensionRefused(ParkbrakeError):
    """The extension asked for is beyond a limit (exit 1); the message names each limit and the most allowed."""


@dataclass(frozen=True)
class Extension:
    instance_id: str
    previous: datetime  # the deadline the host had (its cap's end, or its exemption's)
    until: datetime  # the new deadline
    by: timedelta
    reason: str
    actor: str  # the caller's ARN
    at: datetime

    def tags(self) -> dict[str, str]:
        return {
            tags.EXEMPT_UNTIL: instant(self.until),
            tags.EXTENDED_BY: self.actor[:TAG_VALUE_LIMIT],
            tags.EXTENDED_AT: instant(self.at),
            tags.EXTENSION_REASON: self.reason,
        }

    def as_dict(self) -> dict[str, str]:
        return {
            "instance_id": self.instance_id,
            "previous_deadline": instant(self.previous),
            "deadline": instant(self.until),
            "by": format_duration(self.by),
            "reason": self.reason,
            "actor": self.actor,
            "at": instant(self.at),
        }


def extension_decision(extension: Extension, host: Host) -> Decision:
    """The decision log's record of the extension: who (the caller's ARN), when and why."""
    return Decision(
        "extend",
        extension.actor,
        extension.reason,
        extension.at,
        host.instance_id,
        host.tenant,
        {
            "previous_deadline": instant(extension.previous),
            "deadline": instant(extension.until),
            "by": format_duration(extension.by),
        },
    )


def check_reason(reason: str | None) -> str:
    text = (reason or "").strip()
    if not text:
        raise InputError("--reason: required; say why the host must run longer (it is recorded on the host)")
    if len(text) > TAG_VALUE_LIMIT:
        raise InputError(
            f"--reason: {len(text)} characters; at most {TAG_VALUE_LIMIT} fit in the host's tag, so shorten it"
        )
    return text


def plan_extension(
    host: Host,
    deadline: Deadline,
    *,
    by: timedelta,
    reason: str,
    actor: str,
    now: datetime,
    max_exemption: timedelta,
    ceiling: timedelta,
) -> Extension:
    """The deadline moved by ``by`` from where it is now (or from now, if it has passed); refused with
    every limit it crosses."""
    base = max(deadline.enforce_at, now)
    until = base + by
    problems = []
    if until - now > max_exemption:
        most = max(max_exemption - (base - now), timedelta(0))
        problems.append(
            f"--by {format_duration(by)}: the new deadline {instant(until)} is {format_duration(until - now)} "
            f"from now, beyond the stack's exemption limit of {format_duration(max_exemption)} "
            f"({settings.MAX_EXEMPTION}, guardrails.max_exemption); the most allowed now is "
            f"--by {format_duration(most)}"
        )
    if until - host.launch_time > ceiling:
        most = max(ceiling - (base - host.launch_time), timedelta(0))
        problems.append(
            f"--by {format_duration(by)}: the host would run {format_duration(until - host.launch_time)} "
            f"since its last start, beyond the stack's runtime ceiling of {format_duration(ceiling)} "
            f"({settings.MAX_RUNTIME_CEILING}, guardrails.max_runtime_ceiling); the most allowed is "
            f"--by {format_duration(most)}"
        )
    if problems:
        raise ExtensionRefused(f"{host.instance_id} not extended:\n  " + "\n  ".join(problems))
    return Extension(host.instance_id, deadline.enforce_at, until, by, check_reason(reason), actor, now)
