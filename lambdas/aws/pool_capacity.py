"""What a pool's Auto Scaling group launched after a start, read until it has every host or the
launcher stops waiting: its instances (type, zone, lifecycle state) and its scaling activities, where
the group reports the launches EC2 refused for want of capacity."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from guardrails.launch_report import LaunchReport, launch_report

POLL_S = 5.0


def read_report(autoscaling: Any, group_name: str, *, wanted: int, since: datetime) -> LaunchReport:
    groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group_name])["AutoScalingGroups"]
    instances = groups[0].get("Instances", []) if groups else []
    activities = autoscaling.describe_scaling_activities(AutoScalingGroupName=group_name, MaxRecords=50)
    return launch_report(
        wanted=wanted, instances=instances, activities=activities.get("Activities", []), since=since
    )


def await_report(
    autoscaling: Any,
    group_name: str,
    *,
    wanted: int,
    since: datetime,
    wait_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> LaunchReport:
    """Read the group until every host it wants is in service or ``wait_s`` has passed; the last read."""
    deadline = clock() + wait_s
    while True:
        report = read_report(autoscaling, group_name, wanted=wanted, since=since)
        remaining = deadline - clock()
        if report.settled or remaining <= 0:
            return report
        sleep(min(POLL_S, remaining))
