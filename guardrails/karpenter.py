"""Karpenter nodes in the sweep: the AWS sweep is the last of three lines of defence, not the first.

A node Karpenter launched is reclaimed by the cluster: first Karpenter's own ``expireAfter`` (the pool's
cap) expires it forcefully, then the budget controller deletes a NodeClaim still there past cap +
terminationGracePeriod (cli/k8s/reclaim.py); either way Karpenter drains and terminates the node and
launches none for that claim. Stopping the instance behind Karpenter's back would only make Karpenter
replace it, so the sweep leaves a Karpenter node alone until cap + its reclaim grace
(terminationGracePeriod + one sweep interval, from the node's ``parkbrake:reclaim-grace`` tag) and only
then stops it, as a node the cluster failed to reclaim.

Pure: the deadline (guardrails/deadlines.py) postpones a Karpenter node's enforcement by the grace, and
the ``karpenter-unreclaimed`` rule names what stopping it means.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from guardrails import tags
from guardrails.durations import DurationError, format_duration, parse_duration

# Without the tag: the Kubernetes section's default terminationGracePeriod (30m) + the default sweep (5m).
DEFAULT_RECLAIM_GRACE = timedelta(minutes=35)


def is_karpenter_node(resource_tags: Mapping[str, str]) -> bool:
    """Karpenter tags every instance it launches with its NodePool and NodeClaim; parkbrake's EC2NodeClass
    adds the reclaim grace. Any of them makes the host a node the cluster reclaims."""
    return any(
        key in resource_tags
        for key in (tags.KARPENTER_NODEPOOL, tags.KARPENTER_NODECLAIM, tags.RECLAIM_GRACE)
    )


def reclaim_grace(resource_tags: Mapping[str, str], ceiling: timedelta, problems: list[str]) -> timedelta:
    """How long past its cap a Karpenter node is left to the cluster: the tag, else the default; a tag
    that cannot be read falls back to the default and one longer than ``ceiling`` (the runtime ceiling)
    is clamped to it, each added to ``problems`` (a tag never buys a node more than a ceiling's run)."""
    text = resource_tags.get(tags.RECLAIM_GRACE)
    if text is None:
        return DEFAULT_RECLAIM_GRACE
    try:
        grace = parse_duration(text, ceiling=None)
    except DurationError as error:
        problems.append(f"{tags.RECLAIM_GRACE}: {error}; using {format_duration(DEFAULT_RECLAIM_GRACE)}")
        return DEFAULT_RECLAIM_GRACE
    if grace > ceiling:
        problems.append(
            f"{tags.RECLAIM_GRACE}: {text!r} is longer than the {format_duration(ceiling)} runtime ceiling; "
            f"clamped to it"
        )
        return ceiling
    return grace


def node_name(resource_tags: Mapping[str, str]) -> str:
    """``NodeClaim x7k2p of NodePool research-training``, as far as the tags say."""
    claim, pool = resource_tags.get(tags.KARPENTER_NODECLAIM), resource_tags.get(tags.KARPENTER_NODEPOOL)
    parts = [f"NodeClaim {claim}" if claim else "", f"NodePool {pool}" if pool else ""]
    return " of ".join(part for part in parts if part) or "a Karpenter node"
