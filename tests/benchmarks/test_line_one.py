"""The fleet day's line one: the code of `run`, its watchdog and `agent`, in virtual time.

Each case is one host of the day; the assertions are the instants (seconds after launch) at which
the real code asked the host to go down, which the benchmark's figures are made of.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from benchmarks.line_one import HostPlan, line_one

LAUNCHED = datetime(2025, 3, 3, 1, 7, tzinfo=UTC)
CAP = timedelta(minutes=90)


def requests(**plan: object) -> list[tuple[float, str, str]]:
    host = HostPlan(instance_id="i-0123456789abcdef0", region="us-east-1", gpus=4, **plan)  # type: ignore[arg-type]
    return [((a.at - LAUNCHED).total_seconds(), a.kind, a.by) for a in line_one(host, LAUNCHED)]


def test_a_job_that_finishes_shuts_the_host_down_at_its_end() -> None:
    asked = requests(work=4200.0, after_work="exits", wrapper=True, cap=CAP)
    assert asked[0] == (4200, "os-shutdown", "run")
    # Still up 120 s later (the OS shutdown did not happen): the EC2 API. The job's processes are gone,
    # so the agent's 2-minute empty window ends at the same instant, not 15 minutes later.
    assert sorted(asked[1:3]) == [(4320, "api-stop", "run"), (4320, "os-shutdown", "agent")]


def test_a_hung_job_is_ended_after_the_hang_window_and_its_grace() -> None:
    asked = requests(work=1800.0, after_work="hung", wrapper=True, cap=CAP)
    # Quiet from 1800 s, hung at 2400 s; it ignores SIGTERM, so SIGKILL 60 s later, then the shutdown.
    assert asked[0] == (2460, "os-shutdown", "run --hang-after")
    # The agent alone: hung GPUs count as idle at 2400 s, shut down after the 15-minute window.
    assert (3300, "os-shutdown", "agent (hung GPU)") in asked


@pytest.mark.parametrize(
    ("work", "shutdown_at"),
    [(4200.0, 4200), (9000.0, 5400)],
    ids=["job-ends-first", "cap-first"],
)
def test_a_sigkilled_wrapper_s_watchdog_shuts_down_at_the_job_end_or_its_cap(
    work: float, shutdown_at: int
) -> None:
    asked = requests(work=work, after_work="exits", wrapper=True, cap=CAP, wrapper_killed_after=1200.0)
    assert asked[0] == (shutdown_at, "os-shutdown", "watchdog")


def test_a_forgotten_notebook_is_caught_by_the_agent_through_the_hang_window() -> None:
    asked = requests(work=2700.0, after_work="hung", wrapper=False, cap=None)
    assert asked[0] == (2700 + 600 + 900, "os-shutdown", "agent (hung GPU)")


def test_a_busy_host_asks_nothing() -> None:
    assert requests(work=86400.0, after_work="exits", wrapper=False, cap=None, day_left=7200.0) == []
