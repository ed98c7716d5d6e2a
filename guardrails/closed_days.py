"""Closed days: an iCalendar file of holidays and change freezes that the nightly starts honour.

A day is closed when any event of the calendar covers part of it, in the nightly schedule's time
zone: an all-day event (``DTSTART;VALUE=DATE``) closes its days, a timed one the days it overlaps.
Recurring events (``RRULE``, ``RDATE``, ``EXDATE``) are expanded by ``recurring-ical-events``.

Pure: the stack validates the file's text at plan time, the launcher and the CLI read the same text
from the stack's SSM parameter and ask the same question.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

from guardrails.errors import InputError

if TYPE_CHECKING:
    import icalendar

# icalendar and recurring_ical_events are imported where a calendar is read (about 25 ms): `status`
# and `schedule list` import this module for its types and read a calendar only when one is named.

# The most days a next-run search looks ahead: a calendar closing more than a year is a mistake.
LOOKAHEAD = timedelta(days=400)


@dataclass(frozen=True)
class ClosedDays:
    """The closed days of one calendar."""

    calendar: icalendar.Calendar

    def closure(self, day: date) -> str | None:
        """Why ``day`` is closed (the event's summary), or None when it is open."""
        import recurring_ical_events

        events = recurring_ical_events.of(self.calendar).at((day.year, day.month, day.day))
        summaries = sorted(str(event.get("SUMMARY") or "closed") for event in events)
        return ", ".join(summaries) or None


def parse_closed_days(text: str, source: str) -> ClosedDays:
    """Read an iCalendar document; an unreadable one is an :class:`InputError` naming ``source``."""
    problems = calendar_problems(text)
    if problems:
        raise InputError(f"{source}: " + "; ".join(problems))
    import icalendar

    return ClosedDays(icalendar.Calendar.from_ical(text))


def calendar_problems(text: str) -> list[str]:
    """What is wrong with an iCalendar document, each with its fix; empty when it is usable."""
    import icalendar
    import recurring_ical_events

    try:
        calendar = icalendar.Calendar.from_ical(text)
    except ValueError as error:
        return [f"is not an iCalendar (RFC 5545) document: {error}; export it as .ics from your calendar"]
    events = calendar.walk("VEVENT")
    if not events:
        return ["has no VEVENT: add one all-day event per closed day (or a recurring one for a holiday)"]
    problems = [
        f"event {str(event.get('SUMMARY') or index)!r} has no DTSTART; give it the day it closes"
        for index, event in enumerate(events, 1)
        if event.get("DTSTART") is None
    ]
    if not problems:
        try:  # expansion is where a broken RRULE shows: fail here, not in the nightly launcher
            recurring_ical_events.of(calendar).between(date(2000, 1, 1), date(2000, 1, 1) + LOOKAHEAD)
        except (ValueError, TypeError) as error:
            problems.append(f"cannot expand its recurring events: {error}")
    return problems


def next_open(
    occurrences: Callable[[datetime], datetime | None],
    after: datetime,
    local_day: Callable[[datetime], date],
    closed: ClosedDays,
) -> tuple[datetime | None, list[tuple[date, str]]]:
    """The first occurrence after ``after`` whose local day is open, and the closed days skipped.

    ``occurrences(moment)`` gives the schedule's next firing after ``moment``; the search stops at
    :data:`LOOKAHEAD` (None: no open day that soon).
    """
    skipped: list[tuple[date, str]] = []
    moment = occurrences(after)
    while moment is not None and moment - after <= LOOKAHEAD:
        reason = closed.closure(local_day(moment))
        if reason is None:
            return moment, skipped
        skipped.append((local_day(moment), reason))
        moment = occurrences(moment)
    return None, skipped
