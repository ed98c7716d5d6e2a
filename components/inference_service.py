"""The inference service: blue and green ECS services on a GPU pool, behind one weighted ALB listener.

Ownership is split with ``parkbrake deploy``. Pulumi declares both colours, their target groups and the
listener; it sets the live colour's desired count to ``desired_per_colour`` (0 when parked), the idle
colour's to 0, and the listener weights from ``live_colour`` (100/0). The deploy command registers task
definitions pinned to image digests and moves traffic between the colours, so the services ignore
changes to ``taskDefinition``: a ``pulumi up`` never rolls back what a deploy rolled out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.common import child_of, named_child_of, type_token
from components.ecs_service import (
    Endpoint,
    EndpointArgs,
    ServiceBasics,
    endpoint,
    health_check,
    scalable_resource_id,
    service_basics,
)
from guardrails import names, tags
from guardrails.errors import InputError

# The ephemeral range ECS draws dynamic host ports from in bridge mode.
DYNAMIC_PORTS = (32768, 65535)
LIVE_WEIGHT = 100
# How long a stopping task keeps serving its in-flight requests: the target group's deregistration
# delay and the service's own drain on SIGTERM (PARKBRAKE_INFERENCE_DRAIN) are this one number, and
# ECS waits a little longer before SIGKILL.
DRAIN_SECONDS = 60
STOP_TIMEOUT_SECONDS = DRAIN_SECONDS + 15
IDLE_PERIOD_SECONDS = 60
# The service's /metrics port (PARKBRAKE_INFERENCE_METRICS_PORT). Its metrics name tenants, so it is
# declared in no port mapping: in bridge mode only mapped ports are published on the host, so neither
# the load balancer (admitted on the dynamic host ports) nor anything else in the VPC can reach it; a
# scraper on the host reaches it on the container's bridge address, found by the docker label.
METRICS_PORT = 9464
METRICS_PORT_LABEL = "parkbrake.metrics-port"


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
    private_subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]] = ()
    endpoint: EndpointArgs = field(default_factory=EndpointArgs)
    # ECS refuses a service on a capacity provider the cluster is not associated with yet (and on destroy,
    # a provider still in use): the services wait for this association.
    capacity_provider_association: pulumi.Resource | None = None
    # Scale the live colour to zero after this many seconds without a request, and wake it on the
    # load balancer's 503s (no healthy target); None keeps desired_per_colour always running.
    scale_to_zero_after_seconds: int | None = None
    metrics_port: int = METRICS_PORT


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
        self._args = args
        colour_weights(args.live_colour)  # refuses an unknown colour before anything is declared
        if args.metrics_port == args.port:
            raise InputError(
                f"the inference metrics port {args.metrics_port} is the serving port; /metrics must be on "
                f"a port the load balancer does not reach (the default is {METRICS_PORT})"
            )
        service = names.INFERENCE_SERVICE
        basics = service_basics(
            self, stack=args.stack, service=service, revision=args.revision, base_tags=args.tags
        )
        target_groups = self._target_groups(service, basics.tags)
        front = self._endpoint(service, target_groups, basics.tags)
        if args.host_security_group_id is not None:
            self._admit_load_balancer(service, args.host_security_group_id, front.security_group, basics.tags)
        task_definition = self._task_definition(service, basics)
        services = {
            colour: self._colour_service(
                service,
                colour,
                task_definition=task_definition,
                target_group=target_groups[colour],
                listener=front.listener,
                service_tags=basics.tags,
            )
            for colour in names.COLOURS
        }

        if self._scales_to_zero(args.live_colour):
            scale_to_zero(self, args, services[args.live_colour], front.load_balancer.arn_suffix, basics.tags)

        self.url = front.url
        self.service_names = {colour: ecs_service.name for colour, ecs_service in services.items()}
        self.target_group_arns = {colour: group.arn for colour, group in target_groups.items()}
        self.listener_arn = front.listener.arn
        self.load_balancer_security_group_id = front.security_group.id
        self.register_outputs(
            {
                "url": self.url,
                "service_names": self.service_names,
                "target_group_arns": self.target_group_arns,
                "listener_arn": self.listener_arn,
                "load_balancer_security_group_id": self.load_balancer_security_group_id,
            }
        )

    def _scales_to_zero(self, colour: str) -> bool:
        args = self._args
        return (
            colour == args.live_colour
            and args.scale_to_zero_after_seconds is not None
            and args.desired_per_colour > 0
        )

    def _endpoint(
        self, service: str, target_groups: Mapping[str, aws.lb.TargetGroup], service_tags: Mapping[str, str]
    ) -> Endpoint:
        """The endpoint, its serving listener a weighted forward: all to the live colour, none to the idle."""
        args = self._args
        weights = colour_weights(args.live_colour)
        return endpoint(
            self,
            stack=args.stack,
            service=service,
            args=args.endpoint,
            vpc_id=args.vpc_id,
            public_subnet_ids=args.public_subnet_ids,
            private_subnet_ids=args.private_subnet_ids,
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
            resource_tags=service_tags,
        )

    def _admit_load_balancer(
        self,
        service: str,
        host_security_group_id: pulumi.Input[str],
        load_balancer: aws.ec2.SecurityGroup,
        service_tags: Mapping[str, str],
    ) -> None:
        """The GPU hosts admit the load balancer on ECS's dynamic host ports (bridge mode), and nothing else."""
        aws.vpc.SecurityGroupIngressRule(
            f"{service}-alb-to-hosts",
            security_group_id=host_security_group_id,
            referenced_security_group_id=load_balancer.id,
            ip_protocol="tcp",
            from_port=DYNAMIC_PORTS[0],
            to_port=DYNAMIC_PORTS[1],
            description="inference load balancer to the dynamic host ports of the tasks",
            tags=dict(service_tags),
            opts=child_of(self),
        )

    def _task_definition(self, service: str, basics: ServiceBasics) -> aws.ecs.TaskDefinition:
        """The first revision; later ones are registered by `parkbrake deploy`, pinned to a digest."""
        args = self._args
        return aws.ecs.TaskDefinition(
            service,
            family=f"{names.prefix(args.stack)}-{service}",
            requires_compatibilities=["EC2"],
            network_mode="bridge",
            execution_role_arn=basics.execution_role.arn,
            task_role_arn=basics.task_role.arn,
            container_definitions=pulumi.Output.json_dumps(
                [
                    {
                        "name": service,
                        "image": args.image,
                        "essential": True,
                        "memoryReservation": args.memory,
                        # The API port only: the metrics port is not published (METRICS_PORT says why).
                        "portMappings": [{"containerPort": args.port, "hostPort": 0, "protocol": "tcp"}],
                        "resourceRequirements": [{"type": "GPU", "value": str(args.gpus_per_task)}],
                        "environment": [
                            {"name": "PARKBRAKE_STACK", "value": args.stack},
                            {"name": "PARKBRAKE_REVISION", "value": args.revision},
                            {"name": "PARKBRAKE_INFERENCE_DRAIN", "value": f"{DRAIN_SECONDS}s"},
                            {"name": "PARKBRAKE_INFERENCE_METRICS_PORT", "value": str(args.metrics_port)},
                        ],
                        "stopTimeout": STOP_TIMEOUT_SECONDS,
                        "dockerLabels": {
                            names.CONTAINER_REVISION_LABEL: args.revision,
                            METRICS_PORT_LABEL: str(args.metrics_port),
                        },
                        "logConfiguration": basics.awslogs(service),
                    }
                ]
            ),
            tags=dict(basics.tags),
            opts=child_of(self),
        )

    def _target_groups(self, service: str, service_tags: Mapping[str, str]) -> dict[str, aws.lb.TargetGroup]:
        args = self._args
        return {
            colour: aws.lb.TargetGroup(
                f"{service}-{colour}",
                name=names.target_group(args.stack, service, colour),
                port=args.port,
                protocol="HTTP",
                target_type="instance",  # bridge mode: tasks register as host:dynamic-port
                vpc_id=args.vpc_id,
                deregistration_delay=DRAIN_SECONDS,  # also the drain a deploy waits for before scaling in
                health_check=health_check(args.health_path),
                tags={**service_tags, tags.COLOUR: colour},
                opts=named_child_of(self),
            )
            for colour in names.COLOURS
        }

    def _colour_service(
        self,
        service: str,
        colour: str,
        *,
        task_definition: aws.ecs.TaskDefinition,
        target_group: aws.lb.TargetGroup,
        listener: aws.lb.Listener,
        service_tags: Mapping[str, str],
    ) -> aws.ecs.Service:
        args = self._args
        waits_for = [
            listener,
            *([args.capacity_provider_association] if args.capacity_provider_association else []),
        ]
        return aws.ecs.Service(
            f"{service}-{colour}",
            name=names.ecs_service(service, colour),
            cluster=args.cluster_arn,
            task_definition=task_definition.arn,
            # One owner per count. Pulumi owns the idle colour's (0), and the live colour's unless it scales
            # to zero; then Application Auto Scaling owns it (idle → 0, a 503 → desired_per_colour) and
            # `pulumi up` leaves it alone. A deploy records its end state in the stack file (live_colour).
            desired_count=args.desired_per_colour if colour == args.live_colour else 0,
            capacity_provider_strategies=[
                {"capacity_provider": args.capacity_provider_name, "weight": 1, "base": 0}
            ],
            load_balancers=[
                {"target_group_arn": target_group.arn, "container_name": service, "container_port": args.port}
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
            opts=named_child_of(
                self,
                depends_on=waits_for,
                ignore_changes=[
                    "taskDefinition",
                    *(["desiredCount"] if self._scales_to_zero(colour) else []),
                ],
            ),
        )


def scale_to_zero(
    parent: pulumi.Resource,
    args: InferenceServiceArgs,
    live: aws.ecs.Service,
    load_balancer: pulumi.Input[str],
    resource_tags: Mapping[str, str],
) -> None:
    """Idle → zero tasks (the capacity provider then empties the GPU pool); a request at zero → wake.

    At zero the load balancer has no healthy target and answers 503 itself; its
    ``HTTPCode_ELB_503_Count`` alarm sets the live colour back to ``desired_per_colour``. The idle
    alarm treats missing data (no requests at all) as idle.
    """
    assert args.scale_to_zero_after_seconds is not None
    service = names.INFERENCE_SERVICE
    target = aws.appautoscaling.Target(
        service,
        service_namespace="ecs",
        scalable_dimension="ecs:service:DesiredCount",
        resource_id=scalable_resource_id(args.stack, live),
        min_capacity=0,
        max_capacity=args.desired_per_colour,
        tags=dict(resource_tags),
        opts=child_of(parent),
    )

    def exact(name: str, capacity: int, bound: dict[str, str]) -> aws.appautoscaling.Policy:
        return aws.appautoscaling.Policy(
            f"{service}-{name}",
            policy_type="StepScaling",
            service_namespace=target.service_namespace,
            scalable_dimension=target.scalable_dimension,
            resource_id=target.resource_id,
            step_scaling_policy_configuration={
                "adjustment_type": "ExactCapacity",
                "cooldown": IDLE_PERIOD_SECONDS,
                "metric_aggregation_type": "Maximum",
                "step_adjustments": [{**bound, "scaling_adjustment": capacity}],
            },
            opts=child_of(parent),
        )

    idle = exact("idle-to-zero", 0, {"metric_interval_upper_bound": "0"})
    wake = exact("wake", args.desired_per_colour, {"metric_interval_lower_bound": "0"})
    periods = max(1, -(-args.scale_to_zero_after_seconds // IDLE_PERIOD_SECONDS))
    common = {
        "namespace": "AWS/ApplicationELB",
        "statistic": "Sum",
        "period": IDLE_PERIOD_SECONDS,
        "dimensions": {"LoadBalancer": load_balancer},
        "tags": dict(resource_tags),
    }
    aws.cloudwatch.MetricAlarm(
        f"{service}-idle",
        alarm_description=f"no request for {args.scale_to_zero_after_seconds}s: scale {service} to zero",
        metric_name="RequestCount",
        comparison_operator="LessThanThreshold",
        threshold=1,
        evaluation_periods=periods,
        treat_missing_data="breaching",  # no datapoints is what idle looks like
        alarm_actions=[idle.arn],
        opts=child_of(parent),
        **common,
    )
    aws.cloudwatch.MetricAlarm(
        f"{service}-wake",
        alarm_description=f"requests answered 503 by the load balancer (no healthy task): wake {service}",
        metric_name="HTTPCode_ELB_503_Count",
        comparison_operator="GreaterThanOrEqualToThreshold",
        threshold=1,
        evaluation_periods=1,
        treat_missing_data="notBreaching",
        alarm_actions=[wake.arn],
        opts=child_of(parent),
        **common,
    )
