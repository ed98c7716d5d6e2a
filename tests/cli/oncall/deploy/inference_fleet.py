"""The inference service in moto, built with boto3 as ``components/inference_service.py`` declares it,
and a stand-in for the one part of ECS moto does not run: the service scheduler.

moto stores services, task definitions, listeners, target groups and Auto Scaling groups and answers
for them over HTTP like AWS, but it starts no tasks for a service, registers no targets, and keeps a
service's deployment list frozen at creation (an update changes ``taskDefinition`` but not the
deployment's). :class:`SimulatedScheduler` plays ECS's scheduler on top of moto:

* it reads what the deploy asked for through the real ECS API (``DescribeServices``), and tracks
  deployments the way ECS does: a forced update starts a new PRIMARY deployment (with the id moto's
  update answered), the previous one drains;
* each virtual-clock tick it "starts" the tasks, and registers them (host and dynamic port) in the
  colour's target group through the real ELBv2 API, so ``DescribeTargetHealth`` answers for them;
* a revision listed in ``failing`` never gets a task up (its targets never register); with
  ``circuit_breaker`` ECS's rollback is played: the deployment FAILS and a new PRIMARY deployment of
  the previous task definition completes, and the service's task definition is set back.

It implements :class:`cli.oncall.deploy.revisions.RolloutSource`, the one seam the deploy and verify have.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import count
from pathlib import Path
from typing import Any

import boto3

from cli.oncall.deploy.revisions import ImageReference
from cli.oncall.deploy.runtime import AwsClients, Runtime
from cli.oncall.deploy.surge_host import SURGE_TAG
from cli.oncall.ecs import (
    Deployment,
    Rollout,
    RunningTask,
    TaskDefinitionFacts,
    task_definition_facts,
)
from guardrails import names, tags
from tests.cli.oncall.ops_fleet import demo_fleet
from tests.conftest import REPO_ROOT, TEST_REGION

STACK = "dev"
SERVICE = names.INFERENCE_SERVICE
ACCOUNT = "123456789012"  # moto's account
OLD_REVISION = "3f2c1ab"
NEW_REVISION = "9e8d7c6"
OTHER_REVISION = "5b4a392"
IMAGE_TAGS = ("v0", "v1", "v2")
AMI = "ami-12345678"  # moto accepts any id; looking one up (DescribeImages) costs seconds
CIRCUIT_BREAKER_TICKS = 2  # failed ticks before ECS's circuit breaker gives up on a deployment


def aws_clients() -> AwsClients:
    """Plain boto3 clients on the environment's endpoint (the ``aws`` fixture's moto server)."""
    return AwsClients(
        boto3.client("ecs"),
        boto3.client("elbv2"),
        boto3.client("autoscaling"),
        lambda region: boto3.client("ecr", region_name=region),
        boto3.client("dynamodb"),
    )


@dataclass
class InferenceFleet:
    clients: AwsClients
    stack_file: Path
    cluster: str
    services: dict[str, str]
    target_groups: dict[str, str]
    listener_arn: str
    autoscaling_group: str
    repository: str  # the ECR repository URI
    digests: dict[str, str]  # image tag → digest
    old_task_definition: str

    def image(self, tag: str) -> str:
        return f"{self.repository}:{tag}"

    def weights(self) -> dict[str, int]:
        listener = self.clients.elbv2.describe_listeners(ListenerArns=[self.listener_arn])["Listeners"][0]
        groups = listener["DefaultActions"][0]["ForwardConfig"]["TargetGroups"]
        by_arn = {group["TargetGroupArn"]: group["Weight"] for group in groups}
        return {colour: by_arn[arn] for colour, arn in self.target_groups.items()}

    def service(self, colour: str) -> dict[str, Any]:
        answer = self.clients.ecs.describe_services(cluster=self.cluster, services=[self.services[colour]])
        found: dict[str, Any] = answer["services"][0]
        return found

    def desired(self, colour: str) -> int:
        return int(self.service(colour)["desiredCount"])

    def revision_of(self, colour: str) -> str:
        arn = self.service(colour)["taskDefinition"]
        definition = self.clients.ecs.describe_task_definition(taskDefinition=arn)["taskDefinition"]
        return str(definition["containerDefinitions"][0]["dockerLabels"][names.CONTAINER_REVISION_LABEL])

    def group(self) -> dict[str, Any]:
        answer = self.clients.autoscaling.describe_auto_scaling_groups(
            AutoScalingGroupNames=[self.autoscaling_group]
        )
        found: dict[str, Any] = answer["AutoScalingGroups"][0]
        return found

    def surge_mark(self) -> str | None:
        return tags.as_dict(self.group().get("Tags")).get(SURGE_TAG)

    def healthy_targets(self, colour: str) -> int:
        answer = self.clients.elbv2.describe_target_health(TargetGroupArn=self.target_groups[colour])
        return sum(
            1 for item in answer["TargetHealthDescriptions"] if item["TargetHealth"]["State"] == "healthy"
        )

    def task_definition_count(self) -> int:
        family = f"{names.prefix(STACK)}-{SERVICE}"
        return len(self.clients.ecs.list_task_definitions(familyPrefix=family)["taskDefinitionArns"])


def build_fleet(project_dir: Path, *, desired: int = 1) -> InferenceFleet:
    """The inference service of stack ``dev`` with blue live on OLD_REVISION (image v0)."""
    project_dir.mkdir(parents=True, exist_ok=True)
    stack_file = project_dir / f"Pulumi.{STACK}.yaml"
    shutil.copy(REPO_ROOT / stack_file.name, stack_file)
    clients = aws_clients()
    ec2 = boto3.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(
            VpcId=vpc, CidrBlock=f"10.40.{index}.0/24", AvailabilityZone=f"{TEST_REGION}{zone}"
        )["Subnet"]["SubnetId"]
        for index, zone in enumerate("ab")
    ]
    group_name = _gpu_pool(ec2, clients.autoscaling, subnets, desired)
    cluster = names.ecs_cluster(STACK)
    clients.ecs.create_cluster(clusterName=cluster)
    # The guardrails' table, where a deploy takes its lease (cli/oncall/deploy/lease.py).
    clients.dynamodb.create_table(
        TableName=names.notices_table(STACK),
        KeySchema=[{"AttributeName": "notice", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "notice", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    group_arn = clients.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group_name])[
        "AutoScalingGroups"
    ][0]["AutoScalingGroupARN"]
    provider = names.capacity_provider(STACK, "inference")
    clients.ecs.create_capacity_provider(
        name=provider, autoScalingGroupProvider={"autoScalingGroupArn": group_arn}
    )
    clients.ecs.put_cluster_capacity_providers(
        cluster=cluster, capacityProviders=[provider], defaultCapacityProviderStrategy=[]
    )
    repository, digests = _repository()
    target_groups, listener_arn = demo_fleet.inference_load_balancer(clients.elbv2, STACK, vpc, subnets)
    definition = register_revision(clients.ecs, f"{repository}@{digests['v0']}", OLD_REVISION)
    services = {}
    for colour in names.COLOURS:
        services[colour] = names.ecs_service(SERVICE, colour)
        clients.ecs.create_service(
            cluster=cluster,
            serviceName=services[colour],
            taskDefinition=definition,
            desiredCount=desired if colour == "blue" else 0,
            capacityProviderStrategy=[{"capacityProvider": provider, "weight": 1}],
            loadBalancers=[
                {"targetGroupArn": target_groups[colour], "containerName": SERVICE, "containerPort": 8000}
            ],
            deploymentConfiguration={"deploymentCircuitBreaker": {"enable": True, "rollback": True}},
            tags=[
                {"key": tags.STACK, "value": STACK},
                {"key": tags.SERVICE, "value": SERVICE},
                {"key": tags.COLOUR, "value": colour},
            ],
        )
    return InferenceFleet(
        clients,
        stack_file,
        cluster,
        services,
        target_groups,
        listener_arn,
        group_name,
        repository,
        digests,
        definition,
    )


def register_revision(ecs: Any, image: str, revision: str) -> str:
    """A task definition shaped like the component's: bridge mode, one GPU, labelled and tagged."""
    definition = ecs.register_task_definition(
        family=f"{names.prefix(STACK)}-{SERVICE}",
        requiresCompatibilities=["EC2"],
        networkMode="bridge",
        # The component sets only memoryReservation, which ECS accepts for EC2; moto's validation
        # also wants a hard limit, so the fixture gives the task one.
        memory="1024",
        containerDefinitions=[
            {
                "name": SERVICE,
                "image": image,
                "essential": True,
                "memoryReservation": 512,
                "portMappings": [{"containerPort": 8000, "hostPort": 0, "protocol": "tcp"}],
                "resourceRequirements": [{"type": "GPU", "value": "1"}],
                "environment": [{"name": "PARKBRAKE_REVISION", "value": revision}],
                "dockerLabels": {names.CONTAINER_REVISION_LABEL: revision},
            }
        ],
        tags=[{"key": tags.REVISION, "value": revision}, {"key": tags.SERVICE, "value": SERVICE}],
    )
    return str(definition["taskDefinition"]["taskDefinitionArn"])


