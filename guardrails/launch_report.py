"""What a pool's start got: the hosts its Auto Scaling group launched, per instance type and zone, the
types and zones EC2 had no capacity for, and the hosts still pending.

A pool with fallback types launches through a mixed-instances policy: when EC2 answers a launch with
``InsufficientInstanceCapacity`` the group itself tries the next override (and the other zones). The
group reports each failed try as a scaling activity (``StatusCode`` ``Failed`` or ``Cancelled``)
whose ``StatusMessage`` carries EC2's message, e.g. ``... InsufficientInstanceCapacity - We currently
do not have sufficient g5.12xlarge capacity in the Availability Zone you requested (us-east-1a) ...``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# EC2's own sentence for InsufficientInstanceCapacity: the type, then the zone it was asked in.
_NO_CAPACITY = re.compile(
    r"do not have sufficient (?P<type>[\w.-]+) capacity in the Availability Zone you requested "
    r"\((?P<zone>[\w-]+)\)"
)
FAILED = ("Failed", "Cancelled")
# The group's instances that are (or are becoming) hosts; the rest are leaving.
LAUNCHED_STATES = ("Pending", "Pending:Wait", "Pending:Proceed", "InService")


@dataclass(frozen=True)
class Shortfall:
    """A launch the group tried and EC2 refused for want of capacity."""

    instance_type: str | None  # None when the message does not name it
    zone: str | None
    message: str

    def describe(self) -> str:
        where = f"{self.instance_type or 'an instance type'} in {self.zone or 'a zone'}"
        return f"{where}: insufficient capacity"


@dataclass(frozen=True)
class LaunchReport:
    """What a start of ``wanted`` hosts got once the launcher stopped waiting."""

    wanted: int  # the group's desired capacity after the start
    started: Mapping[tuple[str, str], int]  # (instance type, zone) -> hosts in service
    pending: int  # hosts launched, not yet in service
    no_capacity: tuple[Shortfall, ...]  # the group's tries EC2 had no capacity for

    @property
    def launched(self) -> int:
        return sum(self.started.values()) + self.pending

    @property
    def short(self) -> int:
        """Hosts the group wants and has not launched."""
        return max(self.wanted - self.launched, 0)

    @property
    def settled(self) -> bool:
        """Every host the group wants is in service."""
        return sum(self.started.values()) >= self.wanted

    @property
    def finding(self) -> bool:
        """The group is short of hosts and EC2 said it had no capacity: a person must know."""
        return self.short > 0 and bool(self.no_capacity)

    def as_dict(self) -> dict[str, Any]:
        return {
            "wanted": self.wanted,
            "started": [
                {"instance_type": instance_type, "zone": zone, "hosts": hosts}
                for (instance_type, zone), hosts in sorted(self.started.items())
            ],
            "pending": self.pending,
            "short": self.short,
            "insufficient_capacity": [
                {"instance_type": item.instance_type, "zone": item.zone} for item in self.no_capacity
            ],
        }

    def describe(self) -> str:
        started = ", ".join(
            f"{hosts} x {instance_type} in {zone}"
            for (instance_type, zone), hosts in sorted(self.started.items())
        )
        parts = [f"{started or 'no host'} in service", f"{self.pending} pending"]
        if self.no_capacity:
            parts.append("; ".join(item.describe() for item in self.no_capacity))
        if self.short:
            parts.append(f"{self.short} of {self.wanted} not launched")
        return ", ".join(parts)


def shortfall_of(activity: Mapping[str, Any]) -> Shortfall | None:
    """The insufficient capacity a failed scaling activity reports, or None (it is not one)."""
    if activity.get("StatusCode") not in FAILED:
        return None
    message = str(activity.get("StatusMessage") or "")
    found = _NO_CAPACITY.search(message)
    if found is None and "InsufficientInstanceCapacity" not in message:
        return None
    return Shortfall(found["type"] if found else None, found["zone"] if found else None, message)


def launch_report(
    *,
    wanted: int,
    instances: Iterable[Mapping[str, Any]],
    activities: Iterable[Mapping[str, Any]],
    since: datetime,
) -> LaunchReport:
    """The group's ``instances`` (DescribeAutoScalingGroups) and its scaling ``activities`` started at or
    after ``since`` (DescribeScalingActivities), as what the start got."""
    started: Counter[tuple[str, str]] = Counter()
    pending = 0
    for instance in instances:
        state = instance.get("LifecycleState")
        if state == "InService":
            started[
                (str(instance.get("InstanceType") or "?"), str(instance.get("AvailabilityZone") or "?"))
            ] += 1
        elif state in LAUNCHED_STATES:
            pending += 1
    shortfalls = [
        shortfall
        for activity in activities
        if activity.get("StartTime") is None or activity["StartTime"] >= since
        if (shortfall := shortfall_of(activity)) is not None
    ]
    first: dict[tuple[str | None, str | None], Shortfall] = {}
    for shortfall in shortfalls:  # one per type and zone, however often the group retried it
        first.setdefault((shortfall.instance_type, shortfall.zone), shortfall)
    return LaunchReport(wanted, dict(started), pending, tuple(first.values()))
