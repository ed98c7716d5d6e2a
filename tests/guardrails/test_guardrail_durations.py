"""Edge cases of the duration grammar as the guardrails use it (caps in tags and the environment)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from guardrails.durations import DEFAULT_CEILING, DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90m", timedelta(minutes=90)),
        ("2h", timedelta(hours=2)),
        ("1h30m", timedelta(minutes=90)),
        ("5400s", timedelta(seconds=5400)),
        (" 90M ", timedelta(minutes=90)),
        ("1d", timedelta(days=1)),
        ("1s", timedelta(seconds=1)),
        ("31d", DEFAULT_CEILING),
    ],
)
def test_parses_what_people_write(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "not a duration"),
        ("0m", "zero"),
        ("0h0m", "zero"),
        ("-90m", "not a duration"),
        ("90 minutes", "not a duration"),
        ("", "not a duration"),
        ("   ", "not a duration"),
        ("90", "not a duration"),
        ("1.5h", "not a duration"),
        ("30m1h", "not a duration"),
        ("h", "not a duration"),
        ("900h", "longer than the ceiling"),
        ("31d1s", "longer than the ceiling"),
    ],
)
def test_rejects_with_a_precise_message(text: str, message: str) -> None:
    with pytest.raises(DurationError, match=message):
        parse_duration(text)


def test_rejects_non_text() -> None:
    with pytest.raises(DurationError, match="not a duration"):
        parse_duration(90)


def test_ceiling_can_be_lowered_or_lifted() -> None:
    with pytest.raises(DurationError, match="ceiling of 2h"):
        parse_duration("3h", ceiling=timedelta(hours=2))
    assert parse_duration("900h", ceiling=None) == timedelta(hours=900)


@pytest.mark.parametrize("text", ["90m", "1h30m", "5400s", "1d2h3m4s", "1s"])
def test_format_reads_back(text: str) -> None:
    assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)
