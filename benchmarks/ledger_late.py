"""The ledger benchmark's closed-month figures (``python -m benchmarks.ledger --late N``): on the large
ledger, close a month for every tenant, then append N late events into it (each as the meter
appends one: appended and settled in one call) against N in-order events, one of each in turn, and time a closed
month's report and the next month's (live, with the late lines).

A late event costs work proportional to its host's events, not to the ledger's: the target is a
late event at most 5× an in-order one.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import zip_longest
from typing import Any

from benchmarks.rounds import Figure
from guardrails.ledger import Attribution, Transition, to_ms
from lambdas.ledger.closes import PeriodCloses, period_window
from lambdas.ledger.store import LedgerStore

CLOSED = "2036-05"  # a month the large ledger covers, before its NOW (2036-06-15)
OPEN_AFTER = "2036-06"
LATE_ROUNDS = 5


@dataclass(frozen=True)
class LargeLedger:
    """How benchmarks.ledger.generate_large_ledger laid out its hosts (its SQL, restated)."""

    tenants: int
    hosts: int
    per_host: int
    start: datetime
    spacing: timedelta
    types: Sequence[str]
    accelerators: Sequence[int]
    cap_ms: int
    now: datetime

    def attribution(self, host: int) -> Attribution:
        kind = host % len(self.types)
        pool = "training" if host % 2 == 0 else "inference"
        return Attribution(
            f"tenant-{host % self.tenants}",
            pool,
            self.types[kind],
            self.accelerators[kind],
            self.cap_ms,
            "us-east-1",
        )

    def instance(self, host: int) -> str:
        return f"i-{host:08x}"

    def event_ms(self, host: int, step: int) -> int:
        return to_ms(self.start + step * self.spacing + timedelta(seconds=host))


def _samples_ms(call: Callable[[], object], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return sorted(samples)


def _figures(samples: list[float]) -> dict[str, float]:
    return {
        "mean_ms": statistics.fmean(samples),
        "p50_ms": statistics.median(samples),
        "p99_ms": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
    }


def late_event_figures(url: str, ledger: LargeLedger, *, late: int, repeats: int) -> dict[str, Any]:
    store = LedgerStore.connect(url)
    closes = PeriodCloses(store)
    rng = random.Random(23)
    zones = {f"tenant-{n}": "UTC" for n in range(ledger.tenants)}
    started = time.perf_counter()
    closes.close(period=CLOSED, zones=zones, now=ledger.now, actor="benchmark", reason="benchmark")
    close_s = time.perf_counter() - started

    # In order: after each host's last event (the newest is one spacing before NOW).
    in_order = [
        Transition(
            f"bench-in-order-{n}",
            ledger.instance(host),
            "stopped",
            to_ms(ledger.now) - 60_000 + n,
            ledger.attribution(host),
        )
        for n, host in enumerate(rng.sample(range(ledger.hosts), min(late, ledger.hosts)))
    ]
    # Late: a start and a stop inside a stopped gap of the closed month (steps 2k+1 → 2k+2).
    since_ms, until_ms = (to_ms(moment) for moment in period_window(CLOSED, "UTC"))
    gaps = [
        (host, step)
        for host in rng.sample(range(ledger.hosts), min(ledger.hosts, late))
        for step in range(1, ledger.per_host - 1, 2)
        if since_ms <= ledger.event_ms(host, step) and ledger.event_ms(host, step + 1) < until_ms
    ]
    late_events = []
    for n, (host, step) in enumerate(rng.sample(gaps, min(len(gaps), (late + 1) // 2))):
        gap_ms = ledger.event_ms(host, step)
        for offset, state in ((3_600_000, "running"), (7_200_000, "stopped")):
            late_events.append(
                Transition(
                    f"bench-late-{n}-{state}",
                    ledger.instance(host),
                    state,
                    gap_ms + offset,
                    ledger.attribution(host),
                )
            )
    late_events = late_events[:late]

    def meter_one(event: Transition) -> float:  # appended and settled in one call, as the meter appends
        started = time.perf_counter()
        store.append([event], source="meter", received_at=ledger.now, settled=True)
        return (time.perf_counter() - started) * 1000

    # In turn, one in-order event then one late one, in LATE_ROUNDS rounds: each round's ratio
    # compares events timed milliseconds apart, not two blocks timed a minute apart.
    in_order_ms: list[float] = []
    late_ms: list[float] = []
    rounds = Figure()
    share = -(-max(len(in_order), len(late_events)) // LATE_ROUNDS)
    for number in range(LATE_ROUNDS):
        pairs = slice(number * share, (number + 1) * share)
        this_round: tuple[list[float], list[float]] = ([], [])
        for first, second in zip_longest(in_order[pairs], late_events[pairs]):
            if first is not None:
                this_round[0].append(meter_one(first))
            if second is not None:
                this_round[1].append(meter_one(second))
        if this_round[0] and this_round[1]:
            rounds.add(statistics.fmean(this_round[1]) / statistics.fmean(this_round[0]))
        in_order_ms += this_round[0]
        late_ms += this_round[1]
    in_order_ms.sort()
    late_ms.sort()
    picks = iter([f"tenant-{rng.randrange(ledger.tenants)}" for _ in range(repeats * 2)])

    def report(period: str) -> Callable[[], object]:
        def one() -> object:
            tenant = next(picks)
            known = closes.closes([tenant])
            return closes.invoice(tenant=tenant, period=period, zone="UTC", now=ledger.now, closes=known)

        return one

    closed_report = _figures(_samples_ms(report(CLOSED), repeats))
    open_report = _figures(_samples_ms(report(OPEN_AFTER), repeats))
    store.close()
    in_order_figures, late_figures = _figures(in_order_ms), _figures(late_ms)
    return {
        "close_all_tenants_s": close_s,
        "in_order_event": in_order_figures,
        "late_event": late_figures,
        "late_vs_in_order": late_figures["mean_ms"] / in_order_figures["mean_ms"],
        "late_vs_in_order_rounds": rounds.values,
        "load_average_rounds": rounds.loads,
        "closed_month_report": closed_report,
        "next_month_report_with_late_lines": open_report,
        "late_events": len(late_events),
        "in_order_events": len(in_order),
    }


def print_late(figures: dict[str, Any]) -> None:
    print(
        f"  closed {CLOSED} for every tenant in {figures['close_all_tenants_s']:.1f} s; then, each appended and settled:"
    )
    for name, count in (("in_order_event", "in_order_events"), ("late_event", "late_events")):
        one = figures[name]
        print(f"  {name:<26} mean {one['mean_ms']:8.2f} ms   p50 {one['p50_ms']:8.2f} ms   p99 {one['p99_ms']:8.2f} ms"
              f"   ({figures[count]} events)")  # fmt: skip
    rounds = figures["late_vs_in_order_rounds"]
    print(f"  late / in-order (means, each late event timed after an in-order one): {figures['late_vs_in_order']:.2f} "
          f"(target ≤ 5); by round {min(rounds, default=0):.2f}–{max(rounds, default=0):.2f}, load "
          + " ".join(f"{value:.1f}" for value in figures["load_average_rounds"]))  # fmt: skip
    for name in ("closed_month_report", "next_month_report_with_late_lines"):
        one = figures[name]
        print(f"  {name:<34} p50 {one['p50_ms']:8.2f} ms   p99 {one['p99_ms']:8.2f} ms")