def _gpu_pool(ec2: Any, autoscaling: Any, subnets: list[str], desired: int) -> str:
    template = f"{names.prefix(STACK)}-inference"
    ec2.create_launch_template(
        LaunchTemplateName=template,
        LaunchTemplateData={
            "ImageId": AMI,
            "InstanceType": "g5.xlarge",
            "InstanceInitiatedShutdownBehavior": "terminate",
        },
    )
    name = names.autoscaling_group(STACK, "inference")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": template},
        MinSize=1,
        MaxSize=3,
        DesiredCapacity=desired,
        VPCZoneIdentifier=",".join(subnets),
        Tags=[
            {
                "ResourceId": name,
                "ResourceType": "auto-scaling-group",
                "Key": key,
                "Value": value,
                "PropagateAtLaunch": True,
            }
            for key, value in {tags.MANAGED: "true", tags.STACK: STACK, tags.POOL: "inference"}.items()
        ],
    )
    return name


def _repository() -> tuple[str, dict[str, str]]:
    """An ECR repository with one image per tag; each image has its own layer, so its own digest."""
    ecr = boto3.client("ecr")
    uri = ecr.create_repository(repositoryName=SERVICE)["repository"]["repositoryUri"]
    digests = {}
    for tag in IMAGE_TAGS:
        layer = "sha256:" + hashlib.sha256(tag.encode()).hexdigest()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": 7,
                "digest": layer,
            },
            "layers": [
                {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 7, "digest": layer}
            ],
        }
        image = ecr.put_image(repositoryName=SERVICE, imageManifest=json.dumps(manifest), imageTag=tag)[
            "image"
        ]
        digests[tag] = image["imageId"]["imageDigest"]
    assert len(set(digests.values())) == len(IMAGE_TAGS)
    return uri, digests


