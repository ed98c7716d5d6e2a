"""IAM wildcard patterns (``*`` and ``?``) that match the durations no longer than a ceiling.

The preventive policy cannot parse a tag: IAM compares strings. What it can do is allow only the
``parkbrake:max-runtime`` values whose *shape* keeps them within the ceiling: ``?`` stands for one
character, so ``??m`` is at most ``99m`` and ``1??m`` at most ``199m``. A number range 1..N is
covered by a handful of such patterns (``?``, ``??``, ``1??``, ``20?``, ``210`` for 1..210).

The shapes are one unit (``90m``, ``2h``, ``5400s``, ``1d``) or days-and-hours or hours-and-minutes
(``1d12h``, ``1h30m``), the second of one or two digits: what people write and what
:func:`guardrails.durations.format_duration` writes for the caps the components tag. A pattern is
kept only when its largest value fits the ceiling, so near the ceiling a valid value of a wide shape
may be refused (``23h30m`` under ``24h``, whose shape reaches ``23h99m``): written in one unit
(``1410m``) it passes. ``?`` matches a letter as well as a digit, so a value the policy lets through
may still not parse (``1xm``); the guardrails then judge the host under the default cap, as any
unusable tag. What the policy adds is that no launch carries a cap whose digits reach past the
ceiling, or a value of thousands of digits. A ``?`` that a unit letter fills is bounded by
:data:`SKIPPED_UNITS` (see there).
"""

from __future__ import annotations

from datetime import timedelta

# ``?`` also matches a unit letter, which can turn ``???m`` into ``9d9m``. A letter that joins two
# adjacent units (days and hours, hours and minutes, minutes and seconds) costs a digit's place and
# gains at most a factor of 60, so such a reading never exceeds the digits-only one (9h9m < 999m). The
# policy denies the rest outright: any value with a unit letter followed later by one that is not the
# next unit down.
SKIPPED_UNITS = ("*d*m*", "*d*s*", "*h*s*")
# The units in order, with the next smaller one a two-unit shape may end with.
UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))


def number_patterns(largest: int) -> list[str]:
    """Patterns of ``?`` and digits matching exactly the decimal numbers 1..``largest`` (no leading
    zeros needed), when ``?`` is read as a digit."""
    if largest < 1:
        return []
    text = str(largest)
    patterns = ["?" * width for width in range(1, len(text))]  # every shorter number
    for position, digit in enumerate(text):
        lowest = 1 if position == 0 else 0
        patterns += [
            text[:position] + str(smaller) + "?" * (len(text) - position - 1)
            for smaller in range(lowest, int(digit))
        ]
    return [*patterns, text]


def duration_patterns(ceiling: timedelta) -> list[str]:
    """The patterns of the durations whose every reading (``?`` a digit) is at most ``ceiling``."""
    limit = int(ceiling.total_seconds())
    patterns: list[str] = []
    for index, (unit, size) in enumerate(UNITS):
        patterns += [f"{number}{unit}" for number in number_patterns(limit // size)]
        if index + 2 < len(UNITS):  # not minutes-and-seconds: no cap is written 2m30s
            smaller, smaller_size = UNITS[index + 1]
            for width in (1, 2):
                rest = (10**width - 1) * smaller_size
                tail = "?" * width + smaller
                patterns += [f"{number}{unit}{tail}" for number in number_patterns((limit - rest) // size)]
    return patterns
