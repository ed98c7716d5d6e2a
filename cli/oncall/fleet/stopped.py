"""What ``status`` shows of hosts that no longer run: managed GPU hosts stopped longer than
``guardrails.stopped_retention``, with what their volumes cost a month.

The same listing, rule and pricing as the sweep's ``stopped-too-long`` finding
(``lambdas.aws.stopped_hosts``, ``guardrails.rules.stopped_too_long``, ``guardrails.storage``), so
status shows the hosts the sweep reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from guardrails import tags
from guardrails.durations import format_duration
from guardrails.hosts import Host
from guardrails.owners import owner_of
from guardrails.pricing import load_price_table
from guardrails.rules.base import instant
from guardrails.rules.stopped_too_long import stopped_too_long
from guardrails.storage import Storage, storage_of
from lambdas.aws.errors import describe_error
from lambdas.aws.stopped_hosts import list_stopped_hosts, volumes_by_host


@dataclass(frozen=True)
class StoppedHost:
    host: Host
    stopped_for: timedelta
    storage: Storage
    account: str | None = None  # across the organisation: the account's name

    def as_dict(self) -> dict[str, Any]:
        return {
            "instance_id": self.host.instance_id,
            **({"account": self.account} if self.account is not None else {}),
            "region": self.host.region,
            "stack": self.host.tags.get(tags.STACK),
            "tenant": self.host.tenant,
            "pool": self.host.pool,
            "owner": owner_of(self.host.tags),
            "stopped_at": instant(self.host.stopped_at) if self.host.stopped_at else None,
            "stopped_for": format_duration(self.stopped_for),
            "volumes": [volume.volume_id for volume in self.storage.volumes],
            "size_gb": self.storage.size_gb,
            "monthly_usd": float(self.storage.monthly_usd),
            "unpriced_volume_types": list(self.storage.unpriced),
        }


def stopped_too_long_in(
    ec2: Any, region: str, stack: str | None, *, retention: timedelta, now: datetime
) -> tuple[list[StoppedHost], list[str]]:
    """The region's managed GPU hosts (of ``stack``, if given) stopped longer than ``retention``,
    longest first; a listing EC2 refuses is an error line, never an exception."""
    try:
        past = [
            (host, stopped_for)
            for host in list_stopped_hosts(ec2, region)
            if stack is None or host.tags.get(tags.STACK) == stack
            for stopped_for in [stopped_too_long(host, now, retention)]
            if stopped_for is not None
        ]
        volumes = volumes_by_host(ec2, [host.instance_id for host, _ in past]) if past else {}
    except ClientError as error:
        return [], [f"{region}: cannot list stopped hosts: {describe_error(error)}"]
    prices = load_price_table()
    found = [
        StoppedHost(host, stopped_for, storage_of(volumes.get(host.instance_id, []), prices, region))
        for host, stopped_for in past
    ]
    return sorted(found, key=lambda stopped: (-stopped.stopped_for, stopped.host.instance_id)), []
