"""IANA time zones as every command reads them: the one parser of a zone name a user or a file gives.

``zoneinfo.ZoneInfo`` turns a name into a file path under its search path (PEP 615), so a bad name
fails in several ways, not only ``ZoneInfoNotFoundError``: ``ValueError`` for an absolute or
``..`` path or a NUL, ``IsADirectoryError`` for a region (``America``), ``OSError`` (ENAMETOOLONG) for a
name longer than a file name may be (CPython Lib/zoneinfo/_tzpath.py, ``find_tzfile`` and
``_validate_tzfile_path``; Lib/zoneinfo/_common.py, ``load_tzdata``). Every one of them is the
same bad input: the field named, an example given, the name shown at most ``SHOWN_CHARACTERS`` long.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from guardrails.errors import InputError

EXAMPLES = "for example Europe/Berlin, America/New_York or UTC"
SHOWN_CHARACTERS = 64


def zone_problem(name: object) -> str | None:
    """Why ``name`` is not an IANA time zone (without the field), or None when it is one."""
    if isinstance(name, str):
        try:
            ZoneInfo(name)
            return None
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    text = str(name)
    shown = text if len(text) <= SHOWN_CHARACTERS else f"{text[: SHOWN_CHARACTERS - 3]}..."
    return f"{shown!r} is not an IANA time zone ({EXAMPLES})"


def time_zone(name: object, field: str) -> ZoneInfo:
    """The IANA time zone ``name``; any other value is an InputError naming ``field`` and an example."""
    problem = zone_problem(name)
    if problem is not None:
        raise InputError(f"{field}: {problem}")
    assert isinstance(name, str)
    return ZoneInfo(name)
