"""Builders for guardrail tests: GPU fleets in moto, the settings and clients the Lambdas get,
and EC2's native state-change events."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.config import Config

from guardrails import names, tags
from guardrails.settings import Settings
from lambdas.aws.environment import ClientFactory
from lambdas.clients import CONCURRENT_CALLS
from tests.aws_call_recorder import observe

STACK = "test"
REGION = "us-east-1"
AMI = "ami-12345678"
ACCOUNT = "123456789012"
TARGET_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{names.function_name(STACK, 'reaper')}"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/parkbrake-test-scheduler"


def client_factory(endpoint_url: str, *, max_attempts: int = 3) -> ClientFactory:
    """Clients like the Lambdas' (adaptive retries), bound to ``endpoint_url`` (moto, or a fault proxy)."""
    config = Config(
        retries={"mode": "adaptive", "max_attempts": max_attempts}, max_pool_connections=CONCURRENT_CALLS
    )
    made: dict[tuple[str, str | None], Any] = {}

    def make(service: str, region: str | None) -> Any:
        key = (service, region)
        if key not in made:
            session: Any = boto3.session.Session()  # Any: the service name is a runtime value
            observe(session)  # which guardrail makes which call: tests/aws_call_recorder.py
            made[key] = session.client(
                service, region_name=region or REGION, endpoint_url=endpoint_url, config=config
            )
        return made[key]

    return make


def guardrail_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "stack": STACK,
        "regions": (REGION,),
        "deadline_target_arn": TARGET_ARN,
        "scheduler_role_arn": ROLE_ARN,
    }
    values.update(overrides)
    return Settings(**values)


def managed_tags(
    *, pool: str = "training", tenant: str = "research", max_runtime: str | None = "90m", **extra: str
) -> dict[str, str]:
    values = {
        tags.MANAGED: "true",
        tags.STACK: STACK,
        tags.POOL: pool,
        tags.TENANT: tenant,
        tags.REVISION: "0123abc",
    }
    if max_runtime is not None:
        values[tags.MAX_RUNTIME] = max_runtime
    values.update(extra)
    return values


def launch(
    ec2: Any,
    instance_type: str = "g5.xlarge",
    instance_tags: Mapping[str, str] | None = None,
    *,
    count: int = 1,
    spot: bool = False,
) -> list[str]:
    request: dict[str, Any] = {
        "ImageId": AMI,
        "MinCount": count,
        "MaxCount": count,
        "InstanceType": instance_type,
    }
    if instance_tags:
        request["TagSpecifications"] = [
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in instance_tags.items()]}
        ]
    if spot:
        request["InstanceMarketOptions"] = {"MarketType": "spot"}
    return [instance["InstanceId"] for instance in ec2.run_instances(**request)["Instances"]]


def create_pool(
    autoscaling: Any,
    ec2: Any,
    *,
    pool: str,
    instance_type: str = "g5.xlarge",
    desired: int = 0,
    max_size: int = 4,
    min_size: int = 0,
    group_tags: Mapping[str, str] | None = None,
    overrides: Sequence[str] = (),
) -> str:
    """A GPU pool as the IaC makes it: a launch template and an Auto Scaling group propagating tags.

    With ``overrides`` (the pool's type and its fallbacks), the group has a mixed-instances policy
    trying them in order, as components/gpu_pool.py declares it; moto launches the template's type."""
    name = names.autoscaling_group(STACK, pool)
    template = f"{name}-{uuid.uuid4().hex[:6]}"
    ec2.create_launch_template(
        LaunchTemplateName=template, LaunchTemplateData={"ImageId": AMI, "InstanceType": instance_type}
    )
    specification = {"LaunchTemplateName": template, "Version": "$Latest"}
    launch: dict[str, Any] = {"LaunchTemplate": specification}
    if overrides:
        launch = {
            "MixedInstancesPolicy": {
                "LaunchTemplate": {
                    "LaunchTemplateSpecification": specification,
                    "Overrides": [{"InstanceType": override} for override in overrides],
                },
                "InstancesDistribution": {
                    "OnDemandAllocationStrategy": "prioritized",
                    "OnDemandPercentageAboveBaseCapacity": 100,
                },
            }
        }
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        **launch,
        MinSize=min_size,
        MaxSize=max_size,
        DesiredCapacity=desired,
        AvailabilityZones=[f"{REGION}a"],
        Tags=[
            {
                "Key": k,
                "Value": v,
                "PropagateAtLaunch": True,
                "ResourceId": name,
                "ResourceType": "auto-scaling-group",
            }
            for k, v in (group_tags if group_tags is not None else managed_tags(pool=pool)).items()
        ],
    )
    return name


