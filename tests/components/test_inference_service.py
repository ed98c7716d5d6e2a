"""InferenceService under the mock engine: blue/green services, the weighted listener, the park switch."""

from __future__ import annotations

import functools
import json
from typing import Any

import pulumi
import pytest

from components.inference_service import InferenceService, InferenceServiceArgs
from guardrails import names
from guardrails.errors import InputError
from stacks.offline import OfflineRun, RegisteredResource, run_offline

SERVICE = "aws:ecs/service:Service"
TASK_DEFINITION = "aws:ecs/taskDefinition:TaskDefinition"
TARGET_GROUP = "aws:lb/targetGroup:TargetGroup"
LISTENER = "aws:lb/listener:Listener"
LOAD_BALANCER = "aws:lb/loadBalancer:LoadBalancer"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
CAPACITY_PROVIDER = "parkbrake-dev-inference"


def arguments(**overrides: Any) -> InferenceServiceArgs:
    fields: dict[str, Any] = {
        "stack": "dev",
        "image": "ghcr.io/acme/llm-server:2.0.1",
        "desired_per_colour": 2,
        "gpus_per_task": 1,
        "memory": 8192,
        "health_path": "/health",
        "port": 8000,
        "revision": "9d1e0aa",
        "cluster_arn": "arn:aws:ecs:us-east-1:123456789012:cluster/parkbrake-dev",
        "capacity_provider_name": CAPACITY_PROVIDER,
        "vpc_id": "vpc-0abc",
        "public_subnet_ids": ["subnet-public-a", "subnet-public-b"],
        "tags": {"parkbrake:managed": "true", "parkbrake:stack": "dev", "parkbrake:revision": "9d1e0aa"},
        **overrides,
    }
    return InferenceServiceArgs(**fields)


def build(**overrides: Any) -> OfflineRun:
    args = arguments(**overrides)

    def program() -> None:
        InferenceService("inference", args)

    return run_offline(program, stack="dev", region="us-east-1")


@functools.cache
def configured() -> OfflineRun:
    """The default arguments' run, built once per module: tests read it and never change it."""
    return build()


def services(run: OfflineRun) -> dict[str, dict[str, Any]]:
    return {resource.inputs["tags"]["parkbrake:colour"]: resource.inputs for resource in run.of_type(SERVICE)}


def listener_weights(run: OfflineRun) -> dict[str, int]:
    """Colour → weight of the listener's default forward, matching target groups by ARN."""
    colour_of = {
        f"arn:aws:lb:us-east-1:123456789012:{group.name}": group.inputs["tags"]["parkbrake:colour"]
        for group in run.of_type(TARGET_GROUP)
    }
    (listener,) = run.of_type(LISTENER)
    (action,) = listener.inputs["defaultActions"]
    assert action["type"] == "forward"
    return {colour_of[group["arn"]]: group["weight"] for group in action["forward"]["targetGroups"]}


def only(run: OfflineRun, type_token: str) -> RegisteredResource:
    (resource,) = run.of_type(type_token)
    return resource


def test_blue_is_live_by_default_with_all_traffic_and_green_idle() -> None:
    run = configured()

    desired = {colour: inputs["desiredCount"] for colour, inputs in services(run).items()}
    assert desired == {"blue": 2, "green": 0}
    assert listener_weights(run) == {"blue": 100, "green": 0}
    assert {inputs["name"] for inputs in services(run).values()} == {"inference-blue", "inference-green"}


def test_green_live_flips_desired_counts_and_weights() -> None:
    run = build(live_colour="green")

    assert {colour: inputs["desiredCount"] for colour, inputs in services(run).items()} == {
        "blue": 0,
        "green": 2,
    }
    assert listener_weights(run) == {"blue": 0, "green": 100}


def test_parked_both_colours_run_nothing_and_the_listener_stays() -> None:
    run = build(desired_per_colour=0)

    assert {colour: inputs["desiredCount"] for colour, inputs in services(run).items()} == {
        "blue": 0,
        "green": 0,
    }
    assert listener_weights(run) == {"blue": 100, "green": 0}
    assert len(run.of_type(TARGET_GROUP)) == 2


def test_services_run_on_the_gpu_pool_capacity_provider_each_with_its_target_group() -> None:
    run = configured()
    group_arns = {
        group.inputs["tags"]["parkbrake:colour"]: f"arn:aws:lb:us-east-1:123456789012:{group.name}"
        for group in run.of_type(TARGET_GROUP)
    }

    for colour, inputs in services(run).items():
        assert inputs["capacityProviderStrategies"] == [
            {"capacityProvider": CAPACITY_PROVIDER, "weight": 1, "base": 0}
        ]
        assert "launchType" not in inputs
        (balancer,) = inputs["loadBalancers"]
        assert balancer["targetGroupArn"] == group_arns[colour]
        assert (balancer["containerName"], balancer["containerPort"]) == ("inference", 8000)


