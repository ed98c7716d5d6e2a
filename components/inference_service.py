"""The inference service: blue and green ECS services on a GPU pool, behind one weighted ALB listener.

Ownership is split with ``parkbrake deploy``. Pulumi declares both colours, their target groups and the
listener; it sets the live colour's desired count to ``desired_per_colour`` (0 when parked), the idle
colour's to 0, and the listener weights from ``live_colour`` (100/0). The deploy command registers task
definitions pinned to image digests and moves traffic between the colours, so the services ignore
changes to ``taskDefinition``: a ``pulumi up`` never rolls back what a deploy rolled out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.common import child_of, type_token
from components.control_plane_service import (
    HTTP_PORT,
    awslogs,
    container_log_group,
    health_check,
    public_load_balancer,
    task_execution_role,
)
from guardrails import names, tags
from guardrails.errors import InputError

# The ephemeral range ECS draws dynamic host ports from in bridge mode.
DYNAMIC_PORTS = (32768, 65535)
LIVE_WEIGHT = 100


@dataclass
class InferenceServiceArgs:
    stack: str
    image: str
    desired_per_colour: int  # 0 when parked (the program decides)
    gpus_per_task: int
    memory: int  # MiB reserved per task
    health_path: str
    port: int
    revision: str
    cluster_arn: pulumi.Input[str]
    capacity_provider_name: pulumi.Input[str] | None
    vpc_id: pulumi.Input[str]
    public_subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]]
    tags: Mapping[str, str]
    live_colour: str = "blue"
    # The GPU hosts' security group: when given, it admits the ALB on ECS's dynamic host ports.
    host_security_group_id: pulumi.Input[str] | None = None


def colour_weights(live_colour: str) -> dict[str, int]:
    """Listener weights: all traffic to the live colour, none to the idle one."""
    if live_colour not in names.COLOURS:
        raise InputError(f"inference live colour {live_colour!r} is not one of {', '.join(names.COLOURS)}")
    return {colour: LIVE_WEIGHT if colour == live_colour else 0 for colour in names.COLOURS}


class InferenceService(pulumi.ComponentResource):
    url: pulumi.Output[str]
    service_names: dict[str, pulumi.Output[str]]
    target_group_arns: dict[str, pulumi.Output[str]]
    listener_arn: pulumi.Output[str]
    load_balancer_security_group_id: pulumi.Output[str]

    def __init__(
        self, name: str, args: InferenceServiceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(type_token("InferenceService"), name, None, opts)
        if args.capacity_provider_name is None:
            raise InputError("the inference service needs its GPU pool's ECS capacity provider")
        weights = colour_weights(args.live_colour)
        service = names.INFERENCE_SERVICE
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
        if args.host_security_group_id is not None:
            aws.vpc.SecurityGroupIngressRule(
                f"{service}-alb-to-hosts",
                security_group_id=args.host_security_group_id,
                referenced_security_group_id=alb.security_group.id,
                ip_protocol="tcp",
                from_port=DYNAMIC_PORTS[0],
                to_port=DYNAMIC_PORTS[1],
                description="inference load balancer to the tasks' dynamic host ports",
                tags=service_tags,
                opts=child_of(self),
            )
        target_groups = {
            colour: aws.lb.TargetGroup(
                f"{service}-{colour}",
                name=names.target_group(args.stack, service, colour),
                port=args.port,
                protocol="HTTP",
                target_type="instance",  # bridge mode: tasks register as host:dynamic-port
                vpc_id=args.vpc_id,
                deregistration_delay=60,  # the drain a deploy waits for before scaling a colour in
                health_check=health_check(args.health_path),
                tags={**service_tags, tags.COLOUR: colour},
                opts=child_of(self),
            )
            for colour in names.COLOURS
        }
        listener = aws.lb.Listener(
            service,
            load_balancer_arn=alb.load_balancer.arn,
            port=HTTP_PORT,
            protocol="HTTP",
            default_actions=[
                {
                    "type": "forward",
                    "forward": {
                        "target_groups": [
                            {"arn": target_groups[colour].arn, "weight": weights[colour]}
                            for colour in names.COLOURS
                        ],
                        "stickiness": {"enabled": False, "duration": 1},
                    },
                }
            ],
            tags=service_tags,
            opts=child_of(self),
        )

        execution_role = task_execution_role(self, service, service_tags)
        log_group = container_log_group(self, args.stack, service, service_tags)
        # The first revision; later ones are registered by `parkbrake deploy`, pinned to a digest.
        task_definition = aws.ecs.TaskDefinition(
            service,
            family=f"{names.prefix(args.stack)}-{service}",
            requires_compatibilities=["EC2"],
            network_mode="bridge",
            execution_role_arn=execution_role.arn,
            container_definitions=pulumi.Output.json_dumps(
                [
                    {
                        "name": service,
                        "image": args.image,
                        "essential": True,
                        "memoryReservation": args.memory,
                        "portMappings": [{"containerPort": args.port, "hostPort": 0, "protocol": "tcp"}],
                        "resourceRequirements": [{"type": "GPU", "value": str(args.gpus_per_task)}],
                        "environment": [
                            {"name": "PARKBRAKE_STACK", "value": args.stack},
                            {"name": "PARKBRAKE_REVISION", "value": args.revision},
                        ],
                        "dockerLabels": {names.CONTAINER_REVISION_LABEL: args.revision},
                        "logConfiguration": awslogs(log_group, region, service),
                    }
                ]
            ),
            tags=service_tags,
            opts=child_of(self),
        )
        services = {
            colour: aws.ecs.Service(
                f"{service}-{colour}",
                name=names.ecs_service(service, colour),
                cluster=args.cluster_arn,
                task_definition=task_definition.arn,
                desired_count=args.desired_per_colour if colour == args.live_colour else 0,
                capacity_provider_strategies=[
                    {"capacity_provider": args.capacity_provider_name, "weight": 1, "base": 0}
                ],
                load_balancers=[
                    {
                        "target_group_arn": target_groups[colour].arn,
                        "container_name": service,
                        "container_port": args.port,
                    }
                ],
                # One task per GPU host first (a host failure takes one task), then fill by GPUs.
                ordered_placement_strategies=[
                    {"type": "spread", "field": "attribute:ecs.availability-zone"},
                    {"type": "binpack", "field": "memory"},
                ],
                health_check_grace_period_seconds=120,
                deployment_circuit_breaker={"enable": True, "rollback": True},
                # No spare GPU host is assumed: replace tasks in place rather than surge.
                deployment_minimum_healthy_percent=0 if args.desired_per_colour <= 1 else 50,
                deployment_maximum_percent=100,
                enable_ecs_managed_tags=True,
                propagate_tags="SERVICE",
                tags={**service_tags, tags.COLOUR: colour},
                opts=child_of(self, depends_on=[listener], ignore_changes=["taskDefinition"]),
            )
            for colour in names.COLOURS
        }

        self.url = pulumi.Output.concat("http://", alb.load_balancer.dns_name)
        self.service_names = {colour: ecs_service.name for colour, ecs_service in services.items()}
        self.target_group_arns = {colour: group.arn for colour, group in target_groups.items()}
        self.listener_arn = listener.arn
        self.load_balancer_security_group_id = alb.security_group.id
        self.register_outputs(
            {
                "url": self.url,
                "service_names": self.service_names,
                "target_group_arns": self.target_group_arns,
                "listener_arn": self.listener_arn,
                "load_balancer_security_group_id": self.load_balancer_security_group_id,
            }
        )
