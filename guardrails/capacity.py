"""Min/desired/max of a group of hosts or tasks, and what parking does to it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capacity:
    min: int
    desired: int
    max: int

    def parked(self) -> Capacity:
        """Parking keeps the ceiling, so unparking needs nothing but the config value."""
        return Capacity(0, 0, self.max)
