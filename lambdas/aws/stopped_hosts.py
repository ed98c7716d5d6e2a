"""Hosts stopped too long: list them with their volumes, and retire them — every volume snapshotted
(tagged), then the host terminated.

A host is terminated only once a snapshot of each of its volumes has completed. Snapshots still
``pending`` leave the host for a later sweep (which finds them by their ``parkbrake:source-instance``
tag instead of taking new ones); a failed ``CreateSnapshot`` or a snapshot in ``error`` keeps the
host and is reported against it. One host's error never stops the others.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from guardrails import tags
from guardrails.hosts import Host
from guardrails.instance_types import is_accelerator
from guardrails.rules.base import instant
from guardrails.storage import Volume
from lambdas.aws.ec2_hosts import PAGE_SIZE, accelerator_type_filter
from lambdas.aws.errors import AWS_ERRORS, describe_error

log = logging.getLogger(__name__)
SOURCE_INSTANCE_TAG = "parkbrake:source-instance"
FILTER_VALUES_LIMIT = 200  # EC2 takes at most 200 values in one filter


@dataclass
class Retirement:
    terminated: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # snapshots not complete yet: a later sweep goes on
    snapshots: dict[str, list[str]] = field(default_factory=dict)  # instance id -> snapshot ids
    errors: list[dict[str, str]] = field(default_factory=list)


def list_stopped_hosts(ec2: Any, region: str, *, page_size: int = PAGE_SIZE) -> list[Host]:
    """Stopped managed accelerator hosts (filtered server-side)."""
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": "instance-state-name", "Values": ["stopped"]},
            {"Name": "instance-type", "Values": accelerator_type_filter(ec2)},
            {"Name": f"tag:{tags.MANAGED}", "Values": ["true"]},
        ],
        PaginationConfig={"PageSize": page_size},
    )
    return stopped_managed_hosts(
        Host.from_instance(instance, region)
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
    )


def stopped_managed_hosts(hosts: Iterable[Host]) -> list[Host]:
    """The stopped managed accelerator hosts among ``hosts``: what :func:`list_stopped_hosts` lists, picked
    out of a listing of several states (the sweep's one listing of running and stopped hosts)."""
    return [
        host
        for host in hosts
        if host.state == "stopped" and host.managed and is_accelerator(host.instance_type)
    ]


def volumes_by_host(ec2: Any, instance_ids: Sequence[str]) -> dict[str, list[Volume]]:
    """The EBS volumes attached to each host."""
    found: dict[str, list[Volume]] = {instance_id: [] for instance_id in instance_ids}
    for start in range(0, len(instance_ids), FILTER_VALUES_LIMIT):
        chosen = list(instance_ids[start : start + FILTER_VALUES_LIMIT])
        pages = ec2.get_paginator("describe_volumes").paginate(
            Filters=[{"Name": "attachment.instance-id", "Values": chosen}]
        )
        for page in pages:
            for volume in page["Volumes"]:
                for attachment in volume.get("Attachments", []):
                    if attachment.get("InstanceId") in found:
                        found[attachment["InstanceId"]].append(Volume.from_description(volume))
    return found


def retire_hosts(
    hosts: Sequence[Host],
    volumes: dict[str, list[Volume]],
    *,
    ec2: Any,
    stack: str | None,
    now: datetime,
    dry_run: bool,
) -> Retirement:
    """Snapshot every volume of each host, then terminate it; a dry run only says which it would."""
    retirement = Retirement()
    for host in hosts:
        if dry_run:
            retirement.terminated.append(host.instance_id)
            continue
        try:
            _retire(host, volumes.get(host.instance_id, []), ec2=ec2, stack=stack, now=now, into=retirement)
        except AWS_ERRORS as error:
            log.error("could not retire %s: %s", host.instance_id, describe_error(error))
            retirement.errors.append(
                {"instance_id": host.instance_id, "action": "retire", "error": describe_error(error)}
            )
    return retirement


def _retire(
    host: Host, volumes: list[Volume], *, ec2: Any, stack: str | None, now: datetime, into: Retirement
) -> None:
    taken = _snapshots_of(ec2, host.instance_id)
    for volume in volumes:
        if volume.volume_id not in taken:
            taken[volume.volume_id] = _snapshot(ec2, host, volume, stack=stack, now=now)
    into.snapshots[host.instance_id] = sorted(snapshot["SnapshotId"] for snapshot in taken.values())
    failed = sorted(snapshot["SnapshotId"] for snapshot in taken.values() if snapshot["State"] == "error")
    if failed:
        into.errors.append(
            {
                "instance_id": host.instance_id,
                "action": "retire",
                "error": f"snapshot {', '.join(failed)} failed; the host is kept (delete it and the next "
                "sweep snapshots again)",
            }
        )
        return
    if any(snapshot["State"] != "completed" for snapshot in taken.values()):
        log.info("%s: snapshots pending, terminated by a later sweep", host.instance_id)
        into.pending.append(host.instance_id)
        return
    ec2.terminate_instances(InstanceIds=[host.instance_id])
    log.info("terminated %s after snapshotting %d volume(s)", host.instance_id, len(taken))
    into.terminated.append(host.instance_id)


def _snapshots_of(ec2: Any, instance_id: str) -> dict[str, dict[str, Any]]:
    """The snapshots an earlier sweep took of this host's volumes, by volume (failed ones are retaken)."""
    pages = ec2.get_paginator("describe_snapshots").paginate(
        OwnerIds=["self"], Filters=[{"Name": f"tag:{SOURCE_INSTANCE_TAG}", "Values": [instance_id]}]
    )
    return {
        snapshot["VolumeId"]: snapshot
        for page in pages
        for snapshot in page["Snapshots"]
        if snapshot["State"] != "error"
    }


def _snapshot(ec2: Any, host: Host, volume: Volume, *, stack: str | None, now: datetime) -> dict[str, Any]:
    snapshot_tags = [
        {"Key": tags.MANAGED, "Value": "true"},
        {"Key": SOURCE_INSTANCE_TAG, "Value": host.instance_id},
        {"Key": "Name", "Value": f"{host.tags.get('Name') or host.instance_id} {volume.volume_id}"},
        *[{"Key": key, "Value": host.tags[key]} for key in (tags.TENANT, tags.POOL) if host.tags.get(key)],
    ]
    if stack:
        snapshot_tags.append({"Key": tags.STACK, "Value": stack})
    snapshot: dict[str, Any] = ec2.create_snapshot(
        VolumeId=volume.volume_id,
        Description=f"parkbrake: {host.instance_id} stopped too long, retired at {instant(now)}",
        TagSpecifications=[{"ResourceType": "snapshot", "Tags": snapshot_tags}],
    )
    return snapshot
