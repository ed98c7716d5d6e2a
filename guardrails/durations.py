"""Durations as people write them in tags and config: ``90m``, ``2h``, ``1h30m``, ``5400s``.

One grammar serves the stack config, the ``parkbrake:max-runtime`` tag, the CLI flags
and the Lambda environment, so a value that plans also enforces.
"""

from __future__ import annotations

import re
from datetime import timedelta

DURATION_HINT = "use 90m, 2h, 1h30m or 5400s"
# A cap longer than this is a typo (``900h`` for ``90m``), never an intention.
DEFAULT_CEILING = timedelta(days=31)

_UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
# ASCII digits only: ``\d`` alone would read Arabic-Indic or full-width digits nobody means as a cap.
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", re.ASCII)
# The longest duration read at all, ceiling or not: well inside what ``timedelta`` holds (999,999,999
# days), so a tag such as ``9999999999d`` is a DurationError, never an OverflowError that escapes a sweep.
LONGEST = timedelta(days=100_000)
# More digits than this cannot be under LONGEST (and keeps ``int()`` off pathological strings).
_MOST_DIGITS = 12


class DurationError(ValueError):
    """A duration that cannot be used; the message says what was wrong and how to write it."""


def parse_duration(
    text: object, *, ceiling: timedelta | None = DEFAULT_CEILING, floor: timedelta | None = None
) -> timedelta:
    """Parse ``1h30m``-style text into a positive timedelta no longer than ``ceiling`` and no
    shorter than ``floor``."""
    if not isinstance(text, str):
        raise DurationError(f"{_shown(text)} is not a duration; {DURATION_HINT}")
    value = text.strip().lower()
    match = _DURATION.fullmatch(value)
    if not value or match is None or not any(match.groups()):
        raise DurationError(f"{_shown(text)} is not a duration; {DURATION_HINT}")
    if any(amount is not None and len(amount.lstrip("0")) > _MOST_DIGITS for amount in match.groups()):
        raise DurationError(f"{_shown(text)} is far too long to be a duration; {DURATION_HINT}")
    seconds = sum(
        int(amount) * _UNIT_SECONDS[unit]
        for amount, unit in zip(match.groups(), "dhms", strict=True)
        if amount is not None
    )
    if seconds == 0:
        raise DurationError(f"{_shown(text)} is zero; a duration must be positive ({DURATION_HINT})")
    if seconds > LONGEST.total_seconds():
        raise DurationError(
            f"{_shown(text)} is longer than {format_duration(LONGEST)}; a duration that long is a typo"
        )
    duration = timedelta(seconds=seconds)
    if ceiling is not None and duration > ceiling:
        raise DurationError(
            f"{_shown(text)} is longer than the ceiling of {format_duration(ceiling)}; "
            "a cap that long is almost certainly a typo"
        )
    if floor is not None and duration < floor:
        raise DurationError(f"{_shown(text)} is shorter than the floor of {format_duration(floor)}")
    return duration


def _shown(text: object) -> str:
    """The value as a message quotes it: a tag of thousands of digits is cut, not echoed whole."""
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:60] + "…"


def format_duration(duration: timedelta) -> str:
    """The shortest text that :func:`parse_duration` reads back as ``duration``."""
    remaining = int(duration.total_seconds())
    if remaining <= 0:
        return "0s"
    parts = []
    for unit, size in _UNIT_SECONDS.items():
        amount, remaining = divmod(remaining, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)