def test_target_groups_and_services_are_tagged_with_service_and_colour() -> None:
    run = configured()

    for resource in run.of_type(TARGET_GROUP) + run.of_type(SERVICE):
        assert resource.inputs["tags"]["parkbrake:service"] == "inference"
        assert resource.inputs["tags"]["parkbrake:colour"] in ("blue", "green")
    assert {group.inputs["name"] for group in run.of_type(TARGET_GROUP)} == {
        "parkbrake-dev-inference-blue",
        "parkbrake-dev-inference-green",
    }
    for group in run.of_type(TARGET_GROUP):
        assert group.inputs["healthCheck"]["path"] == "/health"
        assert group.inputs["targetType"] == "instance"


def test_task_definition_asks_for_gpus_and_carries_the_revision() -> None:
    run = build(gpus_per_task=4)

    inputs = only(run, TASK_DEFINITION).inputs
    assert inputs["requiresCompatibilities"] == ["EC2"]
    assert inputs["tags"]["parkbrake:service"] == "inference"
    assert inputs["tags"]["parkbrake:revision"] == "9d1e0aa"
    (container,) = json.loads(inputs["containerDefinitions"])
    assert container["resourceRequirements"] == [{"type": "GPU", "value": "4"}]
    assert container["dockerLabels"] == {"parkbrake.revision": "9d1e0aa", "parkbrake.metrics-port": "9464"}
    assert container["portMappings"] == [{"containerPort": 8000, "hostPort": 0, "protocol": "tcp"}]


def test_services_leave_the_task_definition_to_the_deploy_command() -> None:
    ignored: dict[str, list[str] | None] = {}

    def record(args: pulumi.ResourceTransformationArgs) -> None:
        ignored[args.name] = args.opts.ignore_changes

    def program() -> None:
        pulumi.runtime.register_stack_transformation(record)
        InferenceService("inference", arguments())

    run_offline(program, stack="dev", region="us-east-1")

    assert ignored["inference-blue"] == ["taskDefinition"]
    assert ignored["inference-green"] == ["taskDefinition"]
    assert not ignored["inference"]  # the listener's weights stay Pulumi's


def test_host_security_group_admits_the_load_balancer_on_dynamic_ports_only() -> None:
    run = build(host_security_group_id="sg-0gpuhosts")

    rule = only(run, INGRESS_RULE).inputs
    assert rule["securityGroupId"] == "sg-0gpuhosts"
    assert (rule["fromPort"], rule["toPort"], rule["ipProtocol"]) == (32768, 65535, "tcp")
    assert rule["referencedSecurityGroupId"] == only(run, LOAD_BALANCER).inputs["securityGroups"][0]
    assert "cidrIpv4" not in rule
    assert configured().of_type(INGRESS_RULE) == []


def test_an_unknown_live_colour_is_refused() -> None:
    with pytest.raises(InputError, match="'purple' is not one of blue, green"):
        build(live_colour="purple")


def test_a_pool_without_a_capacity_provider_is_refused() -> None:
    with pytest.raises(InputError, match="capacity provider"):
        build(capacity_provider_name=None)


def test_long_stack_names_still_give_valid_distinct_load_balancer_names() -> None:
    stack = "research-team-experiments"
    groups = {colour: names.target_group(stack, "inference", colour) for colour in names.COLOURS}

    assert all(len(name) <= 32 and not name.endswith("-") for name in groups.values())
    assert groups["blue"] != groups["green"]
    assert groups == {colour: names.target_group(stack, "inference", colour) for colour in names.COLOURS}
    assert len(names.load_balancer(stack, "control-plane")) <= 32


SCALING_TARGET = "aws:appautoscaling/target:Target"
SCALING_POLICY = "aws:appautoscaling/policy:Policy"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"


