"""Report a host whose max-runtime tag asked for more than the stack's ceiling: it runs to the ceiling only."""

from __future__ import annotations

from guardrails import settings, tags
from guardrails.durations import format_duration
from guardrails.rules.base import Rule, Subject, always


def _clamped(subject: Subject) -> str | None:
    deadline = subject.deadline
    if deadline is None or deadline.clamped_from is None:
        return None
    return (
        f"{tags.MAX_RUNTIME} {subject.host.tags.get(tags.MAX_RUNTIME, '')!r} "
        f"({format_duration(deadline.clamped_from)}) is above the ceiling; clamped to "
        f"{format_duration(deadline.cap)} ({settings.MAX_RUNTIME_CEILING})"
    )


RULE = Rule(
    name="cap-above-ceiling",
    description="a host whose parkbrake:max-runtime tag is longer than the stack's ceiling",
    filter=_clamped,
    action=always("report"),
    settings=("max_runtime_ceiling",),
)
