"""Closed days from real iCalendar text: all-day holidays, yearly rules, exceptions, timed freezes."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

import pytest
from holiday_calendar import CHRISTMAS, ics

from guardrails.closed_days import calendar_problems, next_open, parse_closed_days
from guardrails.errors import InputError

# Every Friday from 2025-01-03, except 2025-01-10.
FRIDAYS = """UID:fridays@parkbrake
SUMMARY:No-deploy Friday
DTSTART;VALUE=DATE:20250103
RRULE:FREQ=WEEKLY;BYDAY=FR
EXDATE;VALUE=DATE:20250110"""
# A change freeze from Monday 18:00 to Wednesday 06:00, Berlin time.
FREEZE = """UID:freeze@parkbrake
SUMMARY:Release freeze
DTSTART;TZID=Europe/Berlin:20250303T180000
DTEND;TZID=Europe/Berlin:20250305T060000"""


@pytest.mark.parametrize(
    ("day", "expected"),
    [
        (date(2025, 12, 25), "Christmas"),  # the rule's later years
        (date(2026, 12, 26), "Christmas"),  # both days of the two-day event
        (date(2026, 12, 27), None),  # DTEND is exclusive
        (date(2025, 1, 17), "No-deploy Friday"),
        (date(2025, 1, 10), None),  # the EXDATE
        (date(2025, 1, 16), None),
        (date(2025, 3, 3), "Release freeze"),  # a timed event closes every day it overlaps
        (date(2025, 3, 4), "Release freeze"),
        (date(2025, 3, 5), "Release freeze"),
        (date(2025, 3, 6), None),
    ],
)
def test_which_days_are_closed(day: date, expected: str | None) -> None:
    closed = parse_closed_days(ics(CHRISTMAS, FRIDAYS, FREEZE), "holidays.ics")

    assert closed.closure(day) == expected


def test_two_events_on_one_day_are_both_named() -> None:
    new_year = "UID:ny@parkbrake\nSUMMARY:New Year\nDTSTART;VALUE=DATE:20260102"
    closed = parse_closed_days(ics(FRIDAYS, new_year), "holidays.ics")

    assert closed.closure(date(2026, 1, 2)) == "New Year, No-deploy Friday"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not a calendar", r"is not an iCalendar \(RFC 5545\) document"),
        (
            ics().replace("END:VCALENDAR", "BEGIN:VTODO\r\nUID:1\r\nEND:VTODO\r\nEND:VCALENDAR"),
            "has no VEVENT",
        ),
        (ics("UID:x@parkbrake\nSUMMARY:Someday"), "event 'Someday' has no DTSTART"),
        (
            ics("UID:x@parkbrake\nSUMMARY:Broken\nDTSTART;VALUE=DATE:20250101\nRRULE:FREQ=SOMETIMES"),
            "cannot expand its recurring events: .*FREQ=SOMETIMES",
        ),
    ],
)
def test_unusable_calendars_are_named_with_their_fix(text: str, message: str) -> None:
    problems = calendar_problems(text)

    assert problems
    assert re.search(message, " ".join(problems))
    with pytest.raises(InputError, match=r"holidays\.ics: "):
        parse_closed_days(text, "holidays.ics")


def test_next_open_skips_closed_days_and_says_which() -> None:
    closed = parse_closed_days(ics(CHRISTMAS), "holidays.ics")

    def daily_at_two(moment: datetime) -> datetime:
        following = moment.replace(hour=2, minute=0, second=0, microsecond=0)
        return following if following > moment else following + timedelta(days=1)

    upcoming, skipped = next_open(
        daily_at_two, datetime(2025, 12, 24, 12, tzinfo=UTC), lambda moment: moment.date(), closed
    )

    assert upcoming == datetime(2025, 12, 27, 2, tzinfo=UTC)
    assert skipped == [(date(2025, 12, 25), "Christmas"), (date(2025, 12, 26), "Christmas")]


def test_next_open_gives_up_on_a_calendar_closed_for_more_than_the_lookahead() -> None:
    always = "UID:a@parkbrake\nSUMMARY:Closed\nDTSTART;VALUE=DATE:20250101\nRRULE:FREQ=DAILY"
    closed = parse_closed_days(ics(always), "closed.ics")

    upcoming, skipped = next_open(
        lambda moment: moment + timedelta(days=1),
        datetime(2025, 6, 1, tzinfo=UTC),
        lambda m: m.date(),
        closed,
    )

    assert upcoming is None
    assert len(skipped) == 400
