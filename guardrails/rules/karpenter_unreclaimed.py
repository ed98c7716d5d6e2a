"""Stop a Karpenter node the cluster failed to reclaim: past its cap + its reclaim grace.

The backstop, third in line (guardrails/karpenter.py): Karpenter's ``expireAfter`` at the cap, then the
budget controller's NodeClaim deletion past cap + terminationGracePeriod; only a node still running one
sweep interval after that is stopped here, and the reason tells a person the cluster did not reclaim it.
"""

from __future__ import annotations

from guardrails.durations import format_duration
from guardrails.karpenter import node_name
from guardrails.rules.base import STOP_PATH_PERMISSIONS, Rule, Subject, always


def _unreclaimed(subject: Subject) -> str | None:
    deadline, host = subject.deadline, subject.host
    if deadline is None or deadline.reclaim_grace is None or not host.accelerator:
        return None
    if not deadline.due(subject.now):
        return None
    return (
        f"a Karpenter node ({node_name(host.tags)}) the cluster failed to reclaim: ran "
        f"{format_duration(subject.now - host.launch_time)}, past its {format_duration(deadline.cap)} cap "
        f"({deadline.cap_source}) by {format_duration(deadline.overrun(subject.now))}, beyond its "
        f"{format_duration(deadline.reclaim_grace)} reclaim grace (terminationGracePeriod + one sweep); "
        "neither expireAfter nor the budget controller removed it: check Karpenter and the controller"
    )


RULE = Rule(
    name="karpenter-unreclaimed",
    description="a Karpenter GPU node still running past its cap + terminationGracePeriod + one sweep",
    filter=_unreclaimed,
    action=always("stop"),
    # Through the host's deadline, as past-deadline: its cap, exemption and the ceiling (the grace's bound).
    settings=("default_max_runtime", "max_exemption", "max_runtime_ceiling"),
    permissions=STOP_PATH_PERMISSIONS,
)
