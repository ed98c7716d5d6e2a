"""Report a managed host that belongs to no existing stack: this stack's sweep adopts it under its own cap."""

from __future__ import annotations

from guardrails.durations import format_duration
from guardrails.rules.base import Rule, Subject, always


def _orphaned(subject: Subject) -> str | None:
    if subject.orphan is None or subject.deadline is None:
        return None
    cap = format_duration(subject.deadline.cap)
    return f"orphan ({subject.orphan}); adopted by stack {subject.policy.stack!r} under a {cap} cap"


RULE = Rule(
    name="orphaned",
    description="a managed host whose parkbrake:stack tag is missing or names no stack that exists",
    filter=_orphaned,
    action=always("report"),
)
