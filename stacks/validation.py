"""A reader for untyped YAML that collects every problem with its path instead of stopping at the first.

Getters return a usable fallback after recording a problem, so one pass over the whole document
reports everything; the caller raises :class:`ConfigError` at the end if anything was recorded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from guardrails.durations import DEFAULT_CEILING, DurationError, parse_duration
from guardrails.errors import Problem, ProblemsError

T = TypeVar("T")
_MISSING: Any = object()
NAME_PATTERN = re.compile(r"[a-z][a-z0-9-]{0,30}")


ConfigProblem = Problem  # one thing wrong in a stack config, at its path


class ConfigError(ProblemsError):
    """A stack config with one or more problems, each with its path in the YAML."""


@dataclass
class Problems:
    items: list[ConfigProblem] = field(default_factory=list)

    def add(self, path: str, message: str) -> None:
        self.items.append(ConfigProblem(path, message))

    def has(self, path: str) -> bool:
        return any(problem.path == path for problem in self.items)

    def raise_if_any(self, source: str) -> None:
        if self.items:
            raise ConfigError(source, self.items)


def _show(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


class Section:
    """One mapping in the document, at ``path``, whose keys must be among ``allowed``."""

    def __init__(self, raw: object, path: str, problems: Problems, allowed: set[str]) -> None:
        self.path = path
        self.problems = problems
        self.raw: dict[str, Any] = {}
        if raw is None:
            return
        if not isinstance(raw, dict):
            problems.add(path, f"must be a mapping with keys {', '.join(sorted(allowed))}")
            return
        self.raw = raw
        for key in raw:
            if key not in allowed:
                problems.add(self.at(str(key)), f"unknown key; allowed here: {', '.join(sorted(allowed))}")

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.raw and self.raw[key] is not None

    def _get(self, key: str, default: Any, expected: str) -> Any:
        if not self.has(key):
            if default is _MISSING:
                self.problems.add(self.at(key), f"is required ({expected})")
            return _MISSING
        return self.raw[key]

    def _checked(self, key: str, default: Any, expected: str, fallback: T, convert: Callable[[Any], T]) -> T:
        value = self._get(key, default, expected)
        if value is _MISSING:
            return fallback if default is _MISSING else default
        try:
            return convert(value)
        except (ValueError, TypeError) as error:
            self.problems.add(self.at(key), f"{_show(value)} {error}" if str(error) else expected)
            return fallback

    def string(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        pattern: re.Pattern[str] | None = None,
        hint: str = "a string",
    ) -> str:
        def convert(value: Any) -> str:
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"is not {hint}")
            if pattern is not None and pattern.fullmatch(value) is None:
                raise ValueError(f"is not {hint}")
            return value

        return self._checked(key, default, hint, "", convert)

    def integer(
        self, key: str, default: Any = _MISSING, *, minimum: int = 0, maximum: int | None = None
    ) -> int:
        bounds = f"an integer ≥ {minimum}" + (f" and ≤ {maximum}" if maximum is not None else "")

        def convert(value: Any) -> int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"is not {bounds}")
            if value < minimum or (maximum is not None and value > maximum):
                raise ValueError(f"is out of range; use {bounds}")
            return value

        return self._checked(key, default, bounds, minimum, convert)

    def number(
        self, key: str, default: Any = _MISSING, *, minimum: float = 0.0, maximum: float | None = None
    ) -> float:
        bounds = f"a number ≥ {minimum:g}" + (f" and ≤ {maximum:g}" if maximum is not None else "")

        def convert(value: Any) -> float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"is not {bounds}")
            if value < minimum or (maximum is not None and value > maximum):
                raise ValueError(f"is out of range; use {bounds}")
            return float(value)

        return self._checked(key, default, bounds, minimum, convert)

    def boolean(self, key: str, default: Any = _MISSING) -> bool:
        def convert(value: Any) -> bool:
            if not isinstance(value, bool):
                raise ValueError("is not a boolean; use true or false")
            return value

        return self._checked(key, default, "true or false", False, convert)

    def choice(self, key: str, choices: tuple[str, ...], default: Any = _MISSING) -> str:
        allowed = " or ".join(choices)

        def convert(value: Any) -> str:
            if value not in choices:
                raise ValueError(f"is not allowed; use {allowed}")
            return str(value)

        return self._checked(key, default, allowed, choices[0], convert)

    def duration(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        ceiling: timedelta = DEFAULT_CEILING,
        floor: timedelta | None = None,
    ) -> timedelta:
        def convert(value: Any) -> timedelta:
            try:
                return parse_duration(value, ceiling=ceiling, floor=floor)
            except DurationError as error:
                # parse_duration quotes the value itself; _checked quotes it once already.
                raise ValueError(str(error).removeprefix(f"{value!r} ")) from None

        return self._checked(key, default, "a duration such as 90m, 2h, 1h30m", timedelta(seconds=1), convert)

    def string_list(self, key: str, default: Any = _MISSING, *, hint: str = "a list of strings") -> list[str]:
        def convert(value: Any) -> list[str]:
            if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
                raise ValueError(f"is not {hint}")
            return list(value)

        return self._checked(key, default, hint, [], convert)

    def matching_list(self, key: str, pattern: re.Pattern[str], *, what: str) -> list[str]:
        """A list of strings (default empty), each of which ``pattern`` matches in full: ``what``."""
        values = self.string_list(key, [], hint=f"a list, each {what}")
        for index, value in enumerate(values):
            if pattern.fullmatch(value) is None:
                self.problems.add(f"{self.at(key)}[{index}]", f'"{value}" is not {what}')
        return values

    def section(self, key: str, allowed: set[str], *, required: bool = False) -> Section:
        if required and not self.has(key):
            self.problems.add(self.at(key), f"is required (a mapping with keys {', '.join(sorted(allowed))})")
        return Section(self.raw.get(key), self.at(key), self.problems, allowed)

    def named_sections(
        self, key: str, allowed: set[str], *, required: bool = False
    ) -> Iterator[tuple[str, Section]]:
        """The entries of a mapping of names to sections, e.g. ``pools: {training: {...}}``."""
        value = self.raw.get(key)
        path = self.at(key)
        if value is None:
            if required:
                self.problems.add(path, "is required (a mapping of names to settings)")
            return
        if not isinstance(value, dict):
            self.problems.add(path, "must be a mapping of names to settings")
            return
        for name, raw in value.items():
            if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
                self.problems.add(
                    f"{path}.{name}", "is not a valid name; use lowercase letters, digits and '-', at most 31"
                )
                continue
            yield name, Section(raw, f"{path}.{name}", self.problems, allowed)
