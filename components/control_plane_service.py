"""The control-plane service: a Fargate ECS service behind its endpoint (``components.ecs_service``), scaled on CPU.

Parking is the program's business: it passes ``capacity`` already parked (min 0, desired 0). Unparked,
Application Auto Scaling owns the desired count (Pulumi declares it once, then ignores it, so a
``pulumi up`` never resets what scaling chose); parked, Pulumi holds it at 0, and on unparking the
scaling minimum brings the tasks back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.common import child_of, named_child_of, type_token
from components.ecs_service import (
    ALL_EGRESS,
    EndpointArgs,
    ServiceBasics,
    endpoint,
    health_check,
    scalable_resource_id,
    service_basics,
)
from components.iam_policies import document, statement
from guardrails import names, tags
from guardrails.capacity import Capacity

CPU_TARGET_PERCENT = 60.0
# libpq reads these: TLS verified against the RDS CA bundle, which the image carries at this path.
RDS_CA_BUNDLE = "/etc/ssl/certs/rds-global-bundle.pem"


@dataclass
class ControlPlaneServiceArgs:
    stack: str
    image: str
    cpu: int  # Fargate CPU units (1024 = 1 vCPU)
    memory: int  # MiB
    capacity: Capacity  # already parked-adjusted by the program
    health_path: str
    port: int
    revision: str
    cluster_arn: pulumi.Input[str]
    vpc_id: pulumi.Input[str]
    public_subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]]
    private_subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]]
    database_endpoint: pulumi.Input[str] | None
    database_secret_arn: pulumi.Input[str] | None
    cache_endpoint: pulumi.Input[str] | None
    tags: Mapping[str, str]
    cache_secret_arn: pulumi.Input[str] | None = None
    parked: bool = False
    endpoint: EndpointArgs = field(default_factory=EndpointArgs)
    cpu_target_percent: float = CPU_TARGET_PERCENT


class ControlPlaneService(pulumi.ComponentResource):
    url: pulumi.Output[str]
    service_name: pulumi.Output[str]
    load_balancer_arn: pulumi.Output[str]
    target_group_arn: pulumi.Output[str]
    task_definition_arn: pulumi.Output[str]
    # What the database and the cache admit the service's tasks by.
    tasks_security_group_id: pulumi.Output[str]

    def __init__(
        self, name: str, args: ControlPlaneServiceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(type_token("ControlPlaneService"), name, None, opts)
        self._args = args
        service = names.CONTROL_PLANE_SERVICE
        basics = service_basics(
            self, stack=args.stack, service=service, revision=args.revision, base_tags=args.tags
        )
        target_group = self._target_group(service, basics.tags)
        front = endpoint(
            self,
            stack=args.stack,
            service=service,
            args=args.endpoint,
            vpc_id=args.vpc_id,
            public_subnet_ids=args.public_subnet_ids,
            private_subnet_ids=args.private_subnet_ids,
            default_actions=[{"type": "forward", "target_group_arn": target_group.arn}],
            resource_tags=basics.tags,
        )
        tasks_security_group = self._tasks_security_group(service, front.security_group, basics.tags)
        self._read_secrets(service, basics.execution_role)
        task_definition = self._task_definition(service, basics)
        ecs_service = self._service(
            service,
            task_definition=task_definition,
            target_group=target_group,
            tasks_security_group=tasks_security_group,
            listener=front.listener,
            service_tags=basics.tags,
        )
        self._autoscaling(service, ecs_service, basics.tags)

        self.url = front.url
        self.service_name = ecs_service.name
        self.load_balancer_arn = front.load_balancer.arn
        self.target_group_arn = target_group.arn
        self.task_definition_arn = task_definition.arn
        self.tasks_security_group_id = tasks_security_group.id
        self.register_outputs(
            {
                "url": self.url,
                "service_name": self.service_name,
                "load_balancer_arn": self.load_balancer_arn,
                "target_group_arn": self.target_group_arn,
                "task_definition_arn": self.task_definition_arn,
                "tasks_security_group_id": self.tasks_security_group_id,
            }
        )

    def _target_group(self, service: str, service_tags: Mapping[str, str]) -> aws.lb.TargetGroup:
        args = self._args
        return aws.lb.TargetGroup(
            service,
            name=names.target_group(args.stack, service),
            port=args.port,
            protocol="HTTP",
            target_type="ip",  # Fargate tasks register by their awsvpc address
            vpc_id=args.vpc_id,
            deregistration_delay=30,
            health_check=health_check(args.health_path),
            tags=dict(service_tags),
            opts=named_child_of(self),
        )

    def _tasks_security_group(
        self, service: str, load_balancer: aws.ec2.SecurityGroup, service_tags: Mapping[str, str]
    ) -> aws.ec2.SecurityGroup:
        """The service port from its load balancer only."""
        port = self._args.port
        return aws.ec2.SecurityGroup(
            f"{service}-tasks",
            description=f"{service} tasks: the service port from its load balancer only",
            vpc_id=self._args.vpc_id,
            ingress=[
                {"protocol": "tcp", "from_port": port, "to_port": port, "security_groups": [load_balancer.id]}
            ],
            egress=ALL_EGRESS,
            tags=dict(service_tags),
            opts=child_of(self),
        )

    def _task_definition(self, service: str, basics: ServiceBasics) -> aws.ecs.TaskDefinition:
        args = self._args
        return aws.ecs.TaskDefinition(
            service,
            family=f"{names.prefix(args.stack)}-{service}",
            requires_compatibilities=["FARGATE"],
            network_mode="awsvpc",
            cpu=str(args.cpu),
            memory=str(args.memory),
            execution_role_arn=basics.execution_role.arn,
            task_role_arn=basics.task_role.arn,
            runtime_platform={"operating_system_family": "LINUX", "cpu_architecture": "X86_64"},
            container_definitions=pulumi.Output.json_dumps(
                [
                    {
                        "name": service,
                        "image": args.image,
                        "essential": True,
                        "portMappings": [{"containerPort": args.port, "protocol": "tcp"}],
                        "environment": control_plane_environment(args),
                        "secrets": service_secrets(args),
                        "dockerLabels": {tags.REVISION: args.revision},
                        "logConfiguration": basics.awslogs(service),
                    }
                ]
            ),
            tags=basics.tags,
            opts=child_of(self),
        )

    def _read_secrets(self, service: str, execution_role: aws.iam.Role) -> None:
        """The execution role injects the secrets at task start; it may read those secrets and no other."""
        secrets = [
            arn for arn in (self._args.database_secret_arn, self._args.cache_secret_arn) if arn is not None
        ]
        if not secrets:
            return
        aws.iam.RolePolicy(
            f"{service}-read-secrets",
            role=execution_role.id,
            policy=pulumi.Output.json_dumps(
                document([statement("ReadServiceSecrets", ["secretsmanager:GetSecretValue"], secrets)])
            ),
            opts=child_of(self),
        )

    def _service(
        self,
        service: str,
        *,
        task_definition: aws.ecs.TaskDefinition,
        target_group: aws.lb.TargetGroup,
        tasks_security_group: aws.ec2.SecurityGroup,
        listener: aws.lb.Listener,
        service_tags: Mapping[str, str],
    ) -> aws.ecs.Service:
        args = self._args
        return aws.ecs.Service(
            service,
            name=names.ecs_service(service),
            cluster=args.cluster_arn,
            task_definition=task_definition.arn,
            desired_count=args.capacity.desired,
            launch_type="FARGATE",
            network_configuration={
                "subnets": args.private_subnet_ids,
                "security_groups": [tasks_security_group.id],
                "assign_public_ip": False,
            },
            load_balancers=[
                {"target_group_arn": target_group.arn, "container_name": service, "container_port": args.port}
            ],
            health_check_grace_period_seconds=60,
            deployment_circuit_breaker={"enable": True, "rollback": True},
            deployment_minimum_healthy_percent=100,
            deployment_maximum_percent=200,
            enable_ecs_managed_tags=True,
            propagate_tags="SERVICE",
            tags=dict(service_tags),
            # ECS refuses a service whose target group is not yet attached to a load balancer. Unparked,
            # Application Auto Scaling owns the desired count.
            opts=named_child_of(
                self, depends_on=[listener], ignore_changes=[] if args.parked else ["desiredCount"]
            ),
        )

    def _autoscaling(
        self, service: str, ecs_service: aws.ecs.Service, service_tags: Mapping[str, str]
    ) -> None:
        args = self._args
        scaling_target = aws.appautoscaling.Target(
            service,
            service_namespace="ecs",
            scalable_dimension="ecs:service:DesiredCount",
            resource_id=scalable_resource_id(args.stack, ecs_service),
            min_capacity=args.capacity.min,
            max_capacity=args.capacity.max,
            tags=dict(service_tags),
            opts=child_of(self),
        )
        aws.appautoscaling.Policy(
            f"{service}-cpu",
            policy_type="TargetTrackingScaling",
            service_namespace=scaling_target.service_namespace,
            scalable_dimension=scaling_target.scalable_dimension,
            resource_id=scaling_target.resource_id,
            target_tracking_scaling_policy_configuration={
                "target_value": args.cpu_target_percent,
                "predefined_metric_specification": {
                    "predefined_metric_type": "ECSServiceAverageCPUUtilization"
                },
                "scale_in_cooldown": 300,
                "scale_out_cooldown": 60,
            },
            opts=child_of(self),
        )


def control_plane_environment(args: ControlPlaneServiceArgs) -> list[dict[str, pulumi.Input[str]]]:
    """Plain settings; credentials come through ``secrets``, never here."""
    environment: dict[str, pulumi.Input[str]] = {
        "PARKBRAKE_STACK": args.stack,
        "PARKBRAKE_REVISION": args.revision,
    }
    if args.database_endpoint is not None:
        environment["DATABASE_ENDPOINT"] = args.database_endpoint
        # libpq's own variables: the cluster refuses plain connections, and the client verifies it.
        environment["PGSSLMODE"] = "verify-full"
        environment["PGSSLROOTCERT"] = RDS_CA_BUNDLE
    if args.cache_endpoint is not None:
        environment["CACHE_ENDPOINT"] = args.cache_endpoint
    return [{"name": key, "value": value} for key, value in environment.items()]


def service_secrets(args: ControlPlaneServiceArgs) -> list[dict[str, pulumi.Input[str]]]:
    """The database and cache credentials, read by ECS from the secrets' JSON keys at task start."""
    found: list[dict[str, pulumi.Input[str]]] = []
    for prefix, secret_arn in (("DATABASE", args.database_secret_arn), ("CACHE", args.cache_secret_arn)):
        if secret_arn is not None:
            found += [
                {
                    "name": f"{prefix}_{key.upper()}",
                    "valueFrom": pulumi.Output.concat(secret_arn, f":{key}::"),
                }
                for key in ("username", "password")
            ]
    return found