# -- ECS's scheduler, simulated ----------------------------------------------------------------------


@dataclass
class ServiceRun:
    """What the scheduler tracks per service: its deployments and tasks, and the targets it registered."""

    deployments: list[Deployment]
    tasks: list[RunningTask]
    moto_deployment: str  # the last deployment id moto answered; a new one means a forced update
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)  # task ARN → target
    failed_ticks: int = 0


class SimulatedScheduler:
    def __init__(
        self, fleet: InferenceFleet, *, failing: set[str] | None = None, circuit_breaker: bool = False
    ):
        self.fleet = fleet
        self.failing = failing if failing is not None else set()
        self.circuit_breaker = circuit_breaker
        self.runs: dict[str, ServiceRun] = {}
        self._ids = count(1)
        self._ports = count(32768)
        self._definitions: dict[str, TaskDefinitionFacts] = {}
        self._container_instances: dict[str, str] = {}  # EC2 instance → container instance ARN
        for colour in names.COLOURS:  # the fleet as it stands: the live colour's tasks up and registered
            self.rollout(fleet.cluster, fleet.services[colour])
            self._settle(colour)

    # RolloutSource
    def rollout(self, cluster: str, service: str) -> Rollout:
        run = self._sync(service)
        return Rollout(tuple(run.deployments), tuple(run.tasks))

    def tick(self) -> None:
        """ECS's scheduler after a poll interval: tasks start (or fail), drained deployments go."""
        for colour in names.COLOURS:
            self._settle(colour)

    def _sync(self, service: str) -> ServiceRun:
        described = self.fleet.clients.ecs.describe_services(cluster=self.fleet.cluster, services=[service])
        current = described["services"][0]
        moto_id = current["deployments"][0]["id"]
        run = self.runs.get(service)
        if run is None:
            run = self.runs[service] = ServiceRun([], [], moto_id)
            self._begin(run, moto_id, current["taskDefinition"], current["desiredCount"])
        elif moto_id != run.moto_deployment:  # a forced update: ECS starts a new deployment
            run.moto_deployment = moto_id
            self._begin(run, moto_id, current["taskDefinition"], current["desiredCount"])
        elif current["desiredCount"] != run.deployments[0].desired_count:  # a scale: same deployment
            run.deployments[0] = replace(
                run.deployments[0], desired_count=current["desiredCount"], rollout_state="IN_PROGRESS"
            )
        return run

    def _begin(self, run: ServiceRun, deployment_id: str, task_definition: str, desired: int) -> None:
        run.deployments = [
            Deployment(deployment_id, "PRIMARY", task_definition, "IN_PROGRESS", "", desired, 0),
            *(
                replace(item, status="ACTIVE")
                for item in run.deployments
                if item.running_count or item.status == "PRIMARY"
            ),
        ]
        run.failed_ticks = 0

    def _settle(self, colour: str) -> None:
        service = self.fleet.services[colour]
        run = self._sync(service)
        primary = run.deployments[0]
        if self._definition(primary.task_definition).revision_label in self.failing and primary.desired_count:
            # Its tasks exit before passing a health check (or crash later): none stays up.
            run.failed_ticks += 1
            failures = primary.failed_tasks + primary.desired_count
            run.deployments[0] = replace(primary, running_count=0, failed_tasks=failures)
            self._place(colour, run, primary.task_definition, 0)
            if self.circuit_breaker and run.failed_ticks >= CIRCUIT_BREAKER_TICKS:
                self._roll_back(service, run)
            return
        self._place(colour, run, primary.task_definition, primary.desired_count)
        running = len(run.tasks)
        if running < primary.desired_count:  # not enough free GPU hosts: the rest stay pending
            run.deployments[0] = replace(primary, running_count=running, rollout_state="IN_PROGRESS")
            return
        completed = replace(
            primary,
            running_count=running,
            rollout_state="COMPLETED",
            rollout_state_reason=primary.rollout_state_reason or f"ECS deployment {primary.id} completed.",
        )
        # Drained deployments leave the list, as in ECS; a FAILED one stays visible, without tasks.
        failed = [
            replace(item, running_count=0) for item in run.deployments[1:] if item.rollout_state == "FAILED"
        ]
        run.deployments = [completed, *failed]

    def _roll_back(self, service: str, run: ServiceRun) -> None:
        failed, previous = run.deployments[0], next(iter(run.deployments[1:]), None)
        if previous is None:
            return
        rollback_id = f"ecs-svc/rollback-{next(self._ids)}"
        reason = f"ECS deployment circuit breaker: rolling back to deploymentId {previous.id}."
        run.deployments = [
            Deployment(
                rollback_id,
                "PRIMARY",
                previous.task_definition,
                "IN_PROGRESS",
                reason,
                failed.desired_count,
                0,
            ),
            replace(
                failed,
                status="ACTIVE",
                rollout_state="FAILED",
                rollout_state_reason="ECS deployment circuit breaker: tasks failed to start.",
            ),
        ]
        run.failed_ticks = 0
        # ECS sets the service back to the previous task definition (no forced deployment: moto's id stays).
        self.fleet.clients.ecs.update_service(
            cluster=self.fleet.cluster, service=service, taskDefinition=previous.task_definition
        )

    def _place(self, colour: str, run: ServiceRun, task_definition: str, wanted: int) -> None:
        """Run ``wanted`` tasks of ``task_definition``, each on a free GPU host (one GPU per task and
        per host), registered in the colour's target group as host:port, as ECS's bridge mode does."""
        hosts = [
            item["InstanceId"]
            for item in self.fleet.group()["Instances"]
            if item["LifecycleState"] == "InService"
        ]
        keep = [
            task
            for task in run.tasks
            if task.task_definition == task_definition and run.targets[task.arn]["Id"] in hosts
        ][:wanted]
        gone = [task for task in run.tasks if task not in keep]
        elbv2, group = self.fleet.clients.elbv2, self.fleet.target_groups[colour]
        if gone:
            answer = elbv2.describe_target_health(TargetGroupArn=group)["TargetHealthDescriptions"]
            registered = {item["Target"]["Id"] for item in answer}
            stale = [target for task in gone if (target := run.targets.pop(task.arn))["Id"] in registered]
            if stale:
                elbv2.deregister_targets(TargetGroupArn=group, Targets=stale)
        run.tasks = keep
        busy = {target["Id"] for other in self.runs.values() for target in other.targets.values()}
        free = [host for host in hosts if host not in busy]
        digest = ImageReference.parse(self._definition(task_definition).image).digest
        started = []
        for host in free[: wanted - len(keep)]:
            arn = f"arn:aws:ecs:{TEST_REGION}:{ACCOUNT}:task/{self.fleet.cluster}/{next(self._ids):032x}"
            run.tasks.append(
                RunningTask(arn, task_definition, (digest,) if digest else (), self._container_instance(host))
            )
            run.targets[arn] = {"Id": host, "Port": next(self._ports)}
            started.append(run.targets[arn])
        if started:
            elbv2.register_targets(TargetGroupArn=group, Targets=started)

    def _container_instance(self, host: str) -> str:
        """The host's container instance, registered with the cluster the way the ECS agent does."""
        if host not in self._container_instances:
            answer = self.fleet.clients.ecs.register_container_instance(
                cluster=self.fleet.cluster, instanceIdentityDocument=json.dumps({"instanceId": host})
            )
            self._container_instances[host] = answer["containerInstance"]["containerInstanceArn"]
        return self._container_instances[host]

    def _definition(self, arn: str) -> TaskDefinitionFacts:
        if arn not in self._definitions:  # registered task definitions never change
            self._definitions[arn] = task_definition_facts(self.fleet.clients.ecs, arn)
        return self._definitions[arn]


# -- Time and progress ---------------------------------------------------------------------------------


class VirtualClock:
    """Time that moves only when the deploy sleeps; each sleep lets the scheduler (and hooks) act."""

    def __init__(self, scheduler: SimulatedScheduler, *hooks: Callable[[VirtualClock], None]) -> None:
        self.current = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
        self.started = self.current
        self.scheduler = scheduler
        self.hooks = list(hooks)

    def now(self) -> datetime:
        return self.current

    def sleep(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)
        self.scheduler.tick()
        for hook in self.hooks:
            hook(self)

    @property
    def elapsed(self) -> timedelta:
        return self.current - self.started


@dataclass
class RecordedProgress:
    steps: list[str] = field(default_factory=list)
    waits: list[tuple[str, int, int]] = field(default_factory=list)

    def step(self, message: str) -> None:
        self.steps.append(message)

    def waiting(self, label: str, done: int, total: int) -> None:
        self.waits.append((label, done, total))


def runtime(fleet: InferenceFleet, scheduler: SimulatedScheduler, clock: VirtualClock) -> Runtime:
    return Runtime(fleet.clients, scheduler, clock)
