"""Alternating rounds for the benchmarks: A, B (and the ceiling C that bounds them) measured in turn,
round after round, on the same machine minutes apart at most; each figure reported as the median of
its rounds with their spread (min–max) and the load average of each round beside it.

Why: a figure measured once, minutes from the one it is compared with, measures the machine's drift
(a commit's cost moved 2× within one run; one run had batched ingest beat its COPY "ceiling"). In
turn, each round's ratio compares figures taken seconds apart; the ratio reported is the median of
the rounds' ratios. A figure above its ceiling is reported as a broken ceiling, not as a ratio > 1.

``busy_load(n)`` starts ``n`` processes that spin in pure Python for the run (``--load N``): "at
load ≥ 2" on the 2-core machine is then arranged by the benchmark, not left to whoever else runs.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# A ratio whose rounds' loads differ by LOAD_SPREAD and LOAD_SPREAD_SHARE of the lowest (17.0 and
# 17.5 are the same load), whose value moves with them (|Pearson r| at least MOVES_R) and by at
# least MOVES_BY of its median, is said to move with the load.
LOAD_SPREAD = 0.5
LOAD_SPREAD_SHARE = 0.2
MOVES_R = 0.5
MOVES_BY = 0.1


def load1() -> float:
    """The one-minute load average (what each round reports beside its figures)."""
    return os.getloadavg()[0]


def _spin(stop: Any) -> None:  # pragma: no cover - runs in a child process
    while not stop.is_set():
        for _ in range(100_000):
            pass


@contextmanager
def busy_load(processes: int) -> Iterator[None]:
    """``processes`` pure-Python spin loops in their own processes while the block runs (0: none),
    stopped and joined at its end; the one-minute load average rises to about ``processes`` within a
    minute (it is an exponential average), so the benchmark waits ``warm_s`` before measuring."""
    if processes <= 0:
        yield
        return
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    workers = [context.Process(target=_spin, args=(stop,), daemon=True) for _ in range(processes)]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.terminate()
                worker.join()


def warm_up_load(processes: int, seconds: float = 30.0) -> None:
    """Wait until the one-minute load average reaches ``processes`` (or ``seconds`` pass)."""
    deadline = time.monotonic() + seconds
    while processes > 0 and load1() < processes and time.monotonic() < deadline:
        time.sleep(1)


@dataclass
class Figure:
    """One figure's rounds: each round's value and the one-minute load average when it was taken."""

    values: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)
        self.loads.append(load1())

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def spread(self) -> str:
        return f"{min(self.values):,.0f}–{max(self.values):,.0f}"

    def load_range(self) -> str:
        return f"{min(self.loads):.1f}–{max(self.loads):.1f}"

    def summary(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "min": min(self.values),
            "max": max(self.values),
            "rounds": self.values,
            "load_average": self.loads,
        }


def alternate(ways: Mapping[str, Callable[[int], float]], rounds: int) -> dict[str, Figure]:
    """Each way called once per round, in turn, with the round's number; its figure per round."""
    figures = {name: Figure() for name in ways}
    for number in range(rounds):
        for name, way in ways.items():
            figures[name].add(way(number))
    return figures


@dataclass(frozen=True)
class Ratio:
    """A figure over another, round by round: the median of the rounds' ratios, their spread, and
    whether it moved with the load (the rounds' ratios fall as their load rises, or rise with it)."""

    values: tuple[float, ...]
    loads: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def broken_ceiling(self) -> bool:
        """The figure beat its ceiling in the median round: the ceiling is not one."""
        return self.median > 1

    @property
    def moves_with_load(self) -> bool:
        """The rounds' loads spread over ``LOAD_SPREAD`` (and a share of the lowest), their ratios spread over ``MOVES_BY`` of the
        median and correlate with the load: then the ratio is the machine's as much as the code's."""
        spread = max(self.loads) - min(self.loads)
        if len(self.values) < 3 or spread < max(LOAD_SPREAD, LOAD_SPREAD_SHARE * min(self.loads)):
            return False
        if max(self.values) - min(self.values) < MOVES_BY * self.median:
            return False
        return abs(statistics.correlation(self.loads, self.values)) >= MOVES_R

    def text(self) -> str:
        flags = []
        above = sum(1 for value in self.values if value > 1)
        if self.broken_ceiling:
            flags.append("BROKEN CEILING: the figure beat it")
        elif above:
            flags.append(f"above its ceiling in {above} of {len(self.values)} rounds")
        if self.moves_with_load:
            flags.append("moves with load")
        notes = f" ({'; '.join(flags)})" if flags else ""
        return (
            f"ratio {self.median:.2f} [{min(self.values):.2f}–{max(self.values):.2f}, "
            f"load {min(self.loads):.1f}–{max(self.loads):.1f}]{notes}"
        )

    def summary(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "min": min(self.values),
            "max": max(self.values),
            "rounds": list(self.values),
            "load_average": list(self.loads),
            "broken_ceiling": self.broken_ceiling,
            "moves_with_load": self.moves_with_load,
        }


def ratio(figure: Figure, ceiling: Figure) -> Ratio:
    """``figure`` over ``ceiling`` round by round (each round's load: the later of the two's)."""
    return Ratio(
        tuple(a / c for a, c in zip(figure.values, ceiling.values, strict=True)),
        tuple(max(a, c) for a, c in zip(figure.loads, ceiling.loads, strict=True)),
    )


def figure_line(label: str, figure: Figure, unit: str, against: Ratio | None = None) -> str:
    """``label: median unit [min–max], load a–b`` and the ratio to its ceiling if any."""
    line = f"{label}: {figure.median:>10,.0f} {unit} [{figure.spread()}, load {figure.load_range()}]"
    return f"{line}   {against.text()}" if against else line


def per_round_loads(figures: Mapping[str, Figure]) -> str:
    """Each round's load average (the first figure's), for the output's footer."""
    first = next(iter(figures.values()))
    return "load average by round: " + " ".join(f"{value:.2f}" for value in first.loads)
