"""An accelerator host nobody put under guardrails: reported, and stopped only when configured."""

from __future__ import annotations

from guardrails import settings, tags
from guardrails.durations import format_duration
from guardrails.rules.base import STOP_PATH_PERMISSIONS, Action, Rule, Subject, SweepPolicy


def _untagged(subject: Subject) -> str | None:
    host = subject.host
    if host.managed or not host.accelerator:
        return None
    value = host.tags.get(tags.MANAGED)
    why = f"{tags.MANAGED} is {value!r}, not 'true'" if value is not None else f"no {tags.MANAGED} tag"
    ran = format_duration(subject.now - host.launch_time)
    if subject.policy.reap_untagged:
        return f"untagged accelerator host ({why}), running {ran}; {settings.REAP_UNTAGGED} is on"
    return (
        f"untagged accelerator host ({why}), running {ran}; "
        f"reported only (set {settings.REAP_UNTAGGED}=true to stop such hosts)"
    )


def _action(policy: SweepPolicy) -> Action:
    return "stop" if policy.reap_untagged else "report"


RULE = Rule(
    name="untagged-accelerator",
    description="a GPU host without parkbrake:managed=true",
    filter=_untagged,
    action=_action,
    settings=("reap_untagged",),
    # With reap_untagged: tag the host as this stack's (so the stop path may stop it), then stop it.
    permissions=("ec2:CreateTags", *STOP_PATH_PERMISSIONS),
)
