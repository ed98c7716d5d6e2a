"""Builders for ledger tests: a virtual clock, attributions, transitions, and random host histories
with their ground truth (what each tenant really used), rendered as shuffled, duplicated streams."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from guardrails.ledger import ON_DEMAND, SPOT, Attribution, PriceBook, PriceKey, Transition, to_ms

# A Monday, so day, week and month periods all start on or before it.
T0 = datetime(2036, 5, 5, 10, 0, tzinfo=UTC)
T0_MS = to_ms(T0)
GPU_TYPES = {"g5.xlarge": 1, "g5.12xlarge": 4, "p4d.24xlarge": 8, "g4dn.xlarge": 1}
TENANTS = ("research", "product", "vision")


def at(minutes: float = 0, *, seconds: float = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, seconds=seconds)


def ms(minutes: float = 0, *, seconds: float = 0) -> int:
    return to_ms(at(minutes, seconds=seconds))


def who(
    tenant: str = "research",
    pool: str = "training",
    instance_type: str = "g5.xlarge",
    cap_minutes: int = 90,
    *,
    region: str = "us-east-1",
    pricing_model: str = ON_DEMAND,
    zone: str | None = None,
) -> Attribution:
    return Attribution(
        tenant,
        pool,
        instance_type,
        GPU_TYPES[instance_type],
        cap_minutes * 60_000,
        region,
        pricing_model,
        zone,
    )


def us_east_book(rows: list[tuple[str, int | None, Decimal]]) -> PriceBook:
    """A price book of on-demand prices in us-east-1 (where ``who`` runs by default), per type."""
    return PriceBook.of((PriceKey(kind, "us-east-1"), from_ms, price) for kind, from_ms, price in rows)


def step(
    event_id: str, instance_id: str, state: str, at_ms: int, attribution: Attribution | None = None
) -> Transition:
    return Transition(event_id, instance_id, state, at_ms, attribution or who())


@dataclass(frozen=True)
class Session:
    start_ms: int
    end_ms: int | None  # None: still running at the end of the stream
    stops: tuple[tuple[str, int], ...]  # the stop states AWS reported, and when
    retagged_ms: int | None = None  # a running seen mid-session with another attribution (a new interval)


@dataclass(frozen=True)
class HostHistory:
    instance_id: str
    attribution: Attribution
    sessions: tuple[Session, ...]
    pending: tuple[int, ...]  # pending events' times

    def transitions(self, prefix: str) -> list[Transition]:
        events = []
        for number, session in enumerate(self.sessions):
            events.append(step(f"{prefix}{self.instance_id}-r{number}", self.instance_id, "running",
                               session.start_ms, self.attribution))  # fmt: skip
            if session.retagged_ms is not None:
                events.append(step(f"{prefix}{self.instance_id}-t{number}", self.instance_id, "running",
                                   session.retagged_ms, retagged(self.attribution)))  # fmt: skip
            for index, (state, when) in enumerate(session.stops):
                events.append(step(f"{prefix}{self.instance_id}-s{number}.{index}", self.instance_id, state,
                                   when, self.attribution))  # fmt: skip
        for index, when in enumerate(self.pending):
            events.append(step(f"{prefix}{self.instance_id}-p{index}", self.instance_id, "pending", when,
                               self.attribution))  # fmt: skip
        return events

    def accelerator_ms(self, now_ms: int) -> int:
        """The truth: accelerators × elapsed, summed over sessions (an open one runs to now)."""
        return sum(
            self.attribution.accelerators
            * ((session.end_ms if session.end_ms is not None else now_ms) - session.start_ms)
            for session in self.sessions
        )


def retagged(attribution: Attribution) -> Attribution:
    """The same host seen with another pool, as spot in a zone (its accelerators unchanged)."""
    return replace(attribution, pool=f"{attribution.pool}-retagged", pricing_model=SPOT, zone="us-east-1b")


STOP_SEQUENCES = (("stopping", "stopped"), ("stopped",), ("shutting-down", "terminated"), ("terminated",))


def random_host(rng: random.Random, instance_id: str, tenant_prefix: str = "") -> HostHistory:
    """One host's life: starts and stops at millisecond times, the last start possibly still open.

    Plain ``random`` under a seed hypothesis draws: thousands of streams cost seconds, not minutes,
    and a failure still names its seed.
    """
    instance_type = rng.choice(sorted(GPU_TYPES))
    tenant = tenant_prefix + rng.choice(TENANTS)
    attribution = who(tenant, rng.choice(("training", "inference")), instance_type, rng.randint(1, 180))
    clock = T0_MS + rng.randint(0, 3_600_000)
    sessions: list[Session] = []
    pending: list[int] = []
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.5:
            pending.append(clock - rng.randint(0, 5_000))
        start = clock
        if rng.random() < 0.2:  # never reports a stop: open to the end of the stream
            sessions.append(Session(start, None, ()))
            break
        end = start + rng.choice((0, rng.randint(1, 59_999), rng.randint(60_000, 7_200_000)))
        retag = start + rng.randint(1, end - start - 1) if end - start > 1 and rng.random() < 0.3 else None
        sequence = rng.choice(STOP_SEQUENCES)
        stops, when = [], end
        for state in sequence:
            stops.append((state, when))
            when += rng.randint(0, 60_000)
        sessions.append(Session(start, end, tuple(stops), retag))
        if sequence[-1] == "terminated":
            break
        clock = when + rng.randint(1, 600_000)  # a restart comes after the last stop
    return HostHistory(instance_id, attribution, tuple(sessions), tuple(pending))


def random_fleet(rng: random.Random, prefix: str = "", max_hosts: int = 6) -> list[HostHistory]:
    return [random_host(rng, f"{prefix}i-{index:04x}", prefix) for index in range(rng.randint(1, max_hosts))]


def redelivered(rng: random.Random, events: list[Transition]) -> list[Transition]:
    """``events`` as EventBridge may deliver them: some more than once, in any order."""
    stream = events + [rng.choice(events) for _ in range(rng.randint(0, len(events)))]
    rng.shuffle(stream)
    return stream


def events_of(fleet: list[HostHistory], prefix: str = "") -> list[Transition]:
    return [event for host in fleet for event in host.transitions(prefix)]


def end_of(events: list[Transition]) -> int:
    return max(event.at_ms for event in events) + 1
