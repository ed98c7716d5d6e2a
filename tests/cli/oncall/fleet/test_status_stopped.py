"""``parkbrake status`` lists the managed GPU hosts stopped past the retention with what their volumes
cost a month (moto's server), as the sweep reports them, in 80 columns without cutting an id."""

from __future__ import annotations

import io
from datetime import datetime, timedelta

import pytest
from aws_fault_proxy import FaultProxy
from guardrail_fleet import AMI, REGION, STACK, client_factory, managed_tags
from rich.console import Console

from cli.oncall.fleet.status import FleetStatus, fleet_status
from cli.oncall.fleet.status_view import parse_filters, print_status, select
from guardrails import tags
from guardrails.hosts import stopped_since
from guardrails.settings import Settings
from lambdas.aws.environment import ClientFactory

VOLUMES = [("/dev/sda1", 500), ("/dev/sdf", 100)]  # gp3 at $0.08 per GB-month: $48.00 a month
ANA = "ana.lima@example.com"


def stopped_host(clients: ClientFactory, host_tags: dict[str, str]) -> tuple[str, datetime]:
    ec2 = clients("ec2", REGION)
    (instance,) = ec2.run_instances(
        ImageId=AMI, MinCount=1, MaxCount=1, InstanceType="g5.xlarge",
        BlockDeviceMappings=[{"DeviceName": device, "Ebs": {"VolumeSize": size, "VolumeType": "gp3"}}
                             for device, size in VOLUMES],
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in host_tags.items()]}],
    )["Instances"]  # fmt: skip
    ec2.stop_instances(InstanceIds=[instance["InstanceId"]])
    described = ec2.describe_instances(InstanceIds=[instance["InstanceId"]])["Reservations"][0]["Instances"][
        0
    ]
    stopped_at = stopped_since(described["StateTransitionReason"])
    assert stopped_at is not None
    return instance["InstanceId"], stopped_at


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    return client_factory(aws)


def status_at(
    clients: ClientFactory, now: datetime, retention: timedelta, stack: str | None = STACK
) -> FleetStatus:
    settings = Settings(stack=None, regions=(REGION,), stopped_retention=retention)
    return fleet_status(stack=stack, regions=[REGION], clients=clients, settings=settings, now=now)


def rendered(report: FleetStatus, width: int, *filters: str) -> str:
    output = io.StringIO()
    print_status(
        Console(file=output, width=width, color_system=None), select(report, parse_filters(filters), None)
    )
    return output.getvalue()


def test_hosts_stopped_past_the_retention_are_listed_with_their_monthly_storage_cost(
    clients: ClientFactory,
) -> None:
    anas, stopped_at = stopped_host(clients, managed_tags() | {tags.OWNER: ANA})
    stopped_host(clients, {"Name": "unmanaged"})  # not the guardrails': never listed
    others, _ = stopped_host(clients, managed_tags() | {tags.STACK: "other"})
    now = stopped_at + timedelta(days=8)

    report = status_at(clients, now, timedelta(days=7))

    (listed,) = report.as_dict()["stopped_too_long"]  # only this stack's managed host
    assert listed["instance_id"] == anas
    assert (listed["monthly_usd"], listed["size_gb"], listed["owner"]) == (48.0, 600, ANA)
    assert listed["stopped_for"] == "8d"
    assert report.summary()["stopped_monthly_usd"] == 48.0
    assert status_at(clients, now, timedelta(days=30), stack=None).stopped == []  # within a longer retention
    every_stack = status_at(clients, now, timedelta(days=7), stack=None)
    assert sorted(stopped.host.instance_id for stopped in every_stack.stopped) == sorted([anas, others])


@pytest.mark.parametrize("width", [80, 120])
def test_the_stopped_table_fits_the_width_without_cutting_an_id(clients: ClientFactory, width: int) -> None:
    hosts = [stopped_host(clients, managed_tags(tenant=f"tenant-with-a-long-name-{n}") | {tags.OWNER: ANA})
             for n in range(3)]  # fmt: skip
    now = max(stopped_at for _, stopped_at in hosts) + timedelta(days=10)

    text = rendered(status_at(clients, now, timedelta(days=7)), width)

    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "Stopped past the retention (3): their volumes cost $144.00 a month" in text
    for instance_id, _ in hosts:
        (line,) = [line for line in lines if line.startswith(instance_id + " ")]
        assert "48.00" in line
    assert "…" not in text


def test_filters_narrow_the_stopped_hosts_too(clients: ClientFactory) -> None:
    research, stopped_at = stopped_host(clients, managed_tags(tenant="research"))
    stopped_host(clients, managed_tags(tenant="vision"))
    report = status_at(clients, stopped_at + timedelta(days=9), timedelta(days=7))
    assert [s.host.instance_id for s in select(report, parse_filters(["tenant=research"]), None).stopped] == [
        research
    ]
    assert select(report, parse_filters(["state=overdue"]), None).stopped == []


def test_volumes_ec2_refuses_are_an_error_line_and_the_rest_still_shown(aws: str) -> None:
    _, stopped_at = stopped_host(client_factory(aws), managed_tags())
    with FaultProxy(aws) as proxy:
        proxy.fail("DescribeVolumes", "UnauthorizedOperation", "not authorized", status=403)
        report = status_at(client_factory(proxy.url), stopped_at + timedelta(days=8), timedelta(days=7))
    assert report.stopped == []
    assert report.errors[0].split(": ", 1)[1].startswith("cannot list stopped hosts")
    assert "UnauthorizedOperation" in report.errors[0]
