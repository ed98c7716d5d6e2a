"""The nightly window of a Kubernetes stack's pool: open from each firing for the pool's cap, in the
schedule's zone, closed all day on a closed day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from holiday_calendar import CHRISTMAS, ics
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrails.closed_days import parse_closed_days
from guardrails.nightly_window import window_at

EIGHT_HOURS = timedelta(hours=8)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_open_from_the_firing_for_the_pools_cap_in_the_schedules_zone() -> None:
    # 01:00 Berlin is 00:00 UTC in winter
    opened = window_at("0 1 * * *", "Europe/Berlin", EIGHT_HOURS, at("2025-01-14T03:00:00+00:00"))
    assert opened.open
    assert opened.opened_at == at("2025-01-14T01:00:00+01:00")
    assert opened.closes_at == at("2025-01-14T09:00:00+01:00")

    assert window_at("0 1 * * *", "Europe/Berlin", EIGHT_HOURS, at("2025-01-14T00:00:00+00:00")).open
    assert not window_at("0 1 * * *", "Europe/Berlin", EIGHT_HOURS, at("2025-01-14T08:00:00+00:00")).open
    assert not window_at("0 1 * * *", "Europe/Berlin", EIGHT_HOURS, at("2025-01-13T23:59:59+00:00")).open


def test_weekdays_only_and_a_closed_day_keep_it_closed() -> None:
    saturday = at("2025-01-18T03:00:00+00:00")
    assert not window_at("0 1 * * 1-5", "UTC", EIGHT_HOURS, saturday).open  # Friday's closed at 09:00
    christmas = parse_closed_days(ics(CHRISTMAS), "test")
    closed = window_at("0 1 * * *", "UTC", EIGHT_HOURS, at("2025-12-25T03:00:00+00:00"), christmas)
    assert not closed.open
    assert closed.reason == "closed day 2025-12-25: Christmas"
    assert window_at("0 1 * * *", "UTC", EIGHT_HOURS, at("2025-12-27T03:00:00+00:00"), christmas).open


@settings(max_examples=80, deadline=None)
@given(
    minutes=st.integers(0, 7 * 24 * 60),
    hour=st.integers(0, 23),
    length=st.integers(1, 36).map(lambda hours: timedelta(hours=hours)),
)
def test_open_exactly_when_a_firing_lies_within_the_cap_before_now(
    minutes: int, hour: int, length: timedelta
) -> None:
    now = datetime(2025, 3, 3, tzinfo=UTC) + timedelta(minutes=minutes)
    firings = [datetime(2025, 2, 20, hour, tzinfo=UTC) + timedelta(days=day) for day in range(20)]

    # a daily schedule with a cap over a day is always open: each window reaches the next firing
    assert window_at(f"0 {hour} * * *", "UTC", length, now).open is any(
        firing <= now < firing + length for firing in firings
    )
