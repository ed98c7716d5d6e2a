"""The ledger's rules: from EC2 state transitions to intervals, accelerator-milliseconds and cost.

- An interval opens at ``running`` and closes at the first later ``stopping``, ``stopped``,
  ``shutting-down`` or ``terminated``, as AWS bills, or at a later ``running`` whose attribution
  (tenant, pool, type, cap, region, pricing model, zone) differs, which opens the next one. A
  ``running`` with no later stop is open and runs to ``now``.
- Events arrive at least once and in any order: a duplicate event id is ignored (the first copy
  wins) and every event is placed by its own time. Events at the same millisecond are ordered by
  state (``running`` before the stops), then by event id.
- Usage is integer milliseconds: accelerators × elapsed. Cost applies AWS's per-second billing with
  its 60-second minimum per start, at the price in effect over each part of the billed time; money
  is summed exactly as USD-per-hour × milliseconds and rounded once, at the end.

The database computes the same (``lambdas/ledger/migrations``, ``lambdas/ledger/queries.py``); the tests
prove both agree on random event streams.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from guardrails import tags
from guardrails.deadlines import cap_for
from guardrails.errors import InputError
from guardrails.instance_types import is_accelerator
from guardrails.pricing import PriceNotFound
from guardrails.tenants import unknown_tenant

STATES = ("pending", "running", "stopping", "stopped", "shutting-down", "terminated")
STOP_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
STATE_CHANGE = "EC2 Instance State-change Notification"
MINIMUM_BILLED_MS = 60_000
MS_PER_HOUR = 3_600_000
USD_PLACES = 6  # money is reported to the micro-dollar
# Attribution for an accelerator host without the tag: it is still metered, never dropped.
UNATTRIBUTED = "unattributed"
# How a host is bought: EC2's InstanceLifecycle "spot", else on-demand.
ON_DEMAND = "on-demand"
SPOT = "spot"

_STATE_RANK = {state: rank for rank, state in enumerate(STATES)}
# How far after the ledger received it an event's own time may be (the sender's clock running
# ahead); later than that the event is from the future and refused, never appended.
CLOCK_SKEW = timedelta(minutes=5)
# The earliest time an event may have: EC2 opened to the public in August 2006, so no state change
# is older; an earlier time (year 0, seconds read as milliseconds) is a corrupt line, refused.
EARLIEST_EVENT = datetime(2006, 1, 1, tzinfo=UTC)


class MalformedEvent(InputError):
    """An event that is not a well-formed EC2 state-change notification."""


@dataclass(frozen=True)
class StateChange:
    """What an ``EC2 Instance State-change Notification`` says, and nothing else."""

    event_id: str
    instance_id: str
    state: str
    at_ms: int
    region: str
    account: str = ""  # the envelope's ``account`` ('' when the event names none: the ledger's own)


@dataclass(frozen=True)
class Attribution:
    """Who pays for a host and at what size, from its tags and instance type."""

    tenant: str
    pool: str
    instance_type: str
    accelerators: int
    cap_ms: int | None  # the host's cap as the deadlines resolve it; None: the ledger's default applies
    region: str
    pricing_model: str = ON_DEMAND  # ON_DEMAND or SPOT
    zone: str | None = None  # a spot host's availability zone (its spot price is the zone's)


@dataclass(frozen=True)
class Transition:
    """A state change with its attribution: one row of the ledger."""

    event_id: str
    instance_id: str
    state: str
    at_ms: int
    attribution: Attribution
    # The AWS account the host is in (EventBridge's envelope ``account``); '' the ledger's own
    # (docs/ledger.md, *Accounts*). Not part of the attribution: a host never changes account.
    account: str = ""


@dataclass(frozen=True)
class Interval:
    """One start of one host: from its ``running`` to its first stop, or open (``ended_ms`` None)."""

    opened_by: str
    instance_id: str
    attribution: Attribution
    started_ms: int
    ended_ms: int | None
    closed_by: str | None = None
    account: str = ""  # the account of the event that opened it: the host's (docs/ledger.md, *Accounts*)

    @property
    def is_open(self) -> bool:
        return self.ended_ms is None

    def used_until_ms(self, now_ms: int) -> int:
        """Where usage ends: the stop, or ``now`` for a host still running."""
        return self.ended_ms if self.ended_ms is not None else max(self.started_ms, now_ms)

    def billed_until_ms(self, now_ms: int) -> int:
        """Where AWS's bill for this start ends so far (per second, at least 60 s)."""
        return self.started_ms + billable_ms(self.used_until_ms(now_ms) - self.started_ms)

    def projected_until_ms(self, now_ms: int, default_cap_ms: int) -> int:
        """Where the bill ends if the host runs to its cap (or has passed it: to now)."""
        cap_ms = self.attribution.cap_ms or default_cap_ms
        return self.started_ms + billable_ms(max(self.used_until_ms(now_ms) - self.started_ms, cap_ms))


