"""Seed a local moto server with one stack's fleet, so `parkbrake status` and `park --now` have something to act on.

    moto_server -p 5000 &
    export AWS_ENDPOINT_URL=http://127.0.0.1:5000 AWS_REGION=us-east-1 \\
           AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
    python scripts/demo_fleet.py --stack dev
    parkbrake status --stack dev
    parkbrake park --now --dry-run --stack dev

What it creates, named and tagged as the Pulumi program names and tags them: the SSM park parameter;
two GPU pools (launch template + Auto Scaling group, whose instances moto starts); a stand-alone GPU
host with an exemption; a CPU instance (which `status` must not list); the ECS cluster with the
control-plane service (with an Application Auto Scaling target) and the inference service's blue and
green colours; the schedule group with the nightly start and the reaper's sweep; the alarm topic with
an e-mail subscription; and what the Guardrails component deploys that on-call commands reach: the
deadline schedule group (`extend` moves a host's deadline and warning schedules there), the notices
table and each guardrail's dead-letter queue (`ledger replay-dlq` reads the meter's). It refuses to run against anything but a server on this machine: it is a
demo, never a way to touch a real account.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.exceptions import ClientError

from guardrails import names, tags

ACCOUNT = "123456789012"
AMI = "ami-12c6146b"  # one of moto's built-in images
INFERENCE_PORT = 8080  # the port `parkbrake-inference` listens on in its image
# services/inference/Dockerfile built at the demo's revision (docs/deploy.md shows the build).
INFERENCE_IMAGE = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/parkbrake-inference:0123abcd"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
ALARM_EMAIL = "gpu-oncall@parkbrake.dev"  # the example stack files' guardrails.alarm_email
# components/guardrail_functions.py FUNCTIONS: each has a dead-letter queue (GuardrailAlerting).
GUARDRAILS = ("reaper", "deadline", "launcher", "meter", "budget", "reconciler")
Clients = Callable[[str], Any]


@dataclass(frozen=True)
class Pool:
    name: str
    instance_type: str
    tenant: str
    max_runtime: str
    min: int
    desired: int
    max: int


POOLS = (
    Pool("training", "g5.12xlarge", "research", "4h", min=0, desired=1, max=2),
    Pool("inference", "g5.xlarge", "product", "24h", min=1, desired=2, max=3),
)


@dataclass(frozen=True)
class Fleet:
    stack: str
    region: str
    groups: dict[str, str]  # pool -> Auto Scaling group name
    standalone_host: str  # the exempt GPU host outside any group
    cpu_host: str  # a non-accelerator instance
    services: dict[str, int]  # ECS service -> desired count
    schedules: dict[str, str]  # "nightly"/"reaper" -> schedule name
    alarm_topic: str  # the alarm topic's ARN, with ALARM_EMAIL subscribed
    deadline_group: str  # the Scheduler group of the per-host deadline and warning schedules
    notices_table: str  # the DynamoDB table the sweep records its sent notices in
    dead_letter_queues: dict[str, str]  # guardrail -> its dead-letter queue's URL


def host_tags(stack: str, pool: str, tenant: str, max_runtime: str, **extra: str) -> dict[str, str]:
    return {
        tags.MANAGED: "true",
        tags.STACK: stack,
        tags.POOL: pool,
        tags.TENANT: tenant,
        tags.MAX_RUNTIME: max_runtime,
        tags.REVISION: "0123abcd",
        **extra,
    }


def _tag_list(values: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in values.items()]


def seed_fleet(clients: Clients, *, stack: str, region: str, now: datetime) -> Fleet:
    """Create the fleet through ``clients(service)``; ``now`` dates the exemption."""
    ec2, autoscaling = clients("ec2"), clients("autoscaling")
    clients("ssm").put_parameter(
        Name=names.park_parameter(stack), Value="false", Type="String", Overwrite=True
    )
    groups = {pool.name: _create_pool(ec2, autoscaling, stack, region, pool) for pool in POOLS}
    exempt_until = (now + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    standalone = _run_instance(
        ec2,
        "g6.xlarge",
        host_tags(stack, "research-adhoc", "research", "2h", **{tags.EXEMPT_UNTIL: exempt_until}),
    )
    cpu_host = _run_instance(ec2, "m5.large", {tags.STACK: stack, tags.MANAGED: "true"})
    vpc = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    subnets = [
        subnet["SubnetId"]
        for subnet in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
    ][:2]
    target_groups, _ = inference_load_balancer(clients("elbv2"), stack, vpc, subnets)
    services = _create_services(clients("ecs"), clients("application-autoscaling"), stack, target_groups)
    schedules = _create_schedules(clients("scheduler"), stack, region)
    alarm_topic = clients("sns").create_topic(Name=names.alarm_topic(stack))["TopicArn"]
    clients("sns").subscribe(TopicArn=alarm_topic, Protocol="email", Endpoint=ALARM_EMAIL)
    deadline_group, notices, queues = _create_guardrail_resources(clients, stack)
    return Fleet(
        stack,
        region,
        groups,
        standalone,
        cpu_host,
        services,
        schedules,
        alarm_topic,
        deadline_group,
        notices,
        queues,
    )


def _create_guardrail_resources(clients: Clients, stack: str) -> tuple[str, str, dict[str, str]]:
    """What the Guardrails component creates besides the schedules (components/guardrails.py,
    guardrail_alerting.py), with the same names and keys."""
    deadline_group = names.deadline_schedule_group(stack)
    clients("scheduler").create_schedule_group(Name=deadline_group)
    notices = names.notices_table(stack)
    clients("dynamodb").create_table(
        TableName=notices,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "notice", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "notice", "AttributeType": "S"}],
    )
    queues = {
        guardrail: clients("sqs").create_queue(QueueName=names.dead_letter_queue(stack, guardrail))[
            "QueueUrl"
        ]
        for guardrail in GUARDRAILS
    }
    return deadline_group, notices, queues


def _create_pool(ec2: Any, autoscaling: Any, stack: str, region: str, pool: Pool) -> str:
    name = names.autoscaling_group(stack, pool.name)
    pool_tags = host_tags(stack, pool.name, pool.tenant, pool.max_runtime)
    ec2.create_launch_template(
        LaunchTemplateName=name,
        LaunchTemplateData={
            "ImageId": AMI,
            "InstanceType": pool.instance_type,
            "TagSpecifications": [{"ResourceType": "instance", "Tags": _tag_list(pool_tags)}],
        },
    )
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": name, "Version": "$Latest"},
        MinSize=pool.min,
        MaxSize=pool.max,
        DesiredCapacity=pool.desired,
        AvailabilityZones=[f"{region}a"],
        Tags=[
            {
                "Key": key,
                "Value": value,
                "PropagateAtLaunch": True,
                "ResourceId": name,
                "ResourceType": "auto-scaling-group",
            }
            for key, value in pool_tags.items()
        ],
    )
    return name


def _run_instance(ec2: Any, instance_type: str, instance_tags: Mapping[str, str]) -> str:
    reservation = ec2.run_instances(
        ImageId=AMI,
        MinCount=1,
        MaxCount=1,
        InstanceType=instance_type,
        TagSpecifications=[{"ResourceType": "instance", "Tags": _tag_list(instance_tags)}],
    )
    return str(reservation["Instances"][0]["InstanceId"])


def _create_services(ecs: Any, scaling: Any, stack: str, target_groups: Mapping[str, str]) -> dict[str, int]:
    cluster = names.ecs_cluster(stack)
    ecs.create_cluster(clusterName=cluster)
    desired = {
        names.CONTROL_PLANE_SERVICE: 2,
        names.ecs_service(names.INFERENCE_SERVICE, "blue"): 1,
        names.ecs_service(names.INFERENCE_SERVICE, "green"): 0,
    }
    for service, count in desired.items():
        colour = service.removeprefix(f"{names.INFERENCE_SERVICE}-")
        # As the Pulumi program: both colours run one task-definition family whose container is named
        # after the service, not the colour, so a deploy's copy of the live colour's definition
        # matches the other colour's load balancer (containerName) and does not roll back.
        container = names.INFERENCE_SERVICE if colour in target_groups else service
        revision_tags = [{"key": tags.REVISION, "value": "0123abcd"}, {"key": tags.STACK, "value": stack}]
        definition = ecs.register_task_definition(
            family=f"{names.prefix(stack)}-{container}",
            containerDefinitions=[
                {
                    "name": container,
                    "image": INFERENCE_IMAGE
                    if container != service
                    else f"public.ecr.aws/parkbrake/{container}:0.1.0",
                    "memory": 1024,
                    "portMappings": [{"containerPort": INFERENCE_PORT, "hostPort": 0}]
                    if container != service
                    else [],
                    "dockerLabels": {"parkbrake.revision": "0123abcd"},
                }
            ],
            tags=revision_tags,
        )["taskDefinition"]
        balancing = (
            [
                {
                    "targetGroupArn": target_groups[colour],
                    "containerName": container,
                    "containerPort": INFERENCE_PORT,
                }
            ]
            if colour in target_groups
            else []
        )
        ecs.create_service(
            cluster=cluster,
            serviceName=service,
            taskDefinition=definition["taskDefinitionArn"],
            desiredCount=count,
            loadBalancers=balancing,
            tags=[*revision_tags, {"key": tags.SERVICE, "value": service.split("-")[0]}],
        )
    scaling.register_scalable_target(
        ServiceNamespace="ecs",
        ResourceId=f"service/{cluster}/{names.CONTROL_PLANE_SERVICE}",
        ScalableDimension="ecs:service:DesiredCount",
        MinCapacity=1,
        MaxCapacity=3,
    )
    return desired


def inference_load_balancer(
    elbv2: Any, stack: str, vpc: str, subnets: list[str]
) -> tuple[dict[str, str], str]:
    """The inference service's ALB as the component builds it: a target group per colour behind one
    listener whose weighted forward sends everything to blue."""
    balancer = elbv2.create_load_balancer(
        Name=names.load_balancer(stack, names.INFERENCE_SERVICE), Subnets=subnets
    )
    target_groups = {}
    for colour in names.COLOURS:
        group = elbv2.create_target_group(
            Name=names.target_group(stack, names.INFERENCE_SERVICE, colour),
            Protocol="HTTP",
            Port=INFERENCE_PORT,
            HealthCheckPath="/healthz",
            VpcId=vpc,
            TargetType="instance",
            Tags=[
                {"Key": tags.SERVICE, "Value": names.INFERENCE_SERVICE},
                {"Key": tags.COLOUR, "Value": colour},
            ],
        )["TargetGroups"][0]["TargetGroupArn"]
        elbv2.modify_target_group_attributes(
            TargetGroupArn=group, Attributes=[{"Key": "deregistration_delay.timeout_seconds", "Value": "60"}]
        )
        target_groups[colour] = group
    listener = elbv2.create_listener(
        LoadBalancerArn=balancer["LoadBalancers"][0]["LoadBalancerArn"],
        Protocol="HTTP",
        Port=80,
        DefaultActions=[
            {
                "Type": "forward",
                "ForwardConfig": {
                    "TargetGroups": [
                        {"TargetGroupArn": target_groups["blue"], "Weight": 100},
                        {"TargetGroupArn": target_groups["green"], "Weight": 0},
                    ]
                },
            }
        ],
    )["Listeners"][0]["ListenerArn"]
    return target_groups, listener


def _create_schedules(scheduler: Any, stack: str, region: str) -> dict[str, str]:
    group = names.schedule_group(stack)
    scheduler.create_schedule_group(Name=group)
    role = f"arn:aws:iam::{ACCOUNT}:role/{names.prefix(stack)}-scheduler"
    nightly, reaper = names.nightly_schedule(stack, "training"), names.reaper_schedule(stack)
    definitions = {
        nightly: ("cron(0 1 * * ? *)", "Europe/Berlin", "launcher", {"pool": "training", "capacity": 1}),
        reaper: ("rate(5 minutes)", "UTC", "reaper", {"dry_run": False}),
    }
    for name, (expression, timezone, function, payload) in definitions.items():
        scheduler.create_schedule(
            GroupName=group,
            Name=name,
            ScheduleExpression=expression,
            ScheduleExpressionTimezone=timezone,
            FlexibleTimeWindow={"Mode": "OFF"},
            Description=f"parkbrake {function} for stack {stack}",
            Target={
                "Arn": f"arn:aws:lambda:{region}:{ACCOUNT}:function:{names.function_name(stack, function)}",
                "RoleArn": role,
                "Input": json.dumps(payload),
                "RetryPolicy": {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 2},
            },
            State="ENABLED",
        )
    return {"nightly": nightly, "reaper": reaper}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="dev", help="stack name to seed (default: dev)")
    parser.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    parser.add_argument(
        "--endpoint-url",
        default=os.environ.get("AWS_ENDPOINT_URL"),
        help="the moto server (default: AWS_ENDPOINT_URL)",
    )
    arguments = parser.parse_args(argv)
    endpoint = arguments.endpoint_url
    if not endpoint or urllib.parse.urlsplit(endpoint).hostname not in LOCAL_HOSTS:
        print(
            f"refusing to seed {endpoint or 'real AWS'}: point --endpoint-url or AWS_ENDPOINT_URL at a "
            "local moto server, e.g. http://127.0.0.1:5000",
            file=sys.stderr,
        )
        return 2
    session: Any = boto3.session.Session(  # Any: the service name is a runtime value, not a literal
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
        region_name=arguments.region,
    )
    clients: Clients = lambda service: session.client(service, endpoint_url=endpoint)  # noqa: E731
    if _already_seeded(clients("ssm"), arguments.stack):
        print(
            f"stack {arguments.stack} is already seeded in {arguments.region} at {endpoint}; nothing to do. "
            f"To start over: curl -X POST {endpoint.rstrip('/')}/moto-api/reset"
        )
        return 0
    try:
        fleet = seed_fleet(clients, stack=arguments.stack, region=arguments.region, now=datetime.now(UTC))
    except ClientError as error:  # e.g. a half-seeded stack from an interrupted run
        print(
            f"could not seed stack {arguments.stack}: {error.response['Error'].get('Message', error)}; "
            f"reset the server (curl -X POST {endpoint.rstrip('/')}/moto-api/reset) and run this again",
            file=sys.stderr,
        )
        return 1
    print(f"seeded stack {fleet.stack} in {fleet.region} at {endpoint}:")
    print(f"  Auto Scaling groups: {', '.join(fleet.groups.values())}")
    print(f"  stand-alone exempt GPU host: {fleet.standalone_host}; CPU host: {fleet.cpu_host}")
    print(f"  ECS services in {names.ecs_cluster(fleet.stack)}: {', '.join(fleet.services)}")
    print(f"  schedules in {names.schedule_group(fleet.stack)}: {', '.join(fleet.schedules.values())}")
    print(
        f"  deadline schedule group {fleet.deadline_group}; notices table {fleet.notices_table}; "
        f"dead-letter queues of {', '.join(fleet.dead_letter_queues)}"
    )
    print(
        f"try: parkbrake status --stack {fleet.stack}; parkbrake park --now --dry-run --stack {fleet.stack}"
    )
    return 0


def _already_seeded(ssm: Any, stack: str) -> bool:
    try:
        ssm.get_parameter(Name=names.park_parameter(stack))
    except ssm.exceptions.ParameterNotFound:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
