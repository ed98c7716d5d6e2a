"""The job wrapper's decisions, without a process: escalation, exit statuses, on-exit."""

from __future__ import annotations

from datetime import timedelta

import pytest

from guardrails.job_policy import (
    Action,
    CapPolicy,
    OnExit,
    Step,
    exit_status,
    next_step,
    signal_name,
    wrapper_exit_status,
)

S = timedelta(seconds=1)
CAPPED = CapPolicy(max_runtime=90 * 60 * S, grace=60 * S)


@pytest.mark.parametrize(
    ("policy", "elapsed", "terminating_for", "killed", "expected"),
    [
        pytest.param(CAPPED, 0 * S, None, False, Step(Action.WAIT, 5400 * S), id="just-started"),
        pytest.param(CAPPED, 5399 * S, None, False, Step(Action.WAIT, S), id="one-second-before-the-cap"),
        pytest.param(CAPPED, 5400 * S, None, False, Step(Action.TERMINATE), id="at-the-cap"),
        pytest.param(CAPPED, 9000 * S, None, False, Step(Action.TERMINATE), id="long-past-the-cap"),
        pytest.param(CAPPED, 5400 * S, 0 * S, False, Step(Action.WAIT, 60 * S), id="terminated-just-now"),
        pytest.param(CAPPED, 5459 * S, 59 * S, False, Step(Action.WAIT, S), id="grace-almost-over"),
        pytest.param(CAPPED, 5460 * S, 60 * S, False, Step(Action.KILL), id="grace-over"),
        pytest.param(CAPPED, 5470 * S, 70 * S, True, Step(Action.WAIT), id="killed-waits-for-exit"),
        pytest.param(
            CapPolicy(None, 60 * S), 10**6 * S, None, False, Step(Action.WAIT), id="no-cap-never-ends"
        ),
        # A SIGTERM forwarded from the wrapper starts the grace too, cap or no cap.
        pytest.param(
            CapPolicy(None, 60 * S), 30 * S, 10 * S, False, Step(Action.WAIT, 50 * S), id="forwarded-term"
        ),
        pytest.param(
            CapPolicy(None, 60 * S), 100 * S, 61 * S, False, Step(Action.KILL), id="forwarded-term-ignored"
        ),
    ],
)
def test_next_step_escalates_at_the_cap_then_after_the_grace(
    policy: CapPolicy, elapsed: timedelta, terminating_for: timedelta | None, killed: bool, expected: Step
) -> None:
    assert next_step(policy, elapsed=elapsed, terminating_for=terminating_for, killed=killed) == expected


@pytest.mark.parametrize(
    ("returncode", "status", "name"),
    [(0, 0, None), (3, 3, None), (-9, 137, "SIGKILL"), (-15, 143, "SIGTERM"), (-2, 130, "SIGINT")],
)
def test_exit_status_is_what_a_shell_reports(returncode: int, status: int, name: str | None) -> None:
    assert exit_status(returncode) == status
    assert signal_name(returncode) == name


def test_a_failed_self_stop_never_reads_as_success() -> None:
    assert wrapper_exit_status(0, shutdown_failed=False) == 0
    assert wrapper_exit_status(0, shutdown_failed=True) == 1
    # The job's own failure is the more useful status; the shutdown error is reported beside it.
    assert wrapper_exit_status(3, shutdown_failed=True) == 3
    assert wrapper_exit_status(137, shutdown_failed=False) == 137


def test_only_none_keeps_the_host() -> None:
    assert OnExit("stop").shuts_down
    assert OnExit("terminate").shuts_down
    assert not OnExit("none").shuts_down
