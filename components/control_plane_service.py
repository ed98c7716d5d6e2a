"""The control-plane service: a Fargate ECS service behind a public ALB, scaled on CPU.

Parking is the program's business: it passes ``capacity`` already parked (min 0, desired 0), and
this component applies it to the ECS service and the autoscaling target alike.

The load balancer, execution role and log group helpers are shared with the inference service.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.common import child_of, type_token
from guardrails import names, tags
from guardrails.capacity import Capacity

HTTP_PORT = 80
LOG_RETENTION_DAYS = 30
CPU_TARGET_PERCENT = 60.0
EXECUTION_ROLE_POLICY = "arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
ECS_TASKS_TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "ecs-tasks.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
)
ANYWHERE = "0.0.0.0/0"
ALL_EGRESS = [{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": [ANYWHERE]}]


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
    cpu_target_percent: float = CPU_TARGET_PERCENT


@dataclass(frozen=True)
class PublicLoadBalancer:
    load_balancer: aws.lb.LoadBalancer
    security_group: aws.ec2.SecurityGroup


def public_load_balancer(
    parent: pulumi.Resource,
    *,
    stack: str,
    service: str,
    vpc_id: pulumi.Input[str],
    subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]],
    resource_tags: Mapping[str, str],
) -> PublicLoadBalancer:
    """An internet-facing ALB in the public subnets, open on HTTP only."""
    security_group = aws.ec2.SecurityGroup(
        f"{service}-alb",
        description=f"{service} load balancer: HTTP from anywhere",
        vpc_id=vpc_id,
        ingress=[
            {"protocol": "tcp", "from_port": HTTP_PORT, "to_port": HTTP_PORT, "cidr_blocks": [ANYWHERE]}
        ],
        egress=ALL_EGRESS,
        tags=dict(resource_tags),
        opts=child_of(parent),
    )
    load_balancer = aws.lb.LoadBalancer(
        service,
        name=names.load_balancer(stack, service),
        load_balancer_type="application",
        internal=False,
        subnets=subnet_ids,
        security_groups=[security_group.id],
        drop_invalid_header_fields=True,
        tags=dict(resource_tags),
        opts=child_of(parent),
    )
    return PublicLoadBalancer(load_balancer, security_group)


def health_check(path: str) -> dict[str, object]:
    return {
        "path": path,
        "protocol": "HTTP",
        "matcher": "200-399",
        "interval": 15,
        "timeout": 5,
        "healthy_threshold": 2,
        "unhealthy_threshold": 3,
    }


def task_execution_role(
    parent: pulumi.Resource, service: str, resource_tags: Mapping[str, str]
) -> aws.iam.Role:
    """The role ECS uses to pull the image and write logs (AWS's managed policy for exactly that)."""
    role = aws.iam.Role(
        f"{service}-execution",
        assume_role_policy=ECS_TASKS_TRUST,
        tags=dict(resource_tags),
        opts=child_of(parent),
    )
    aws.iam.RolePolicyAttachment(
        f"{service}-execution", role=role.name, policy_arn=EXECUTION_ROLE_POLICY, opts=child_of(parent)
    )
    return role


def container_log_group(
    parent: pulumi.Resource, stack: str, service: str, resource_tags: Mapping[str, str]
) -> aws.cloudwatch.LogGroup:
    return aws.cloudwatch.LogGroup(
        f"{service}-logs",
        name=f"/ecs/{names.prefix(stack)}/{service}",
        retention_in_days=LOG_RETENTION_DAYS,
        tags=dict(resource_tags),
        opts=child_of(parent),
    )


def awslogs(log_group: aws.cloudwatch.LogGroup, region: pulumi.Input[str], service: str) -> dict[str, object]:
    return {
        "logDriver": "awslogs",
        "options": {
            "awslogs-group": log_group.name,
            "awslogs-region": region,
            "awslogs-stream-prefix": service,
        },
    }


def scalable_resource_id(stack: str, service: aws.ecs.Service) -> pulumi.Output[str]:
    """Application Auto Scaling's id of an ECS service; the cluster is always ``names.ecs_cluster``."""
    return pulumi.Output.concat("service/", names.ecs_cluster(stack), "/", service.name)


class ControlPlaneService(pulumi.ComponentResource):
    url: pulumi.Output[str]
    service_name: pulumi.Output[str]
    load_balancer_arn: pulumi.Output[str]
    target_group_arn: pulumi.Output[str]
    task_definition_arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: ControlPlaneServiceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(type_token("ControlPlaneService"), name, None, opts)
        service = names.CONTROL_PLANE_SERVICE
        service_tags = {**args.tags, tags.REVISION: args.revision, tags.SERVICE: service}
        region = aws.get_region_output(opts=pulumi.InvokeOutputOptions(parent=self)).region

        alb = public_load_balancer(
            self,
            stack=args.stack,
            service=service,
            vpc_id=args.vpc_id,
            subnet_ids=args.public_subnet_ids,
            resource_tags=service_tags,
        )
        target_group = aws.lb.TargetGroup(
            service,
            name=names.target_group(args.stack, service),
            port=args.port,
            protocol="HTTP",
            target_type="ip",  # Fargate tasks register by their awsvpc address
            vpc_id=args.vpc_id,
            deregistration_delay=30,
            health_check=health_check(args.health_path),
            tags=service_tags,
            opts=child_of(self),
        )
        listener = aws.lb.Listener(
            service,
            load_balancer_arn=alb.load_balancer.arn,
            port=HTTP_PORT,
            protocol="HTTP",
            default_actions=[{"type": "forward", "target_group_arn": target_group.arn}],
            tags=service_tags,
            opts=child_of(self),
        )
        tasks_security_group = aws.ec2.SecurityGroup(
            f"{service}-tasks",
            description=f"{service} tasks: the service port from its load balancer only",
            vpc_id=args.vpc_id,
            ingress=[
                {
                    "protocol": "tcp",
                    "from_port": args.port,
                    "to_port": args.port,
                    "security_groups": [alb.security_group.id],
                }
            ],
            egress=ALL_EGRESS,
            tags=service_tags,
            opts=child_of(self),
        )

        execution_role = task_execution_role(self, service, service_tags)
        if args.database_secret_arn is not None:
            # The execution role injects the secret at task start; it may read that secret and no other.
            aws.iam.RolePolicy(
                f"{service}-read-database-secret",
                role=execution_role.id,
                policy=pulumi.Output.json_dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Action": "secretsmanager:GetSecretValue",
                                "Resource": args.database_secret_arn,
                            }
                        ],
                    }
                ),
                opts=child_of(self),
            )
        log_group = container_log_group(self, args.stack, service, service_tags)
        task_definition = aws.ecs.TaskDefinition(
            service,
            family=f"{names.prefix(args.stack)}-{service}",
            requires_compatibilities=["FARGATE"],
            network_mode="awsvpc",
            cpu=str(args.cpu),
            memory=str(args.memory),
            execution_role_arn=execution_role.arn,
            runtime_platform={"operating_system_family": "LINUX", "cpu_architecture": "X86_64"},
            container_definitions=pulumi.Output.json_dumps(
                [
                    {
                        "name": service,
                        "image": args.image,
                        "essential": True,
                        "portMappings": [{"containerPort": args.port, "protocol": "tcp"}],
                        "environment": control_plane_environment(args),
                        "secrets": database_secrets(args.database_secret_arn),
                        "dockerLabels": {tags.REVISION: args.revision},
                        "logConfiguration": awslogs(log_group, region, service),
                    }
                ]
            ),
            tags=service_tags,
            opts=child_of(self),
        )
        ecs_service = aws.ecs.Service(
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
            tags=service_tags,
            # ECS refuses a service whose target group is not yet attached to a load balancer.
            opts=child_of(self, depends_on=[listener]),
        )
        scaling_target = aws.appautoscaling.Target(
            service,
            service_namespace="ecs",
            scalable_dimension="ecs:service:DesiredCount",
            resource_id=scalable_resource_id(args.stack, ecs_service),
            min_capacity=args.capacity.min,
            max_capacity=args.capacity.max,
            tags=service_tags,
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

        self.url = pulumi.Output.concat("http://", alb.load_balancer.dns_name)
        self.service_name = ecs_service.name
        self.load_balancer_arn = alb.load_balancer.arn
        self.target_group_arn = target_group.arn
        self.task_definition_arn = task_definition.arn
        self.register_outputs(
            {
                "url": self.url,
                "service_name": self.service_name,
                "load_balancer_arn": self.load_balancer_arn,
                "target_group_arn": self.target_group_arn,
                "task_definition_arn": self.task_definition_arn,
            }
        )


def control_plane_environment(args: ControlPlaneServiceArgs) -> list[dict[str, pulumi.Input[str]]]:
    """Plain settings; credentials come through ``secrets``, never here."""
    environment: dict[str, pulumi.Input[str]] = {
        "PARKBRAKE_STACK": args.stack,
        "PARKBRAKE_REVISION": args.revision,
    }
    if args.database_endpoint is not None:
        environment["DATABASE_ENDPOINT"] = args.database_endpoint
    if args.cache_endpoint is not None:
        environment["CACHE_ENDPOINT"] = args.cache_endpoint
    return [{"name": key, "value": value} for key, value in environment.items()]


def database_secrets(secret_arn: pulumi.Input[str] | None) -> list[dict[str, pulumi.Input[str]]]:
    """The database credentials, read by ECS from the secret's JSON keys at task start."""
    if secret_arn is None:
        return []
    return [
        {"name": f"DATABASE_{key.upper()}", "valueFrom": pulumi.Output.concat(secret_arn, f":{key}::")}
        for key in ("username", "password")
    ]
