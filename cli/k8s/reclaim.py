"""Karpenter nodes past their cap, reclaimed by deleting their NodeClaim (pure decision).

A GPU node of the stack's NodePools lives at most its pool's cap: the NodePool's ``expireAfter``
(Karpenter's forceful expiry) starts draining it at that age, and ``terminationGracePeriod`` bounds the
drain. A NodeClaim still there, and not being deleted, past cap + grace is one Karpenter did not expire
(its NodePool edited, expiry off, a controller restart lost it): the budget controller deletes it, and
Karpenter drains and terminates the node without launching a replacement for that claim. Stopping
the EC2 instance behind Karpenter's back instead would leave a NotReady node and a claim Karpenter
replaces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from guardrails.durations import format_duration

NODEPOOL_LABEL = "karpenter.sh/nodepool"


@dataclass(frozen=True)
class Reclaim:
    nodeclaim: str
    nodepool: str
    instance_id: str | None  # from status.providerID (aws:///<zone>/<instance id>), once launched
    reason: str


def _created(claim: Mapping[str, Any]) -> datetime | None:
    text = (claim.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(text, str):
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def instance_of(claim: Mapping[str, Any]) -> str | None:
    provider = str((claim.get("status") or {}).get("providerID") or "")
    tail = provider.rsplit("/", 1)[-1]
    return tail if tail.startswith("i-") else None


def overdue_nodeclaims(
    claims: Sequence[Mapping[str, Any]], caps: Mapping[str, timedelta], grace: timedelta, now: datetime
) -> list[Reclaim]:
    """The NodeClaims of the NodePools in ``caps`` (NodePool → cap) older than their cap + ``grace``
    and not already being deleted; a claim of another NodePool is never touched."""
    overdue = []
    for claim in claims:
        meta = claim.get("metadata") or {}
        pool = str((meta.get("labels") or {}).get(NODEPOOL_LABEL, ""))
        created = _created(claim)
        if pool not in caps or created is None or meta.get("deletionTimestamp"):
            continue
        cap = caps[pool]
        age = now - created
        if age <= cap + grace:
            continue
        reason = (
            f"node of NodePool {pool} is {format_duration(age)} old, past its {format_duration(cap)} cap "
            f"and {format_duration(grace)} of drain: Karpenter did not expire it; its NodeClaim is deleted"
        )
        overdue.append(Reclaim(str(meta["name"]), pool, instance_of(claim), reason))
    return overdue
