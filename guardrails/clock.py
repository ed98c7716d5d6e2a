"""The clock that engines and guardrails take as an argument, so tests can move time themselves."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Wall-clock instants that advance with the monotonic clock, so an NTP step cannot fake a window."""

    def __init__(self) -> None:
        self._anchor = datetime.now(UTC)
        self._anchor_monotonic = time.monotonic()

    def now(self) -> datetime:
        return self._anchor + timedelta(seconds=time.monotonic() - self._anchor_monotonic)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class ManualClock:
    """Time that moves only when slept through: replays, benchmarks and tests run in virtual time."""

    def __init__(self, start: datetime) -> None:
        self._now = start

    def now(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        self._now += timedelta(seconds=max(seconds, 0.0))
