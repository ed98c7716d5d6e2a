"""When a host must stop: its last start plus its cap, postponed only by a bounded exemption.

The cap comes from the ``parkbrake:max-runtime`` tag, else the pool's default, else the stack's.
A tag that cannot be used never lets a host run longer: it falls back to the next default and is
reported, and so does an exemption that is malformed or reaches further ahead than policy allows.
No cap exceeds the stack's ceiling: a longer tag is clamped to it (and the clamp is reported). An
orphan (a host of no existing stack) is adopted under the stack's default cap, or its own if shorter.
A Karpenter node is enforced only its reclaim grace after its deadline (guardrails/karpenter.py): until
then the cluster reclaims it, and the sweep is the backstop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from guardrails import tags
from guardrails.durations import DurationError, format_duration, parse_duration
from guardrails.hosts import Host
from guardrails.karpenter import is_karpenter_node, reclaim_grace


@dataclass(frozen=True)
class Deadline:
    instance_id: str
    cap: timedelta
    cap_source: str  # "tag", "pool", "stack", or "ceiling" when a longer tag was clamped
    deadline: datetime  # launch_time + cap
    exempt_until: datetime | None  # a valid exemption (possibly already over)
    enforce_at: datetime  # max(deadline (+ reclaim_grace), exempt_until)
    problems: tuple[str, ...]  # tags that were ignored, and why
    clamped_from: timedelta | None = None  # the tag's cap when the ceiling shortened it
    # A Karpenter node's: how long past its deadline the cluster has to reclaim it; None for other hosts.
    reclaim_grace: timedelta | None = None

    def due(self, now: datetime) -> bool:
        """A host is due at its deadline exactly: running ``cap`` is allowed, a second more is not."""
        return now >= self.enforce_at

    def overrun(self, now: datetime) -> timedelta:
        """How long the host has run past its cap (zero before the deadline)."""
        return max(now - self.deadline, timedelta(0))


def deadline_for(
    host: Host,
    *,
    pool_caps: Mapping[str, timedelta],
    default_cap: timedelta,
    max_exemption: timedelta,
    ceiling: timedelta,
    now: datetime,
    orphan: bool = False,
) -> Deadline:
    problems: list[str] = []
    # An orphan's pool belongs to a stack that does not exist here: only its tag and our default count.
    cap, cap_source = cap_for(host.tags, host.pool, {} if orphan else pool_caps, default_cap, problems)
    if orphan and cap > default_cap:
        cap, cap_source = default_cap, "stack"
    clamped_from = None
    if cap > ceiling:
        clamped_from, cap, cap_source = cap, ceiling, "ceiling"
    deadline = host.launch_time + cap
    exempt_until = _exemption(host, max_exemption, now, problems)
    grace = reclaim_grace(host.tags, ceiling, problems) if is_karpenter_node(host.tags) else None
    backstop = deadline + grace if grace is not None else deadline
    enforce_at = max(backstop, exempt_until) if exempt_until is not None else backstop
    return Deadline(
        instance_id=host.instance_id,
        cap=cap,
        cap_source=cap_source,
        deadline=deadline,
        exempt_until=exempt_until,
        enforce_at=enforce_at,
        problems=tuple(problems),
        clamped_from=clamped_from,
        reclaim_grace=grace,
    )


def cap_for(
    resource_tags: Mapping[str, str],
    pool: str | None,
    pool_caps: Mapping[str, timedelta],
    default_cap: timedelta,
    problems: list[str],
) -> tuple[timedelta, str]:
    """The cap and where it came from ("tag", "pool" or "stack"); an unusable tag is added to ``problems``."""
    text = resource_tags.get(tags.MAX_RUNTIME)
    if text is not None:
        try:
            return parse_duration(text), "tag"
        except DurationError as error:
            problems.append(f"{tags.MAX_RUNTIME}: {error}; using the default cap")
    if pool is not None and pool in pool_caps:
        return pool_caps[pool], "pool"
    return default_cap, "stack"


def _exemption(host: Host, max_exemption: timedelta, now: datetime, problems: list[str]) -> datetime | None:
    text = host.tags.get(tags.EXEMPT_UNTIL)
    if text is None:
        return None
    try:
        exempt_until = parse_instant(text)
    except ValueError as error:
        problems.append(f"{tags.EXEMPT_UNTIL}: {error}; ignored")
        return None
    if exempt_until - now > max_exemption:
        problems.append(
            f"{tags.EXEMPT_UNTIL}: {text!r} is more than {format_duration(max_exemption)} ahead, "
            "beyond the policy's limit; ignored"
        )
        return None
    return exempt_until


def parse_instant(text: object) -> datetime:
    """An ISO-8601 instant with an explicit zone (``2025-01-31T22:00:00Z``), as UTC.

    A time without a zone is refused rather than guessed: read in the wrong zone it would exempt a
    host for hours nobody meant. Anything else that is not an instant (not text, a date at the end of
    the calendar that no zone can shift) is the same ValueError, never an OverflowError.
    """
    shown = repr(text) if len(repr(text)) <= 60 else repr(text)[:60] + "…"
    if not isinstance(text, str):
        raise ValueError(f"{shown} is not an ISO-8601 instant such as 2025-01-31T22:00:00Z")
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{shown} is not an ISO-8601 instant such as 2025-01-31T22:00:00Z") from None
    if moment.tzinfo is None:
        raise ValueError(f"{shown} has no timezone; write it in UTC with a trailing Z")
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{shown} is outside the calendar once written in UTC") from None