def billable_ms(elapsed_ms: int) -> int:
    """AWS's per-second billing with its 60-second minimum per start."""
    return max(MINIMUM_BILLED_MS, -(-elapsed_ms // 1000) * 1000)


def to_ms(moment: datetime) -> int:
    """Epoch milliseconds of an aware datetime, truncated (the ledger's resolution)."""
    if moment.tzinfo is None:
        raise ValueError(f"{moment!r} has no timezone")
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return delta // timedelta(milliseconds=1)


def from_ms(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def event_time_problem(at_ms: int, received_at: datetime | None) -> str | None:
    """Why an event's time (epoch milliseconds) is outside the ledger's window, or None: before
    :data:`EARLIEST_EVENT`, or more than :data:`CLOCK_SKEW` after ``received_at`` (from the future;
    without ``received_at``, past the last instant a ``datetime`` holds). Never raises, whatever
    ``at_ms``: a time outside the window is not turned into a ``datetime``."""
    if at_ms < to_ms(EARLIEST_EVENT):
        return f"is before {EARLIEST_EVENT.isoformat()}, when EC2 began; fix the line's time"
    if received_at is None:
        return None if at_ms <= to_ms(datetime.max.replace(tzinfo=UTC)) else "is past year 9999"
    received_ms = to_ms(received_at)
    if at_ms - received_ms <= CLOCK_SKEW // timedelta(milliseconds=1):
        return None
    return (
        f"is from the future: more than {CLOCK_SKEW} after the ledger received it at "
        f"{from_ms(received_ms).isoformat()}; check the sender's clock"
    )


def state_change_from_event(event: Mapping[str, Any], *, received_at: datetime | None = None) -> StateChange:
    """Read a native EventBridge event; every problem with it is reported at once. Its time must be
    in the ledger's window (:func:`event_time_problem`, with ``received_at`` when the event is
    being received: every way events enter, the meter, ``ledger ingest`` and ``replay-dlq``, gives it)."""
    if not isinstance(event, Mapping):
        raise MalformedEvent(f"an event is a JSON object, not {type(event).__name__}")
    problems: list[str] = []
    if event.get("detail-type") != STATE_CHANGE:
        problems.append(f"detail-type: expected {STATE_CHANGE!r}, got {event.get('detail-type')!r}")
    detail = event.get("detail")
    if not isinstance(detail, Mapping):
        problems.append("detail: missing")
        detail = {}
    fields = {
        "id": event.get("id"),
        "region": event.get("region"),
        "detail.instance-id": detail.get("instance-id"),
    }
    for name, value in fields.items():
        if not isinstance(value, str) or not value:
            problems.append(f"{name}: missing")
    state = detail.get("state")
    if not isinstance(state, str) or state not in _STATE_RANK:
        problems.append(f"detail.state: {state!r} is not an EC2 instance state")
    at_ms = 0
    try:
        at_ms = to_ms(datetime.fromisoformat(str(event.get("time")).replace("Z", "+00:00")))
    except (ValueError, OverflowError):  # OverflowError: a date no zone can shift into UTC
        problems.append(f"time: {event.get('time')!r} is not an ISO-8601 UTC time")
    else:
        if (why := event_time_problem(at_ms, received_at)) is not None:
            problems.append(f"time: {event.get('time')!r} {why}")
    account = event.get("account", "")
    if not is_account_id(account):
        problems.append(f"account: {account!r} is not a 12-digit AWS account id")
    if problems:
        raise MalformedEvent(f"event {event.get('id')!r}: " + "; ".join(problems))
    return StateChange(
        event_id=str(fields["id"]),
        instance_id=str(fields["detail.instance-id"]),
        state=str(state),
        at_ms=at_ms,
        region=str(fields["region"]),
        account=str(account),
    )


def is_account_id(account: object) -> bool:
    """Whether ``account`` is one an event may carry: an AWS account id (EventBridge's envelope
    field ``account``, "the 12-digit number identifying an AWS account": Amazon EventBridge events
    reference, *event structure*), or '' (none named: the ledger's own account). The appends check
    the same (``ledger_account_passes``, lambdas/ledger/functions/append.sql)."""
    if not isinstance(account, str):
        return False
    return account == "" or (len(account) == 12 and account.isascii() and account.isdigit())


def _iso(ms: int) -> str:
    """``ms`` as an ISO-8601 time, or as milliseconds where no ``datetime`` holds it."""
    try:
        return from_ms(ms).isoformat()
    except OverflowError:
        return f"{ms} ms since the epoch"


def from_the_future(change: StateChange, received_at: datetime, skew: timedelta = CLOCK_SKEW) -> str | None:
    """Why ``change`` is refused as from the future (its time more than ``skew`` after
    ``received_at``), or None when it is not."""
    received_ms = to_ms(received_at)
    if change.at_ms - received_ms <= skew // timedelta(milliseconds=1):
        return None
    return (
        f"from the future: its time {_iso(change.at_ms)} is more than {skew} after the "
        f"ledger received it at {from_ms(received_ms).isoformat()}; check the sender's clock"
    )


def attribution_for(
    instance_type: str,
    host_tags: Mapping[str, str],
    accelerators: int,
    *,
    region: str,
    lifecycle: str | None,
    zone: str | None,
    pool_caps: Mapping[str, timedelta],
    default_cap: timedelta,
    tenants: Collection[str] | None = None,
) -> Attribution | None:
    """Attribution of a host, or None when it carries no accelerator (the ledger does not meter it).

    The cap is the one the deadlines enforce (tag, else pool default, else stack default).
    ``lifecycle`` is EC2's InstanceLifecycle ("spot", else on-demand); ``zone`` the host's
    availability zone, kept for spot hosts only (their price is the zone's). The price is not part of it: the ledger prices usage from its own price table, and meters a type it
    has no price for in exact seconds until one is recorded. The tenant is the tag's value when it
    names one of ``tenants`` exactly (:func:`tenant_refused`), else ``unattributed``.
    """
    if not is_accelerator(instance_type):
        return None
    pool = host_tags.get(tags.POOL, "").strip() or None
    cap, _source = cap_for(host_tags, pool, pool_caps, default_cap, [])
    tenant = host_tags.get(tags.TENANT, "")
    return Attribution(
        tenant=tenant if tenant and tenant_refused(host_tags, tenants) is None else UNATTRIBUTED,
        pool=pool or UNATTRIBUTED,
        instance_type=instance_type,
        accelerators=accelerators,
        cap_ms=cap // timedelta(milliseconds=1),
        region=region,
        pricing_model=SPOT if lifecycle == SPOT else ON_DEMAND,
        zone=zone if lifecycle == SPOT else None,
    )


def tenant_refused(host_tags: Mapping[str, str], tenants: Collection[str] | None) -> str | None:
    """Why a host's ``parkbrake:tenant`` tag names no tenant (``unknown tenant 'Research'``), or None:
    it names one, or there is no tag (a missing tag is the malformed-tags rule's finding)."""
    value = host_tags.get(tags.TENANT)
    return None if not value else unknown_tenant(value, tenants)


def _order(transition: Transition) -> tuple[int, int, str]:
    return transition.at_ms, _STATE_RANK[transition.state], transition.event_id


def intervals_from(transitions: Iterable[Transition]) -> list[Interval]:
    """Every interval of every host in ``transitions`` (any order, duplicates allowed)."""
    unique: dict[str, Transition] = {}
    for transition in transitions:
        unique.setdefault(transition.event_id, transition)
    by_instance: dict[str, list[Transition]] = defaultdict(list)
    for transition in unique.values():
        if transition.state != "pending":
            by_instance[transition.instance_id].append(transition)
    intervals: list[Interval] = []
    for instance_id, history in by_instance.items():
        opened: Transition | None = None
        for transition in sorted(history, key=_order):
            is_running = transition.state == "running"
            if is_running and (opened is None or transition.attribution == opened.attribution):
                opened = opened or transition
                continue
            if opened is not None:
                # A stop ends the open interval; so does a running of another attribution (a retag,
                # a resize, a change of pricing model), which opens the next one.
                intervals.append(
                    Interval(
                        opened.event_id,
                        instance_id,
                        opened.attribution,
                        opened.at_ms,
                        transition.at_ms,
                        transition.event_id,
                        opened.account,
                    )
                )
            opened = transition if is_running else None
        if opened is not None:
            intervals.append(
                Interval(
                    opened.event_id, instance_id, opened.attribution, opened.at_ms, None, None, opened.account
                )
            )
    return intervals


@dataclass(frozen=True, order=True)
class PriceKey:
    """What a price is the price of: on-demand per type and region, spot per type, region and zone."""

    instance_type: str
    region: str
    pricing_model: str = ON_DEMAND
    zone: str | None = None  # spot only

    @classmethod
    def of(cls, who: Attribution) -> PriceKey:
        zone = who.zone if who.pricing_model == SPOT else None
        return cls(who.instance_type, who.region, who.pricing_model, zone)

    @property
    def on_demand(self) -> PriceKey:
        return PriceKey(self.instance_type, self.region)

    def __str__(self) -> str:
        if self.pricing_model == SPOT:
            return f"{self.instance_type} spot in {self.zone or self.region}"
        return f"{self.instance_type} in {self.region}"


@dataclass(frozen=True)
class PriceBook:
    """Prices in effect over time: for each :class:`PriceKey`, ``(from_ms, usd_per_hour)`` ascending.

    A price is in effect from its ``from_ms`` (None: since always) until the next one's of its key.
    A spot host is priced by its zone's spot prices, and before the first of them by its region's
    on-demand prices (the fallback), as the ledger's ``ledger_prices_for`` does.
    """

    ranges: Mapping[PriceKey, tuple[tuple[int | None, Decimal], ...]]

    @classmethod
    def of(cls, rows: Iterable[tuple[PriceKey, int | None, Decimal]]) -> PriceBook:
        by_key: dict[PriceKey, list[tuple[int | None, Decimal]]] = defaultdict(list)
        for key, from_ms, usd_per_hour in rows:
            by_key[key].append((from_ms, usd_per_hour))
        return cls({key: tuple(sorted(rows, key=_from_key)) for key, rows in by_key.items()})

    def _ranges(self, key: PriceKey) -> tuple[tuple[int | None, Decimal], ...]:
        on_demand = self.ranges.get(key.on_demand, ())
        if key.pricing_model != SPOT:
            return on_demand
        spot = self.ranges.get(key, ())
        first_spot = _from_key(spot[0]) if spot else 2**62
        return tuple(entry for entry in on_demand if _from_key(entry) < first_spot) + spot

    def parts(self, who: Attribution, start_ms: int, end_ms: int) -> Iterator[tuple[int, Decimal]]:
        """``(milliseconds, usd_per_hour)`` for each price's share of ``[start_ms, end_ms)``."""
        if end_ms <= start_ms:
            return
        key = PriceKey.of(who)
        ranges = self._ranges(key)
        if not ranges or start_ms < _from_key(ranges[0]):
            raise PriceNotFound(f"no price in effect for {key} at {from_ms(start_ms).isoformat()}")
        first = bisect.bisect_right([_from_key(entry) for entry in ranges], start_ms) - 1
        for index in range(first, len(ranges)):
            part_start = max(start_ms, _from_key(ranges[index]))
            if part_start >= end_ms:
                break
            part_end = end_ms if index + 1 == len(ranges) else min(end_ms, _from_key(ranges[index + 1]))
            yield part_end - part_start, ranges[index][1]

    def usd_hour_ms(self, who: Attribution, start_ms: int, end_ms: int) -> Decimal:
        """Σ price × milliseconds over ``[start_ms, end_ms)``: exact, divide by an hour to get USD."""
        return sum(
            (usd_per_hour * ms for ms, usd_per_hour in self.parts(who, start_ms, end_ms)),
            Decimal(0),
        )

    def usd_per_hour_at(self, who: Attribution, at_ms: int) -> Decimal:
        for _, usd_per_hour in self.parts(who, at_ms, at_ms + 1):
            return usd_per_hour
        raise PriceNotFound(f"no price in effect for {PriceKey.of(who)}")


def _from_key(entry: tuple[int | None, Decimal]) -> int:
    return entry[0] if entry[0] is not None else -(2**62)


def usd(usd_hour_ms: Decimal | Fraction) -> Decimal:
    """USD from Σ price × milliseconds, rounded half away from zero to the micro-dollar, exactly."""
    exact = Fraction(usd_hour_ms) / MS_PER_HOUR * 10**USD_PLACES
    units = int(abs(exact) + Fraction(1, 2))
    return Decimal(units if exact >= 0 else -units).scaleb(-USD_PLACES)


def seconds(ms: int) -> Decimal:
    """Milliseconds as exact decimal seconds."""
    return Decimal(ms).scaleb(-3)


@dataclass(frozen=True)
class Usage:
    """Accelerator-milliseconds and Σ price × billed milliseconds of some set of intervals."""

    accelerator_ms: int = 0
    usd_hour_ms: Decimal = Decimal(0)

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.accelerator_ms + other.accelerator_ms, self.usd_hour_ms + other.usd_hour_ms)

    @property
    def accelerator_seconds(self) -> Decimal:
        return seconds(self.accelerator_ms)

    @property
    def cost_usd(self) -> Decimal:
        return usd(self.usd_hour_ms)


UsageKey = tuple[str, str, str]  # tenant, pool, instance type


def usage_by_key(
    intervals: Iterable[Interval],
    prices: PriceBook,
    *,
    now_ms: int,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> dict[UsageKey, Usage]:
    """Usage within ``[since_ms, until_ms)`` (None: unbounded) per tenant, pool and instance type.

    Accelerator time counts what was used; cost counts what AWS bills (the 60 s minimum included),
    both clipped to the window, so adjacent windows add up to the whole.
    """
    low = since_ms if since_ms is not None else -(2**62)
    high = until_ms if until_ms is not None else 2**62
    totals: dict[UsageKey, Usage] = defaultdict(Usage)
    for interval in intervals:
        billed_until_ms = interval.billed_until_ms(now_ms)
        if not (interval.started_ms < high and billed_until_ms > low):
            continue
        who = interval.attribution
        used_ms = max(0, min(interval.used_until_ms(now_ms), high) - max(interval.started_ms, low))
        cost = prices.usd_hour_ms(who, max(interval.started_ms, low), min(billed_until_ms, high))
        totals[(who.tenant, who.pool, who.instance_type)] += Usage(who.accelerators * used_ms, cost)
    return dict(totals)


@dataclass(frozen=True)
class Ec2Host:
    """What EC2 says of an accelerator host now: the reconciler's side of the comparison."""

    instance_id: str
    region: str
    state: str
    launched_ms: int  # LaunchTime: when it last started
    transition_ms: int | None  # when it left running, from StateTransitionReason (None: not said)
    attribution: Attribution | None = None  # as its tags and type say now (None: not known)
    account: str = ""  # the account it runs in ('' the reconciler's own), as a StateChange names it


_TRANSITION_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


def transition_ms(reason: str) -> int | None:
    """The time in EC2's ``StateTransitionReason`` ("User initiated (2025-05-05 10:00:00 GMT)")."""
    found = _TRANSITION_TIME.search(reason or "")
    if found is None:
        return None
    return to_ms(datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC))


def is_retagged(host: Ec2Host, known: Interval) -> bool:
    """Whether a host still running in its open interval is now attributed otherwise."""
    return known.is_open and host.attribution is not None and host.attribution != known.attribution


def reconcile(
    hosts: Iterable[Ec2Host],
    latest: Mapping[str, Interval],
    *,
    now_ms: int,
    home_region: str,
    unlisted: Collection[tuple[str, str]] = (),
) -> list[StateChange]:
    """The events that make the ledger agree with EC2, marked as the reconciler's.

    ``latest`` is each host's latest interval in the ledger (every host with an open interval is in
    it). A running host with no open interval starts at its launch time; an open interval whose host
    stopped ends at the transition time EC2 reports, or now when EC2 no longer describes the host; a
    start and stop the ledger never saw (the host's last launch, after its latest interval) is added
    whole. A running host whose attribution (``Ec2Host.attribution``) differs from its open
    interval's was retagged: a ``running`` now opens a new interval. Event ids are derived from
    what they repair, so running it again adds nothing. (Only a host's last start is visible in
    EC2: earlier cycles lost entirely cannot be repaired.) A host in a place EC2 could not be asked
    (``unlisted``: its interval's account and region, a member account whose role was denied) is
    not forgotten: nothing is said of it.
    """
    changes: list[StateChange] = []
    described = {host.instance_id for host in hosts}

    def event(host_id: str, region: str, state: str, at_ms: int, account: str = "") -> StateChange:
        return StateChange(f"reconciler:{host_id}:{state}:{at_ms}", host_id, state, at_ms, region, account)

    for host in hosts:
        known = latest.get(host.instance_id)
        is_open = known is not None and known.is_open
        unseen_launch = known is None or known.started_ms < host.launched_ms
        stopped_ms = host.transition_ms if host.state in STOP_STATES else None
        at = host.instance_id, host.region
        if host.state == "running" and not is_open:
            changes.append(event(*at, "running", host.launched_ms, host.account))
        elif host.state == "running" and known is not None and is_retagged(host, known):
            # Retagged while running (no state change, so no event): a new interval from now on.
            changes.append(event(*at, "running", max(now_ms, known.started_ms), host.account))
        elif stopped_ms is not None and is_open:
            changes.append(event(*at, "stopped", stopped_ms, host.account))
        elif stopped_ms is not None and unseen_launch and stopped_ms >= host.launched_ms:
            changes.append(event(*at, "running", host.launched_ms, host.account))
            changes.append(event(*at, "stopped", stopped_ms, host.account))
    for instance_id, interval in sorted(latest.items()):
        unasked = (interval.account, interval.attribution.region) in unlisted
        if interval.is_open and instance_id not in described and not unasked:
            # EC2 forgot the host (terminated over an hour ago): it ran no later than now.
            at_ms = max(now_ms, interval.started_ms)
            changes.append(event(instance_id, home_region, "terminated", at_ms, interval.account))
    return changes
