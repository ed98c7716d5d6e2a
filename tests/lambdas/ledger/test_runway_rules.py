"""Runway and budget decisions as pure rules: periods, remaining, runway, what each budget calls for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from ledger_streams import ms, step, us_east_book, who

from guardrails.errors import InputError
from guardrails.ledger import MS_PER_HOUR, intervals_from
from guardrails.runway import (
    Budget,
    RunwayTotals,
    TenantRunway,
    budget_decisions,
    period_bounds,
    period_start,
    refusal,
    runway_totals,
)
from guardrails.time_zones import time_zone

NOW = datetime(2025, 5, 7, 15, 30, tzinfo=UTC)  # a Wednesday


@pytest.mark.parametrize(
    ("period", "start"),
    [("day", datetime(2025, 5, 7, tzinfo=UTC)), ("week", datetime(2025, 5, 5, tzinfo=UTC)),
     ("month", datetime(2025, 5, 1, tzinfo=UTC))],
)  # fmt: skip
def test_periods_start_at_a_utc_midnight(period: str, start: datetime) -> None:
    assert period_start(period, NOW) == start  # type: ignore[arg-type]


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("period", "zone", "now", "bounds"),
    [
        # A month boundary: 1 June in Berlin is still 31 May in UTC; May there began at 22:00 UTC.
        ("month", "Europe/Berlin", utc(2036, 5, 31, 22, 30), (utc(2036, 5, 31, 22), utc(2036, 6, 30, 22))),
        ("month", "Europe/Berlin", utc(2036, 5, 31, 21, 59), (utc(2036, 4, 30, 22), utc(2036, 5, 31, 22))),
        # A year boundary ahead of UTC, and a zone a quarter of an hour off the hour.
        ("month", "Asia/Tokyo", utc(2036, 12, 31, 15), (utc(2036, 12, 31, 15), utc(2037, 1, 31, 15))),
        ("day", "Asia/Kathmandu", utc(2036, 5, 5, 18, 15), (utc(2036, 5, 5, 18, 15), utc(2036, 5, 6, 18, 15))),
        # DST: the last Sunday of March 2036 in Berlin has 23 hours, of October 25; the month of the
        # change is an hour short (March) or long (October).
        ("day", "Europe/Berlin", utc(2036, 3, 30, 12), (utc(2036, 3, 29, 23), utc(2036, 3, 30, 22))),
        ("day", "Europe/Berlin", utc(2036, 10, 26, 12), (utc(2036, 10, 25, 22), utc(2036, 10, 26, 23))),
        ("month", "Europe/Berlin", utc(2036, 3, 15), (utc(2036, 2, 29, 23), utc(2036, 3, 31, 22))),
        ("week", "America/New_York", utc(2036, 11, 1, 12), (utc(2036, 10, 27, 4), utc(2036, 11, 3, 5))),
        # Midnight skipped by DST (Santiago, 7 Sep 2036): the day starts at 01:00, its first instant.
        ("day", "America/Santiago", utc(2036, 9, 7, 12), (utc(2036, 9, 7, 4), utc(2036, 9, 8, 3))),
    ],
)  # fmt: skip
def test_periods_start_at_the_tenants_local_midnight(
    period: str, zone: str, now: datetime, bounds: tuple[datetime, datetime]
) -> None:
    assert period_bounds(period, now, zone) == bounds  # type: ignore[arg-type]
    status = TenantRunway(Budget("research", Decimal(100), period, timezone=zone), now)  # type: ignore[arg-type]
    assert status.period_start == bounds[0]
    assert status.as_dict()["timezone"] == zone


def test_an_unknown_time_zone_names_the_field_and_an_example() -> None:
    with pytest.raises(
        InputError, match=r"--timezone: 'Europe/Berlim' is not an IANA time zone \(for example"
    ):
        time_zone("Europe/Berlim", "--timezone")


def status(limit: str | None, *, spent: str, committed: str = "0", burn: str = "0", hosts: int = 0,
           actions: frozenset[str] = frozenset({"notify", "deny"})) -> TenantRunway:  # fmt: skip
    usd_hour_ms = Decimal(MS_PER_HOUR)
    budget = Budget("research", Decimal(limit) if limit else None, "month", actions=actions)  # type: ignore[arg-type]
    totals = RunwayTotals(
        Decimal(spent) * usd_hour_ms, Decimal(committed) * usd_hour_ms, Decimal(burn), hosts, hosts
    )
    return TenantRunway(budget, NOW, totals)


def test_runway_is_what_remains_at_the_current_burn() -> None:
    running = status("100", spent="30", committed="10", burn="12", hosts=2)
    assert (running.remaining_usd, running.runway) == (Decimal(60), timedelta(hours=5))
    assert status("100", spent="30").runway is None  # nothing burns: unbounded
    assert status("100", spent="90", committed="20", burn="1", hosts=1).runway == timedelta(0)
    assert status(None, spent="30", burn="5", hosts=1).runway is None  # no budget


def test_runway_totals_of_a_running_host() -> None:
    book = us_east_book([("g5.xlarge", None, Decimal(2))])
    intervals = intervals_from([step("r", "i-1", "running", ms(0), who(cap_minutes=60))])
    totals = runway_totals(intervals, book, period_start_ms=ms(-600), now_ms=ms(15), default_cap_ms=1)
    assert totals == RunwayTotals(
        Decimal(2 * 15 * 60_000), Decimal(2 * 45 * 60_000), Decimal(2), 1, 1, first_cap_end_ms=ms(60)
    )


def test_thresholds_and_the_limit_are_measured_on_spent_plus_committed() -> None:
    decisions = budget_decisions(status("100", spent="40", committed="45", burn="1", hosts=1))
    assert [(d.action, d.threshold) for d in decisions] == [
        ("notify", Decimal("0.5")),
        ("notify", Decimal("0.8")),
    ]
    assert decisions[0].once_key == "budget:research:month:2025-05-01T00:00:00+00:00:notify:0.5"
    over = budget_decisions(status("100", spent="40", committed="70", burn="1", hosts=1))
    assert [d.action for d in over] == ["notify"] * 4 + ["deny"]  # 50, 80, 90 and 100%


def test_hosts_are_stopped_only_once_spending_itself_reaches_the_limit() -> None:
    everything = frozenset({"notify", "deny", "stop"})
    committed_only = budget_decisions(
        status("100", spent="60", committed="50", burn="1", hosts=1, actions=everything)
    )
    assert "stop" not in [d.action for d in committed_only]
    spent = budget_decisions(status("100", spent="100", burn="1", hosts=1, actions=everything))
    assert [d.action for d in spent][-1] == "stop"
    assert "stop" not in [d.action for d in budget_decisions(status("100", spent="100", actions=everything))]


def test_work_is_refused_only_where_the_budget_denies_and_cannot_cover_it() -> None:
    assert refusal(status("100", spent="60"), Decimal(40)) is None
    assert refusal(status("100", spent="60"), Decimal("40.01")) is not None
    assert refusal(status("100", spent="60", actions=frozenset({"notify"})), Decimal(1000)) is None
    assert refusal(status(None, spent="60"), Decimal(1000)) is None
