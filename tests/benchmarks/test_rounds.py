"""The benchmarks' alternating rounds: ways measured in turn, ratios per round, broken ceilings and
ratios that move with the load flagged, busy processes that raise the load and stop."""

from __future__ import annotations

import multiprocessing

import pytest

from benchmarks.rounds import Figure, Ratio, alternate, busy_load, ratio


def test_the_ways_run_in_turn_round_after_round() -> None:
    calls: list[tuple[str, int]] = []

    def way(name: str, value: float) -> object:
        def measure(number: int) -> float:
            calls.append((name, number))
            return value + number

        return measure

    figures = alternate({"a": way("a", 10), "ceiling": way("ceiling", 20)}, rounds=3)
    assert calls == [("a", 0), ("ceiling", 0), ("a", 1), ("ceiling", 1), ("a", 2), ("ceiling", 2)]
    assert figures["a"].values == [10, 11, 12]
    assert figures["a"].median == 11
    assert len(figures["a"].loads) == 3


def test_a_ratio_is_the_median_of_the_rounds_ratios() -> None:
    a = Figure([1, 2, 9], [1.0, 1.0, 1.0])
    ceiling = Figure([2, 2, 10], [1.0, 1.0, 1.0])
    measured = ratio(a, ceiling)
    assert measured.values == (0.5, 1.0, 0.9)
    assert measured.median == 0.9
    assert not measured.broken_ceiling
    assert "BROKEN" not in measured.text()
    assert "above its ceiling" not in measured.text()


def test_a_round_above_its_ceiling_is_said_even_when_the_median_is_not() -> None:
    measured = ratio(Figure([90, 114, 95], [1.0] * 3), Figure([100, 100, 100], [1.0] * 3))
    assert not measured.broken_ceiling
    assert "above its ceiling in 1 of 3 rounds" in measured.text()


def test_a_figure_above_its_ceiling_is_a_broken_ceiling() -> None:
    measured = ratio(Figure([106, 110, 90], [0.5] * 3), Figure([100, 100, 100], [0.5] * 3))
    assert measured.broken_ceiling
    assert "BROKEN CEILING" in measured.text()
    assert measured.summary()["broken_ceiling"] is True


@pytest.mark.parametrize(
    ("values", "loads", "moves"),
    [
        ((0.55, 0.45, 0.35, 0.30), (0.5, 1.2, 2.0, 2.5), True),  # falls as the load rises
        ((0.30, 0.35, 0.45, 0.55), (0.5, 1.2, 2.0, 2.5), True),  # rises with it
        ((0.50, 0.30, 0.50, 0.30), (2.0, 2.1, 2.2, 2.3), False),  # the load did not move
        ((0.40, 0.41, 0.40, 0.41), (0.5, 2.5, 0.6, 2.4), False),  # the load moved, the ratio did not
        ((0.96, 0.27, 2.45, 0.50), (17.0, 17.1, 17.5, 17.5), False),  # 17.0 and 17.5 are the same load
    ],
)
def test_a_ratio_that_moves_with_the_load_says_so(
    values: tuple[float, ...], loads: tuple[float, ...], moves: bool
) -> None:
    measured = Ratio(values, loads)
    assert measured.moves_with_load is moves
    assert ("moves with load" in measured.text()) is moves


def test_busy_load_runs_its_processes_and_stops_them() -> None:
    with busy_load(2):
        running = [child for child in multiprocessing.active_children() if child.is_alive()]
        assert len(running) >= 2
    assert not [child for child in multiprocessing.active_children() if child.is_alive()]


def test_no_busy_load_starts_nothing() -> None:
    before = len(multiprocessing.active_children())
    with busy_load(0):
        assert len(multiprocessing.active_children()) == before
