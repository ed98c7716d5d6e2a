"""A managed stopped host whose StateTransitionReason gives no time: reported, never terminated, since
nobody can tell how long it has been stopped."""

from __future__ import annotations

from guardrails.rules.base import STOPPED, Rule, Subject, always


def _unknown(subject: Subject) -> str | None:
    host = subject.host
    if not host.managed or host.stopped_at is not None:
        return None
    reason = (
        f"stopped since an unknown time (StateTransitionReason {host.state_reason!r}); "
        "never terminated by the sweep"
    )
    if subject.storage is not None:
        reason += f"; its {subject.storage.describe()}"
    return reason


RULE = Rule(
    name="stopped-since-unknown",
    description="a managed GPU host stopped at a time EC2 does not say",
    filter=_unknown,
    action=always("report"),
    states=STOPPED,
)
