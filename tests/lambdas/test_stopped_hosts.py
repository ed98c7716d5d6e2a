"""Hosts stopped too long, against moto: reported with their volumes' monthly cost in the sweep's
notification (read through SQS) and, with terminate_stopped on, snapshotted and then terminated."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy, ProxiedRequest
from guardrail_fleet import (
    AMI,
    REGION,
    STACK,
    client_factory,
    guardrail_settings,
    managed_tags,
    published,
    sns_queue,
)

from guardrails import names, tags
from guardrails.decisions import Decision
from guardrails.hosts import stopped_since
from lambdas import reaper
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.environment import ClientFactory
from lambdas.aws.stopped_hosts import SOURCE_INSTANCE_TAG

VOLUMES = [("/dev/sda1", 500), ("/dev/sdf", 100)]  # gp3, $0.08 per GB-month: $48.00 a month


@dataclass
class StoppedHost:
    instance_id: str
    stopped_at: datetime
    volumes: list[str]
    topic: str
    queue_url: str


def launch_and_stop(clients: ClientFactory, host_tags: dict[str, str]) -> tuple[str, datetime, list[str]]:
    ec2 = clients("ec2", REGION)
    (instance,) = ec2.run_instances(
        ImageId=AMI,
        MinCount=1,
        MaxCount=1,
        InstanceType="g5.xlarge",
        BlockDeviceMappings=[
            {"DeviceName": device, "Ebs": {"VolumeSize": size, "VolumeType": "gp3"}}
            for device, size in VOLUMES
        ],
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in host_tags.items()]}
        ],
    )["Instances"]
    instance_id = instance["InstanceId"]
    ec2.stop_instances(InstanceIds=[instance_id])
    described = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    stopped_at = stopped_since(described["StateTransitionReason"])
    assert stopped_at is not None, described["StateTransitionReason"]
    volumes = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [instance_id]}])[
        "Volumes"
    ]
    return instance_id, stopped_at, sorted(volume["VolumeId"] for volume in volumes)


@pytest.fixture
def stopped(aws: str) -> StoppedHost:
    clients = client_factory(aws)
    clients("ssm", REGION).put_parameter(Name=names.park_parameter(STACK), Value="false", Type="String")
    topic, queue_url = sns_queue(clients)
    instance_id, stopped_at, volumes = launch_and_stop(clients, managed_tags() | {"Name": "finetune-7b"})
    return StoppedHost(instance_id, stopped_at, volumes, topic, queue_url)


@dataclass
class Decisions:
    """The decision log's writer, as the ledger's store takes them."""

    appended: list[Decision] = field(default_factory=list)

    def append(self, decisions: Sequence[Decision], *, origin: str) -> dict[str, str]:
        self.appended += decisions
        return {}

    def about(self, instance_id: str) -> list[tuple[str, Any]]:
        return [
            (item.kind, item.details.get("action"))
            for item in self.appended
            if item.instance_id == instance_id
        ]


def sweep(
    endpoint: str, host: StoppedHost, *, days: float, terminate: bool, decisions: Decisions | None = None
) -> dict[str, Any]:
    settings = guardrail_settings(sns_topic_arn=host.topic, terminate_stopped=terminate)
    now = host.stopped_at + timedelta(days=days)
    log = DecisionLog(guardrail="reaper", origin="sweep", ledger=lambda: decisions or Decisions())
    return reaper.handle({}, settings=settings, clients=client_factory(endpoint), now=now, decisions=log)


def state(aws: str, instance_id: str) -> str:
    ec2 = client_factory(aws)("ec2", REGION)
    return str(
        ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"]
    )


def snapshots(aws: str, instance_id: str) -> list[dict[str, Any]]:
    ec2 = client_factory(aws)("ec2", REGION)
    return list(
        ec2.describe_snapshots(
            OwnerIds=["self"], Filters=[{"Name": f"tag:{SOURCE_INSTANCE_TAG}", "Values": [instance_id]}]
        )["Snapshots"]
    )


def notification(aws: str, host: StoppedHost) -> str:
    (message,) = published(client_factory(aws), host.queue_url)
    return str(message["Message"])


def test_a_host_stopped_past_the_retention_is_reported_with_its_storage_cost(
    aws: str, stopped: StoppedHost
) -> None:
    result = sweep(aws, stopped, days=8, terminate=False)

    (row,) = [row for row in result["hosts"] if row["instance_id"] == stopped.instance_id]
    assert (row["verdict"], row["storage_usd_month"]) == ("skip", "48.00")
    assert row["reports"][0]["rule"] == "stopped-too-long"
    body = notification(aws, stopped)
    assert f"- {stopped.instance_id} (us-east-1) Name=finetune-7b tenant=research pool=training" in body
    assert "stopped (no compute billed)" in body
    assert "action: reported (stopped-too-long)" in body
    assert "past the 7d retention; its 2 volumes (600 GB) cost $48.00 a month" in body
    assert "reported only (guardrails.terminate_stopped is off)" in body
    assert state(aws, stopped.instance_id) == "stopped"
    assert snapshots(aws, stopped.instance_id) == []


def test_within_the_retention_nothing_is_said_or_done(aws: str, stopped: StoppedHost) -> None:
    result = sweep(aws, stopped, days=6.9, terminate=True)

    assert stopped.instance_id not in {row["instance_id"] for row in result["hosts"]}
    assert published(client_factory(aws), stopped.queue_url) == []
    assert state(aws, stopped.instance_id) == "stopped"


def test_with_terminate_stopped_each_volume_is_snapshotted_then_the_host_terminated(
    aws: str, stopped: StoppedHost
) -> None:
    decisions = Decisions()

    result = sweep(aws, stopped, days=8, terminate=True, decisions=decisions)

    assert ("stop", "retire") in decisions.about(stopped.instance_id)
    taken = snapshots(aws, stopped.instance_id)
    assert sorted(snapshot["VolumeId"] for snapshot in taken) == stopped.volumes
    assert result["retired"] == [stopped.instance_id]
    assert result["snapshots"] == {stopped.instance_id: sorted(snapshot["SnapshotId"] for snapshot in taken)}
    for snapshot in taken:
        snapshot_tags = {tag["Key"]: tag["Value"] for tag in snapshot["Tags"]}
        assert snapshot_tags[tags.MANAGED] == "true"
        assert snapshot_tags[tags.STACK] == STACK
        assert snapshot_tags[tags.TENANT] == "research"
    assert state(aws, stopped.instance_id) == "terminated"
    body = notification(aws, stopped)
    assert "action: terminated after a snapshot of each of its volumes (stopped too long)" in body


def test_a_failed_snapshot_keeps_the_host_and_the_next_sweep_finishes_the_job(
    aws: str, stopped: StoppedHost
) -> None:
    second_volume = stopped.volumes[1]

    def of_second_volume(request: ProxiedRequest) -> bool:
        return second_volume in request.text

    with FaultProxy(aws) as proxy:
        proxy.fail(
            "CreateSnapshot", "SnapshotCreationPerVolumeRateExceeded", "slow down", matches=of_second_volume
        )
        decisions = Decisions()
        failed = sweep(proxy.url, stopped, days=8, terminate=True, decisions=decisions)

    assert failed["retired"] == []
    (error,) = [error for error in failed["errors"] if error.get("instance_id") == stopped.instance_id]
    assert error["action"] == "retire"
    assert "SnapshotCreationPerVolumeRateExceeded" in error["error"]
    assert state(aws, stopped.instance_id) == "stopped"
    assert ("stop-failed", None) in decisions.about(stopped.instance_id)
    body = notification(aws, stopped)
    assert "Failed to stop (1):" in body
    assert "failed to retire: " in body

    again = sweep(aws, stopped, days=8.01, terminate=True)

    taken = snapshots(aws, stopped.instance_id)
    # The first volume's snapshot is reused, not taken twice.
    assert sorted(snapshot["VolumeId"] for snapshot in taken) == stopped.volumes
    assert again["retired"] == [stopped.instance_id]
    assert state(aws, stopped.instance_id) == "terminated"


def test_another_stacks_stopped_hosts_are_left_to_it(aws: str, stopped: StoppedHost) -> None:
    clients = client_factory(aws)
    clients("ssm", REGION).put_parameter(Name=names.park_parameter("other"), Value="false", Type="String")
    theirs, _, _ = launch_and_stop(clients, managed_tags() | {tags.STACK: "other"})

    result = sweep(aws, stopped, days=8, terminate=True)

    assert theirs not in {row["instance_id"] for row in result["hosts"]}
    assert state(aws, theirs) == "stopped"
    assert result["retired"] == [stopped.instance_id]


def test_a_dry_run_says_what_it_would_retire_and_changes_nothing(aws: str, stopped: StoppedHost) -> None:
    settings = guardrail_settings(sns_topic_arn=stopped.topic, terminate_stopped=True)
    now = stopped.stopped_at + timedelta(days=8)

    result = reaper.handle({"dry_run": True}, settings=settings, clients=client_factory(aws), now=now)

    assert (result["would_retire"], result["retired"]) == ([stopped.instance_id], [])
    assert snapshots(aws, stopped.instance_id) == []
    assert state(aws, stopped.instance_id) == "stopped"