def group_of(autoscaling: Any, name: str) -> dict[str, Any]:
    group: dict[str, Any] = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])[
        "AutoScalingGroups"
    ][0]
    return group


def group_instances(autoscaling: Any, name: str) -> list[str]:
    return sorted(instance["InstanceId"] for instance in group_of(autoscaling, name)["Instances"])


def states(ec2: Any, instance_ids: list[str]) -> dict[str, str]:
    reservations = ec2.describe_instances(InstanceIds=instance_ids)["Reservations"]
    return {i["InstanceId"]: i["State"]["Name"] for r in reservations for i in r["Instances"]}


def launch_time(ec2: Any, instance_id: str) -> datetime:
    reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    moment: datetime = reservations[0]["Instances"][0]["LaunchTime"]
    return moment.astimezone(UTC)


def latest_launch(ec2: Any, instance_ids: list[str]) -> datetime:
    return max(launch_time(ec2, instance_id) for instance_id in instance_ids)


def state_change(
    instance_id: str, state: str, at: datetime, *, region: str = REGION, account: str = ACCOUNT
) -> dict[str, Any]:
    """EC2's native EventBridge event, as AWS delivers it (``account``: the host's)."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "EC2 Instance State-change Notification",
        "source": "aws.ec2",
        "account": account,
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:ec2:{region}:{account}:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, "state": state},
    }


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def create_deadline_group(clients: ClientFactory) -> str:
    """The Scheduler group the Guardrails component creates for the per-host deadlines."""
    group = names.deadline_schedule_group(STACK)
    clients("scheduler", REGION).create_schedule_group(Name=group)
    return group


def deadline_schedules(clients: ClientFactory) -> dict[str, dict[str, Any]]:
    """The deadline group's schedules by name, with their full definitions."""
    scheduler = clients("scheduler", REGION)
    group = names.deadline_schedule_group(STACK)
    summaries = scheduler.list_schedules(GroupName=group)["Schedules"]
    return {s["Name"]: scheduler.get_schedule(GroupName=group, Name=s["Name"]) for s in summaries}


def heartbeats(clients: ClientFactory) -> list[dict[str, Any]]:
    metrics: list[dict[str, Any]] = clients("cloudwatch", REGION).list_metrics(
        Namespace=names.heartbeat_namespace(), MetricName=names.HEARTBEAT_METRIC
    )["Metrics"]
    return metrics


def sns_queue(clients: ClientFactory) -> tuple[str, str]:
    """A topic with an SQS subscriber, so a test can read what the reaper published."""
    sns, sqs = clients("sns", REGION), clients("sqs", REGION)
    topic = sns.create_topic(Name="parkbrake-alerts")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="alerts")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    return topic, queue_url


def published(clients: ClientFactory, queue_url: str) -> list[dict[str, Any]]:
    messages = (
        clients("sqs", REGION).receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
    )
    return [json.loads(message["Body"]) for message in messages]


def emitted_metrics(stdout: str) -> list[dict[str, Any]]:
    """The embedded-metric-format lines a guardrail printed, as ``{"name", "value", "dimensions"}``."""
    found = []
    for line in stdout.splitlines():
        try:
            blob = json.loads(line)
        except ValueError:
            continue
        if not isinstance(blob, dict) or "_aws" not in blob:
            continue
        [directive] = blob["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == names.heartbeat_namespace()
        dimensions = {name: blob[name] for name in directive["Dimensions"][0]}
        found += [  # powertools writes each value as a list of samples
            {"name": metric["Name"], "value": sum(blob[metric["Name"]]), "dimensions": dimensions}
            for metric in directive["Metrics"]
        ]
    return found


def metric_value(stdout: str, name: str, **dimensions: str) -> float | None:
    """The value of the one metric ``name`` with exactly ``dimensions`` in the output; None when absent."""
    values = [
        m["value"] for m in emitted_metrics(stdout) if m["name"] == name and m["dimensions"] == dimensions
    ]
    assert len(values) <= 1, values
    return values[0] if values else None
