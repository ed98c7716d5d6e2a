"""The nightly window of a Kubernetes stack's pool (pure): is the pool open now, and why.

On EC2 the nightly schedule starts a pool at its cron time (the launcher) and every host stops at its
cap. Karpenter has no desired size to set, so on Kubernetes the same schedule is a window of the
pool's NodePool: open (its GPU limit the nightly ``capacity`` in nodes) from each firing of the cron,
in its time zone, for the pool's cap — the longest any node started then may live — and closed
(limit "0", its nodes deleted) otherwise, and all day on a closed day of the calendar. The shape is
Karpenter's own for disruption budgets, a cron ``schedule`` and a ``duration`` (karpenter v1.14.1
``pkg/apis/v1/nodepool.go`` ``Budget``), which Karpenter does not offer for limits (karpenter #1177,
#2711 ask for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from guardrails.closed_days import ClosedDays
from guardrails.durations import format_duration


@dataclass(frozen=True)
class Window:
    open: bool
    reason: str
    opened_at: datetime | None  # the firing the window counts from (the last one at or before now)
    closes_at: datetime | None  # when an open window closes


def window_at(
    cron: str, timezone: str, length: timedelta, now: datetime, closed: ClosedDays | None = None
) -> Window:
    """The window at ``now`` (aware): open from the last firing of ``cron`` for ``length``, unless the
    calendar closes that firing's local day."""
    from croniter import croniter

    zone = ZoneInfo(timezone)
    local_now = now.astimezone(zone)
    # croniter answers "the last firing at or before now" from just after now
    fired: datetime = croniter(cron, local_now + timedelta(microseconds=1)).get_prev(datetime)
    closes = fired + length
    if local_now >= closes:
        return Window(
            False, f"closed since {closes.isoformat()} (opened {fired.isoformat()} for {format_duration(length)})",
            fired, None,
        )  # fmt: skip
    closure = closed.closure(fired.date()) if closed is not None else None
    if closure is not None:
        return Window(False, f"closed day {fired.date().isoformat()}: {closure}", fired, None)
    return Window(True, f"open from {fired.isoformat()} until {closes.isoformat()}", fired, closes)
