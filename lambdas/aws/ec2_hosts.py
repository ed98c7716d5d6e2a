"""Listing what the guardrails judge: accelerator hosts, and the stacks that exist in a region.

Shared by the reaper, the deadlines and ``parkbrake status``, so that they all see the same hosts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from guardrails import names
from guardrails.hosts import Host
from guardrails.instance_types import accelerator_filter_values, is_accelerator

PAGE_SIZE = 1000  # EC2's maximum: API calls grow with pages of hosts, not with hosts
PARK_PARAMETER_ROOT = "/parkbrake/"


def list_hosts(
    ec2: Any,
    region: str,
    *,
    instance_ids: Sequence[str] | None = None,
    page_size: int = PAGE_SIZE,
    states: Sequence[str] = ("running",),
) -> list[Host]:
    """Accelerator hosts in ``states`` (running ones by default), whatever their tags, filtered
    server-side; or just ``instance_ids``, in any state.

    Ids go in a filter rather than ``InstanceIds`` so that one vanished id does not fail the call. The
    sweep asks for running and stopped hosts in one listing and tells them apart itself: one page
    serves both, where two listings cost a call each even when one of them finds nothing.
    """
    if instance_ids is not None:
        filters = [{"Name": "instance-id", "Values": list(instance_ids)}]
    else:
        filters = [
            {"Name": "instance-state-name", "Values": list(states)},
            {"Name": "instance-type", "Values": accelerator_type_filter(ec2)},
        ]
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=filters, PaginationConfig={"PageSize": page_size}
    )
    return [
        Host.from_instance(instance, region)
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
    ]


def accelerator_type_filter(ec2: Any) -> list[str]:
    """Values for the ``instance-type`` filter: the family wildcards, and every accelerator type by name.

    EC2 matches the wildcards (``g*``), which also catch types newer than this botocore; the exact
    names, from botocore's own model of EC2, are for emulators that match filter values literally
    (moto does), so the same listing works against both.
    """
    known = ec2.meta.service_model.shape_for("InstanceType").enum
    return [*accelerator_filter_values(), *sorted(t for t in known if is_accelerator(t))]


def live_stacks(ssm: Any) -> list[str]:
    """Every stack deployed in the region, known by its park parameter ``/parkbrake/<stack>/parked``."""
    found = set()
    for page in ssm.get_paginator("get_parameters_by_path").paginate(
        Path=PARK_PARAMETER_ROOT, Recursive=True
    ):
        for parameter in page["Parameters"]:
            stack = parameter["Name"].removeprefix(PARK_PARAMETER_ROOT).split("/")[0]
            if parameter["Name"] == names.park_parameter(stack):
                found.add(stack)
    return sorted(found)