def test_an_idle_service_scales_to_zero_and_a_request_at_zero_wakes_it() -> None:
    run = build(scale_to_zero_after_seconds=900)
    target = only(run, SCALING_TARGET)
    policies = {policy.name: policy.inputs for policy in run.of_type(SCALING_POLICY)}
    alarms = {alarm.name: alarm.inputs for alarm in run.of_type(ALARM)}

    assert target.inputs["resourceId"] == "service/parkbrake-dev/inference-blue"  # the live colour
    assert (target.inputs["minCapacity"], target.inputs["maxCapacity"]) == (0, 2)
    idle, wake = policies["inference-idle-to-zero"], policies["inference-wake"]
    assert idle["stepScalingPolicyConfiguration"]["adjustmentType"] == "ExactCapacity"
    assert idle["stepScalingPolicyConfiguration"]["stepAdjustments"] == [
        {"metricIntervalUpperBound": "0", "scalingAdjustment": 0}
    ]
    assert wake["stepScalingPolicyConfiguration"]["stepAdjustments"] == [
        {"metricIntervalLowerBound": "0", "scalingAdjustment": 2}
    ]
    # The mock engine's ARNs: arn:aws:<service>:<region>:<account>:<logical name>; suffixes likewise.
    balancer = {"LoadBalancer": f"app/{only(run, LOAD_BALANCER).name}/0123456789abcdef"}
    assert alarms["inference-idle"]["metricName"] == "RequestCount"
    assert alarms["inference-idle"]["dimensions"] == balancer
    assert alarms["inference-idle"]["evaluationPeriods"] * alarms["inference-idle"]["period"] == 900
    assert alarms["inference-idle"]["treatMissingData"] == "breaching"  # no traffic is no datapoints
    assert alarms["inference-idle"]["alarmActions"] == [policy_arn(run, "inference-idle-to-zero")]
    assert alarms["inference-wake"]["metricName"] == "HTTPCode_ELB_503_Count"
    assert alarms["inference-wake"]["comparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarms["inference-wake"]["alarmActions"] == [policy_arn(run, "inference-wake")]


@pytest.mark.parametrize(
    ("overrides", "live_ignores"),
    [
        ({"scale_to_zero_after_seconds": 900}, ("taskDefinition", "desiredCount")),
        ({"scale_to_zero_after_seconds": None}, ("taskDefinition",)),
    ],
)
def test_one_owner_of_each_colours_desired_count(
    overrides: dict[str, Any], live_ignores: tuple[str, ...]
) -> None:
    """Scaling to zero, Application Auto Scaling owns the live count and `pulumi up` leaves it alone."""
    run = build(**overrides)
    services = {service.name: service for service in run.of_type(SERVICE)}

    assert services["inference-blue"].ignore_changes == live_ignores
    assert services["inference-green"].ignore_changes == ("taskDefinition",)


def policy_arn(run: OfflineRun, name: str) -> str:
    (policy,) = [policy for policy in run.of_type(SCALING_POLICY) if policy.name == name]
    return f"arn:aws:appautoscaling:us-east-1:123456789012:{policy.name}"


@pytest.mark.parametrize(
    "overrides",
    [{"scale_to_zero_after_seconds": None}, {"scale_to_zero_after_seconds": 900, "desired_per_colour": 0}],
)
def test_no_scale_to_zero_when_off_or_parked(overrides: dict[str, Any]) -> None:
    run = build(**overrides)
    assert run.of_type(SCALING_TARGET) == []
    assert run.of_type(ALARM) == []


def test_the_load_balancer_waits_as_long_as_the_service_drains() -> None:
    from components.inference_service import DRAIN_SECONDS

    run = configured()
    (container,) = json.loads(only(run, TASK_DEFINITION).inputs["containerDefinitions"])
    environment = {item["name"]: item["value"] for item in container["environment"]}

    assert {group.inputs["deregistrationDelay"] for group in run.of_type(TARGET_GROUP)} == {DRAIN_SECONDS}
    assert environment["PARKBRAKE_INFERENCE_DRAIN"] == f"{DRAIN_SECONDS}s"
    assert container["stopTimeout"] > DRAIN_SECONDS  # SIGKILL only after the drain could finish


def test_the_load_balancer_cannot_reach_the_metrics_port() -> None:
    """/metrics names tenants: the target groups and listener carry the API port only, the metrics
    port is published on no host port (bridge mode publishes mapped ports only), and neither the
    load balancer's security group nor its rule into the hosts admits it."""
    run = build(host_security_group_id="sg-0gpuhosts", port=8080)
    (container,) = json.loads(only(run, TASK_DEFINITION).inputs["containerDefinitions"])
    environment = {item["name"]: item["value"] for item in container["environment"]}
    metrics_port = int(environment["PARKBRAKE_INFERENCE_METRICS_PORT"])

    assert metrics_port == 9464
    assert container["portMappings"] == [{"containerPort": 8080, "hostPort": 0, "protocol": "tcp"}]
    assert {group.inputs["port"] for group in run.of_type(TARGET_GROUP)} == {8080}
    assert all(
        balancer["containerPort"] == 8080
        for service in run.of_type(SERVICE)
        for balancer in service.inputs["loadBalancers"]
    )
    (alb_group,) = [group for group in run.of_type(SECURITY_GROUP) if group.name.endswith("-alb")]
    alb_ports = {(rule["fromPort"], rule["toPort"]) for rule in alb_group.inputs["ingress"]}
    assert all(not low <= metrics_port <= high for low, high in alb_ports)
    assert {listener.inputs["port"] for listener in run.of_type(LISTENER)} <= {port for port, _ in alb_ports}
    # The load balancer's way into the hosts is the dynamic host ports; the metrics port has none.
    rule = only(run, INGRESS_RULE).inputs
    assert (rule["fromPort"], rule["toPort"]) == (32768, 65535)
    assert [m["containerPort"] for m in container["portMappings"]] == [8080]


def test_the_metrics_port_may_not_be_the_serving_port() -> None:
    with pytest.raises(InputError, match="metrics port 8000 is the serving port"):
        build(metrics_port=8000)
