"""A running (or stopped) EC2 instance as the guardrails see it, built from ``DescribeInstances`` output.

Pure: callers pass in the ``Instance`` dict that boto3 returned, so the same value is built by the
Lambdas, the CLI and the tests without any AWS call here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from guardrails import tags
from guardrails.instance_types import is_accelerator

AUTOSCALING_GROUP_TAG = "aws:autoscaling:groupName"
# EC2's StateTransitionReason for a stop: "User initiated (2025-02-01 10:00:00 GMT)" (moto writes UTC).
STOP_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


@dataclass(frozen=True)
class Host:
    instance_id: str
    instance_type: str
    state: str  # EC2 state name: pending, running, stopping, stopped, shutting-down, terminated
    launch_time: datetime  # tz-aware UTC; EC2's LaunchTime is the instance's *last* start
    tags: Mapping[str, str] = field(hash=False)
    region: str
    lifecycle: str | None = None  # "spot" or None (on-demand)
    autoscaling_group: str | None = None  # from the aws:autoscaling:groupName tag
    state_reason: str | None = None  # EC2's StateTransitionReason: when and why it last changed state

    @classmethod
    def from_instance(cls, instance: Mapping[str, Any], region: str) -> Host:
        """Build from one ``Reservations[].Instances[]`` entry of ``DescribeInstances``."""
        instance_tags = tags.as_dict(instance.get("Tags"))
        return cls(
            instance_id=instance["InstanceId"],
            instance_type=instance["InstanceType"],
            state=instance["State"]["Name"],
            launch_time=as_utc(instance["LaunchTime"]),
            tags=instance_tags,
            region=region,
            lifecycle=instance.get("InstanceLifecycle"),
            autoscaling_group=instance_tags.get(AUTOSCALING_GROUP_TAG),
            state_reason=instance.get("StateTransitionReason") or None,
        )

    @property
    def managed(self) -> bool:
        return self.tags.get(tags.MANAGED, "").strip().lower() == "true"

    @property
    def accelerator(self) -> bool:
        return is_accelerator(self.instance_type)

    @property
    def spot(self) -> bool:
        return self.lifecycle == "spot"

    @property
    def pool(self) -> str | None:
        return self.tags.get(tags.POOL)

    @property
    def tenant(self) -> str | None:
        return self.tags.get(tags.TENANT)

    @property
    def stopped_at(self) -> datetime | None:
        """When a stopped host stopped, from its StateTransitionReason; None when it does not say."""
        return stopped_since(self.state_reason) if self.state == "stopped" else None


def stopped_since(reason: str | None) -> datetime | None:
    """The time in EC2's ``User initiated (YYYY-MM-DD HH:MM:SS GMT)``; None when there is none."""
    match = STOP_TIME.search(reason or "")
    if match is None:
        return None
    try:
        return datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    except ValueError:  # e.g. a 31st of February
        return None


def as_utc(value: object) -> datetime:
    """boto3 gives tz-aware datetimes; JSON payloads and fixtures give ISO-8601 text.

    Anything else (a number, a list, a date no zone can shift) is a ValueError the caller reports.
    """
    if isinstance(value, str):
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    elif isinstance(value, datetime):
        moment = value
    else:
        raise ValueError(f"{str(value)[:60]!r} is not a time; AWS times are ISO-8601 text")
    if moment.tzinfo is None:
        raise ValueError(f"{value!r} has no timezone; AWS times are always UTC")
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value!r} is outside the calendar once written in UTC") from None
