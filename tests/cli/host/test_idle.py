"""The idle window, in virtual time: when exactly the agent decides to shut the host down."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from guardrails.idle import (
    GpuSample,
    GpuState,
    IdlePolicy,
    IdleState,
    IdleVerdict,
    Observation,
    SampleFailure,
    observe,
)

START = datetime(2025, 3, 1, 2, 0, tzinfo=UTC)
S = timedelta(seconds=1)
POLICY = IdlePolicy(idle_after=60 * S, threshold_percent=5, max_gap=30 * S)


def gpu(index: int = 0, utilization: float = 0, pids: tuple[int, ...] = ()) -> GpuSample:
    return GpuSample(index, f"GPU-{index}", utilization, 2**30, 30.0, 70.0, pids)  # a steady GiB in use


def play(policy: IdlePolicy, timeline: list[tuple[float, Observation]]) -> list[IdleVerdict]:
    state = IdleState()
    verdicts = []
    for seconds, observation in timeline:
        verdict = observe(policy, state, observation, START + seconds * S)
        state = verdict.state
        verdicts.append(verdict)
    return verdicts


def first_shutdown(verdicts: list[IdleVerdict], timeline: list[tuple[float, Observation]]) -> float | None:
    return next((t for (t, _), verdict in zip(timeline, verdicts, strict=True) if verdict.shut_down), None)


def every_10s(until: int, observation_at: Callable[[int], Observation]) -> list[tuple[float, Observation]]:
    return [(t, observation_at(t)) for t in range(0, until + 1, 10)]


def test_idle_for_the_whole_window_shuts_down_at_the_first_sample_that_completes_it() -> None:
    timeline = every_10s(200, lambda t: [gpu(0, 90 if t < 50 else 0), gpu(1, 0)])
    # Idle from the sample at t=50, so the window completes at t=110, not at t=60 (idle_after from zero).
    assert first_shutdown(play(POLICY, timeline), timeline) == 110


def test_utilisation_at_the_threshold_is_idle_and_just_over_it_is_busy() -> None:
    at_threshold = every_10s(60, lambda t: [gpu(0, 5)])
    assert first_shutdown(play(POLICY, at_threshold), at_threshold) == 60
    just_over = every_10s(300, lambda t: [gpu(0, 5.1)])
    verdicts = play(POLICY, just_over)
    assert not any(verdict.shut_down for verdict in verdicts)
    assert verdicts[-1].busy == ("GPU 0 at 5.1% utilisation (over 5%)",)


def test_a_compute_process_keeps_an_idle_gpu_busy() -> None:
    timeline = every_10s(300, lambda t: [gpu(0, 0), gpu(1, 0, (4242,) if t < 100 else ())])
    verdicts = play(POLICY, timeline)
    assert verdicts[0].busy == ("GPU 1 has compute process 4242",)
    assert first_shutdown(verdicts, timeline) == 160


def test_one_busy_gpu_keeps_the_host() -> None:
    timeline = every_10s(600, lambda t: [gpu(0, 0), gpu(1, 0), gpu(2, 40)])
    assert first_shutdown(play(POLICY, timeline), timeline) is None


def test_flapping_around_the_threshold_restarts_the_window_each_time() -> None:
    # Busy for one sample every 50s: never 60s of continuous idleness, until the blips stop at t=200.
    timeline = every_10s(400, lambda t: [gpu(0, 6 if t % 50 == 0 and t <= 200 else 4)])
    verdicts = play(POLICY, timeline)
    assert first_shutdown(verdicts, timeline) == 270
    assert timeline[20][0] == 200
    assert verdicts[20].idle_for == timedelta(0)


def test_a_failed_sample_is_not_evidence_of_idleness() -> None:
    timeline: list[tuple[float, Observation]] = [
        (t, SampleFailure("GPU is lost") if t == 40 else [gpu(0, 0)]) for t in range(0, 201, 10)
    ]
    verdicts = play(POLICY, timeline)
    assert verdicts[4].unknown == ("sampling failed: GPU is lost",)
    assert not verdicts[4].idle
    assert first_shutdown(verdicts, timeline) == 110


def test_no_gpu_reported_is_not_idle() -> None:
    timeline: list[tuple[float, Observation]] = [(t, []) for t in range(0, 301, 10)]
    verdicts = play(POLICY, timeline)
    assert first_shutdown(verdicts, timeline) is None
    assert verdicts[0].unknown == ("no GPU reported",)


def test_a_silence_longer_than_the_gap_restarts_the_window() -> None:
    # The agent was stopped (or the host suspended) between t=20 and t=100: what happened then is unknown.
    timeline: list[tuple[float, Observation]] = [(t, [gpu()]) for t in (0, 10, 20, 100, 110, 140, 160)]
    verdicts = play(POLICY, timeline)
    assert [verdict.idle_for.total_seconds() for verdict in verdicts] == [0, 10, 20, 0, 10, 40, 60]
    assert first_shutdown(verdicts, timeline) == 160


def test_time_going_backwards_restarts_the_window() -> None:
    timeline: list[tuple[float, Observation]] = [(t, [gpu()]) for t in (0, 30, 50, 20, 50, 80)]
    verdicts = play(POLICY, timeline)
    assert [verdict.idle_for.total_seconds() for verdict in verdicts] == [0, 30, 50, 0, 30, 60]
    assert first_shutdown(verdicts, timeline) == 80


# --- property: the verdict agrees with a brute-force reading of the whole history

samples = st.tuples(
    st.integers(min_value=1, max_value=40),  # seconds since the previous sample
    st.one_of(
        st.none(),  # a failed sample
        st.lists(
            st.tuples(st.sampled_from([0, 3, 5, 6, 50]), st.booleans()), min_size=0, max_size=3
        ),  # (utilisation, has a compute process) per GPU
    ),
)


def _observation(raw: list[tuple[int, bool]] | None) -> Observation:
    if raw is None:
        return SampleFailure("NVML error")
    return [
        gpu(index, utilization, (100 + index,) if busy else ())
        for index, (utilization, busy) in enumerate(raw)
    ]


def _idle_alone(policy: IdlePolicy, observation: Observation) -> bool:
    """Whether this one sample shows every GPU idle (memory is steady in these samples)."""
    if isinstance(observation, SampleFailure) or not observation:
        return False
    return all(policy.judge(gpu, None, None).state is GpuState.EMPTY for gpu in observation)


def _oracle(policy: IdlePolicy, history: list[tuple[float, Observation]]) -> bool:
    """Shut down iff some suffix of samples is all idle, without a gap, and spans at least idle_after."""
    assert policy.max_gap is not None
    now = history[-1][0]
    for start in range(len(history) - 1, -1, -1):
        t, observation = history[start]
        if not _idle_alone(policy, observation):
            return False
        if now - t >= policy.idle_after.total_seconds():
            return True
        if start > 0 and t - history[start - 1][0] > policy.max_gap.total_seconds():
            return False
    return False


@settings(max_examples=300, deadline=None)
@given(st.lists(samples, min_size=1, max_size=40))
def test_the_window_agrees_with_the_whole_history(
    raw: list[tuple[int, list[tuple[int, bool]] | None]],
) -> None:
    history: list[tuple[float, Observation]] = []
    t = 0.0
    state = IdleState()
    for step, observation in raw:
        t += step
        history.append((t, _observation(observation)))
        verdict = observe(POLICY, state, history[-1][1], START + t * S)
        state = verdict.state
        assert verdict.shut_down == _oracle(POLICY, history), history
