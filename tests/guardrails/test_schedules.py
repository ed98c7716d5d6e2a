"""Five-field cron ↔ EventBridge's cron(...): explicit cases, and a round-trip property over a year of fire times."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from croniter import croniter
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from guardrails.errors import InputError
from guardrails.schedules import DAY_NAMES, eventbridge_cron, eventbridge_cron_to_five_fields

YEAR_START = datetime(2026, 1, 1, tzinfo=UTC)
YEAR_END = datetime(2027, 1, 1, tzinfo=UTC)
MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")


@pytest.mark.parametrize(
    ("five_fields", "eventbridge"),
    [
        ("0 2 * * *", "cron(0 2 * * ? *)"),
        ("*/15 1 * * *", "cron(0/15 1 * * ? *)"),
        ("0 1 */10 * *", "cron(0 1 1/10 * ? *)"),
        ("0 1 L * *", "cron(0 1 L * ? *)"),
        ("0 1 * */2 *", "cron(0 1 * 1/2 ? *)"),
        ("0 1 * * 1-5", "cron(0 1 ? * MON-FRI *)"),
        ("0 1 * * 1-5/2", "cron(0 1 ? * MON,WED,FRI *)"),
        ("0 1 * * 0,7", "cron(0 1 ? * SUN *)"),
        ("0 1 * * 5-7", "cron(0 1 ? * SUN,FRI-SAT *)"),
        ("0 1 * * 5#3", "cron(0 1 ? * 6#3 *)"),  # the third Friday stays the third
        ("0 1 * * FRI#3", "cron(0 1 ? * 6#3 *)"),
        ("0 1 * * 0#1", "cron(0 1 ? * 1#1 *)"),
        ("0 1 * * L5", "cron(0 1 ? * 6L *)"),  # croniter's last Friday
        ("0 1 * * 5L", "cron(0 1 ? * 6L *)"),  # Quartz's spelling of it
    ],
)
def test_five_fields_to_eventbridge(five_fields: str, eventbridge: str) -> None:
    assert eventbridge_cron(five_fields) == eventbridge


@pytest.mark.parametrize(
    ("eventbridge", "five_fields"),
    [
        ("cron(0 1 ? * 2-6 *)", "0 1 * * 1-5"),
        ("cron(0 1 ? * 2-6/2 *)", "0 1 * * 1-5/2"),  # the step is not a day: it does not shift
        ("cron(0 1 ? * 6#3 *)", "0 1 * * 5#3"),  # nor is the ordinal
        ("cron(0 1 ? * 6L *)", "0 1 * * L5"),
        ("cron(0 1 ? * MON-FRI *)", "0 1 * * MON-FRI"),
        ("cron(0 1 ? * 1,7 *)", "0 1 * * 0,6"),
        ("cron(0/15 1 L * ? *)", "0/15 1 L * *"),
    ],
)
def test_eventbridge_to_five_fields(eventbridge: str, five_fields: str) -> None:
    assert eventbridge_cron_to_five_fields(eventbridge) == five_fields


def test_both_day_fields_restricted_is_refused_with_the_reason() -> None:
    with pytest.raises(InputError, match="restricts both day of month and day of week"):
        eventbridge_cron("0 1 15 * 5")


def fire_times(expression: str) -> list[datetime]:
    runs = croniter(expression, YEAR_START)
    times = []
    while (next_run := runs.get_next(datetime)) < YEAR_END:
        times.append(next_run)
    return times


def numbers(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(low, high).map(str)


def a_range(low: int, high: int, names: tuple[str, ...] = (), offset: int = 0) -> st.SearchStrategy[str]:
    """``a-b`` with a < b, in numbers or (when ``names`` are given) names; ``offset`` is the first name's number.

    Never ``a-a``: croniter reads a day-of-week ``0-0`` as every day, where cron means Sunday.
    """

    def spell(pair: tuple[int, int], as_names: bool) -> str:
        first, last = sorted(pair)
        if first == last:
            first, last = (first - 1, last) if first > low else (first, last + 1)
        if as_names and names and last - offset < len(names):
            return f"{names[first - offset]}-{names[last - offset]}"
        return f"{first}-{last}"

    return st.builds(spell, st.tuples(st.integers(low, high), st.integers(low, high)), st.booleans())


def stepped(base: st.SearchStrategy[str], steps: tuple[int, ...]) -> st.SearchStrategy[str]:
    return st.builds(lambda start, step: f"{start}/{step}", base, st.sampled_from(steps))


def lists(item: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(item, min_size=2, max_size=3).map(",".join)


# Few firings a day, so a year of them stays quick to compare; the days and months are where the
# conversion does its work, so they get every form.
MINUTES = st.one_of(numbers(0, 59), lists(numbers(0, 59)))
HOURS = st.one_of(numbers(0, 23), lists(numbers(0, 23)), st.just("*/12"))
DAYS_OF_MONTH = st.one_of(
    st.just("*"),
    numbers(1, 28),
    a_range(1, 28),
    stepped(st.just("*"), (5, 10)),
    st.just("L"),
    lists(numbers(1, 28)),
)
MONTHS = st.one_of(
    st.just("*"),
    numbers(1, 12),
    st.sampled_from(MONTH_NAMES),
    a_range(1, 12, MONTH_NAMES, offset=1),
    stepped(st.just("*"), (2, 3)),
    stepped(a_range(1, 12), (2, 3)),
)
DAY = st.one_of(numbers(0, 7), st.sampled_from(DAY_NAMES))
DAY_ITEM = st.one_of(DAY, a_range(0, 7, DAY_NAMES), stepped(a_range(0, 6), (2, 3)))
DAYS_OF_WEEK = st.one_of(
    st.just("*"),
    DAY_ITEM,
    stepped(st.just("*"), (2, 3)),
    lists(DAY_ITEM),
    st.builds(
        lambda day, nth: f"{day}#{nth}",
        st.one_of(numbers(0, 6), st.sampled_from(DAY_NAMES)),
        st.integers(1, 5),
    ),
    st.builds(lambda day: f"L{day}", numbers(0, 6)),
)


@st.composite
def five_field_crons(draw: st.DrawFn) -> str:
    # cron reads two restricted day fields as "either"; EventBridge cannot, and the config refuses it.
    if draw(st.booleans()):
        day_of_month, day_of_week = "*", draw(DAYS_OF_WEEK)
    else:
        day_of_month, day_of_week = draw(DAYS_OF_MONTH), "*"
    return f"{draw(MINUTES)} {draw(HOURS)} {day_of_month} {draw(MONTHS)} {day_of_week}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(five_field_crons())
def test_five_fields_to_eventbridge_and_back_fires_at_the_same_times_all_year(expression: str) -> None:
    assume(croniter.is_valid(expression))  # what the stack config accepts
    eventbridge = eventbridge_cron(expression)
    assert eventbridge.startswith("cron(")
    assert len(eventbridge.removeprefix("cron(").split()) == 6
    back = eventbridge_cron_to_five_fields(eventbridge)
    assert fire_times(back) == fire_times(expression), f"{expression} → {eventbridge} → {back}"
