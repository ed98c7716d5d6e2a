"""A managed host stopped longer than the retention: reported with what its volumes cost a month, and,
with ``terminate_stopped`` on, snapshotted and terminated (the snapshots first, every one of them)."""

from __future__ import annotations

from datetime import datetime, timedelta

from guardrails.durations import format_duration
from guardrails.hosts import Host
from guardrails.rules.base import STOPPED, Action, Rule, Subject, SweepPolicy, instant


def stopped_too_long(host: Host, now: datetime, retention: timedelta) -> timedelta | None:
    """How long a managed host has been stopped, when that is longer than ``retention``; else None
    (running, unmanaged, within the retention, or EC2 does not say since when)."""
    stopped_at = host.stopped_at
    if not host.managed or stopped_at is None or now - stopped_at <= retention:
        return None
    return now - stopped_at


def _stopped_too_long(subject: Subject) -> str | None:
    host, policy = subject.host, subject.policy
    stopped_for = stopped_too_long(host, subject.now, policy.stopped_retention)
    if stopped_for is None or host.stopped_at is None:
        return None
    reason = (
        f"stopped {format_duration(stopped_for)} (since {instant(host.stopped_at)}), "
        f"past the {format_duration(policy.stopped_retention)} retention"
    )
    if subject.storage is not None:
        reason += f"; its {subject.storage.describe()}"
    if not policy.terminate_stopped:
        reason += "; reported only (guardrails.terminate_stopped is off)"
    return reason


def _action(policy: SweepPolicy) -> Action:
    return "terminate" if policy.terminate_stopped else "report"


RULE = Rule(
    name="stopped-too-long",
    description="a managed GPU host stopped longer than guardrails.stopped_retention",
    filter=_stopped_too_long,
    action=_action,
    states=STOPPED,
    settings=("stopped_retention", "terminate_stopped"),
    # Its volumes priced; with terminate_stopped, each snapshotted (tagged as it is created), then
    # the host terminated.
    permissions=(
        "ec2:DescribeVolumes",
        "ec2:DescribeSnapshots",
        "ec2:CreateSnapshot",
        "ec2:CreateTags",
        "ec2:TerminateInstances",
    ),
)
