"""Stop a managed accelerator host that has run past its cap (and past any valid exemption).

Not a Karpenter node: the cluster reclaims those, and karpenter-unreclaimed is the sweep's backstop."""

from __future__ import annotations

from guardrails.durations import format_duration
from guardrails.rules.base import STOP_PATH_PERMISSIONS, Rule, Subject, always, instant


def _past_deadline(subject: Subject) -> str | None:
    deadline = subject.deadline
    if deadline is None or not subject.host.accelerator or not deadline.due(subject.now):
        return None
    if deadline.reclaim_grace is not None:  # a Karpenter node: karpenter-unreclaimed judges it
        return None
    ran = format_duration(subject.now - subject.host.launch_time)
    reason = (
        f"ran {ran} since its last start, past its {format_duration(deadline.cap)} cap "
        f"({deadline.cap_source}) by {format_duration(deadline.overrun(subject.now))}"
    )
    if deadline.exempt_until is not None and deadline.exempt_until > deadline.deadline:
        reason += f"; its exemption ended at {instant(deadline.exempt_until)}"
    return reason


RULE = Rule(
    name="past-deadline",
    description="a managed GPU host that has run longer than its cap since it last started",
    filter=_past_deadline,
    action=always("stop"),
    # Through the host's deadline: its cap (tag, pool, else the default), exemption and the ceiling.
    settings=("default_max_runtime", "max_exemption", "max_runtime_ceiling"),
    permissions=STOP_PATH_PERMISSIONS,
)
