"""Report a managed host that belongs to no existing stack: this stack's sweep adopts it under its own cap."""

from __future__ import annotations

from guardrails import tags
from guardrails.durations import format_duration
from guardrails.rules.base import Rule, Subject, always


def _orphaned(subject: Subject) -> str | None:
    if subject.orphan is None or subject.deadline is None:
        return None
    cap = format_duration(subject.deadline.cap)
    named = subject.host.tags.get(tags.STACK, "").strip()
    if named and subject.policy.stack is not None:
        # IAM cannot tell a stack that does not exist from one that does: a stack's roles stop and
        # adopt only hosts of their own stack or of none (components/iam_policies.py).
        return (
            f"orphan ({subject.orphan}); judged by stack {subject.policy.stack!r} under a {cap} cap, but "
            f"stopped only once retagged {tags.STACK}={subject.policy.stack} or by hand"
        )
    return f"orphan ({subject.orphan}); adopted by stack {subject.policy.stack!r} under a {cap} cap"


RULE = Rule(
    name="orphaned",
    description="a managed host whose parkbrake:stack tag is missing or names no stack that exists",
    filter=_orphaned,
    action=always("report"),
)
