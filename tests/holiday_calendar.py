"""iCalendar documents for the closed-days tests: real RFC 5545 text, as a calendar application exports it."""

from __future__ import annotations

CHRISTMAS = """UID:christmas@parkbrake
SUMMARY:Christmas
DTSTART;VALUE=DATE:20241225
DTEND;VALUE=DATE:20241227
RRULE:FREQ=YEARLY"""


def ics(*events: str) -> str:
    body = "".join(f"BEGIN:VEVENT\r\n{event.strip()}\r\nEND:VEVENT\r\n" for event in events)
    return f"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//parkbrake//tests//EN\r\n{body}END:VCALENDAR\r\n"
