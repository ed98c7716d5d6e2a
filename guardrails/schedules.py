"""EventBridge schedule expressions: from the stack config's durations and five-field cron, and back.

Pure, so config validation, the component, the cost estimate and the CLI share one conversion.
"""

from __future__ import annotations

import re
from datetime import timedelta

from guardrails.durations import format_duration
from guardrails.errors import InputError

DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_DAY_ITEM = re.compile(r"(?P<start>\*|\w+)(?:-(?P<end>\w+))?(?:/(?P<step>\d+))?")
# One day of the month by weekday: the nth (``5#3``), or the last (croniter's ``L5``; Quartz's ``5L``).
_ONE_DAY = re.compile(r"(?P<nth_day>\w+)(?P<nth>#[1-5])|L(?P<last_day>\w+)|(?P<quartz_last_day>\w+)L")


def rate_expression(every: timedelta) -> str:
    """EventBridge Scheduler's ``rate(N minutes)`` (whole minutes; ``rate(1 minute)`` is singular)."""
    minutes, remainder = divmod(int(every.total_seconds()), 60)
    if remainder or minutes < 1:
        raise InputError(f"guardrails.sweep_every: {format_duration(every)} is not whole minutes ≥ 1m")
    return f"rate({minutes} minute{'s' if minutes != 1 else ''})"


def eventbridge_cron(expression: str) -> str:
    """A five-field cron expression as EventBridge's six-field ``cron(...)``.

    EventBridge needs ``?`` in exactly one of day-of-month and day-of-week, numbers days of the week
    1-7 from Sunday (cron: 0-7, 0 and 7 Sunday) and cannot express cron's "either day field matches".
    """
    fields = expression.split()
    if len(fields) != 5:
        raise InputError(
            f'nightly.cron: "{expression}" is not a five-field cron expression such as "0 2 * * *"'
        )
    lowest = ("0", "0", "1", "1", "0")
    minute, hour, day_of_month, month, day_of_week = (
        _from_start(field, low) for field, low in zip(fields, lowest, strict=True)
    )
    if day_of_week in ("*", "?"):
        return f"cron({minute} {hour} {'*' if day_of_month == '?' else day_of_month} {month} ? *)"
    if day_of_month not in ("*", "?"):
        raise InputError(
            f'nightly.cron: "{expression}" restricts both day of month and day of week, which cron reads as '
            "either and EventBridge cannot express; restrict only one of them"
        )
    return f"cron({minute} {hour} ? {month} {_eventbridge_days(day_of_week, expression)} *)"


def _from_start(field: str, low: str) -> str:
    """``*/15`` as ``0/15``: EventBridge spells increments from an explicit start."""
    return f"{low}/{field[2:]}" if field.startswith("*/") else field


def _eventbridge_days(field: str, expression: str) -> str:
    one_day = _ONE_DAY.fullmatch(field)
    if one_day:  # the 3rd Friday (5#3), the last Friday (L5, or 5L): one day, EventBridge-numbered
        day = one_day["nth_day"] or one_day["last_day"] or one_day["quartz_last_day"]
        return f"{_day_index(day, expression) + 1}{one_day['nth'] or 'L'}"
    days: set[int] = set()
    for item in field.split(","):
        match = _DAY_ITEM.fullmatch(item)
        if match is None:
            raise InputError(f'nightly.cron: "{item}" in "{expression}" is not a day of the week')
        start = 0 if match["start"] == "*" else _day_number(match["start"], expression)
        end = 6 if match["start"] == "*" or (match["step"] and not match["end"]) else start
        if match["end"]:
            end = _day_number(match["end"], expression)
        if end < start:
            raise InputError(f'nightly.cron: the day range "{item}" in "{expression}" runs backwards')
        days.update(day % 7 for day in range(start, end + 1, int(match["step"] or 1)))
    return ",".join(_runs(sorted(days)))


def _day_number(token: str, expression: str) -> int:
    """A cron day of the week, 0-7 or SUN-SAT, as cron's number (0 and 7 are Sunday)."""
    if token.isdigit() and int(token) <= 7:
        return int(token)
    if token.upper() in DAY_NAMES:
        return DAY_NAMES.index(token.upper())
    raise InputError(f'nightly.cron: "{token}" in "{expression}" is not a day of the week (0-7 or SUN-SAT)')


def _day_index(token: str, expression: str) -> int:
    return _day_number(token, expression) % 7


def _runs(days: list[int]) -> list[str]:
    """Consecutive days as ranges: ``MON-FRI``, ``SUN,SAT``."""
    runs: list[list[int]] = []
    for day in days:
        if runs and runs[-1][-1] == day - 1:
            runs[-1].append(day)
        else:
            runs.append([day])
    return [
        DAY_NAMES[run[0]] if len(run) == 1 else f"{DAY_NAMES[run[0]]}-{DAY_NAMES[run[-1]]}" for run in runs
    ]


def eventbridge_cron_to_five_fields(expression: str) -> str:
    """``cron(0 1 ? * 2-6 *)`` → ``0 1 * * 1-5``, as croniter reads it.

    EventBridge numbers weekdays 1–7 from Sunday, cron 0–6: only day numbers shift, never a step
    (``2-6/2`` → ``1-5/2``) nor an ordinal (``6#3``, the third Friday → ``5#3``); the last Friday
    (``6L``) becomes croniter's ``L5``.
    """
    fields = expression.removeprefix("cron(").removesuffix(")").split()
    minute, hour, day_of_month, month, day_of_week = (field.replace("?", "*") for field in fields[:5])
    return f"{minute} {hour} {day_of_month} {month} {_cron_days(day_of_week)}"


def _cron_days(field: str) -> str:
    one_day = _ONE_DAY.fullmatch(field)
    if one_day and one_day["nth"]:
        return f"{_cron_day(one_day['nth_day'])}{one_day['nth']}"
    if one_day and one_day["quartz_last_day"]:
        return f"L{_cron_day(one_day['quartz_last_day'])}"
    items = []
    for item in field.split(","):
        match = _DAY_ITEM.fullmatch(item)
        if match is None:
            items.append(item)  # not EventBridge's: left for croniter to refuse
            continue
        days = "-".join(_cron_day(day) for day in (match["start"], match["end"]) if day)
        items.append(f"{days}/{match['step']}" if match["step"] else days)
    return ",".join(items)


def _cron_day(token: str) -> str:
    """An EventBridge day of the week (1–7 or a name) as cron's (0–6, names unchanged)."""
    return str(int(token) - 1) if token.isdigit() else token
