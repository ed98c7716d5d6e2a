"""ControlPlaneService under the mock engine: the park switch, tags, the task definition, secrets, networking."""

from __future__ import annotations

import functools
import json
from typing import Any

from components.control_plane_service import ControlPlaneService, ControlPlaneServiceArgs
from guardrails.capacity import Capacity
from stacks.offline import OfflineRun, RegisteredResource, run_offline
from tests.components.offline_outputs import changed_inputs

SERVICE = "aws:ecs/service:Service"
TASK_DEFINITION = "aws:ecs/taskDefinition:TaskDefinition"
SCALING_TARGET = "aws:appautoscaling/target:Target"
SCALING_POLICY = "aws:appautoscaling/policy:Policy"
TARGET_GROUP = "aws:lb/targetGroup:TargetGroup"
LOAD_BALANCER = "aws:lb/loadBalancer:LoadBalancer"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ROLE = "aws:iam/role:Role"
CACHE_SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:parkbrake-dev-cache-Zz9"
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:parkbrake-dev-db-AbCdEf"
CONFIGURED = Capacity(min=1, desired=2, max=4)


def build(capacity: Capacity = CONFIGURED, **overrides: Any) -> OfflineRun:
    fields: dict[str, Any] = {
        "stack": "dev",
        "image": "ghcr.io/acme/control-plane:1.4.2",
        "cpu": 512,
        "memory": 1024,
        "capacity": capacity,
        "health_path": "/healthz",
        "port": 8080,
        "revision": "3f9c2ab",
        "cluster_arn": "arn:aws:ecs:us-east-1:123456789012:cluster/parkbrake-dev",
        "vpc_id": "vpc-0abc",
        "public_subnet_ids": ["subnet-public-a", "subnet-public-b"],
        "private_subnet_ids": ["subnet-private-a", "subnet-private-b"],
        "database_endpoint": "parkbrake-dev.cluster-abc.us-east-1.rds.amazonaws.com",
        "database_secret_arn": SECRET_ARN,
        "cache_endpoint": "master.parkbrake-dev.abc.use1.cache.amazonaws.com",
        "tags": {"parkbrake:managed": "true", "parkbrake:stack": "dev", "parkbrake:revision": "3f9c2ab"},
        **overrides,
    }

    def program() -> None:
        ControlPlaneService("control-plane", ControlPlaneServiceArgs(**fields))

    return run_offline(program, stack="dev", region="us-east-1")


@functools.cache
def configured(parked: bool = False) -> OfflineRun:
    """The default arguments' run, built once per module: tests read it and never change it."""
    return build(CONFIGURED.parked(), parked=True) if parked else build(CONFIGURED)


def only(run: OfflineRun, type_token: str) -> RegisteredResource:
    (resource,) = run.of_type(type_token)
    return resource


def container(run: OfflineRun) -> dict[str, Any]:
    (definition,) = json.loads(only(run, TASK_DEFINITION).inputs["containerDefinitions"])
    return definition


def test_unparked_service_runs_the_configured_capacity() -> None:
    run = configured()

    assert only(run, SERVICE).inputs["desiredCount"] == 2
    target = only(run, SCALING_TARGET).inputs
    assert (target["minCapacity"], target["maxCapacity"]) == (1, 4)


def test_parked_service_has_no_tasks_and_autoscaling_cannot_add_any_below_its_ceiling() -> None:
    run = configured(parked=True)

    assert only(run, SERVICE).inputs["desiredCount"] == 0
    target = only(run, SCALING_TARGET).inputs
    assert (target["minCapacity"], target["maxCapacity"]) == (0, 4)


def test_minimum_zero_is_accepted_unparked() -> None:
    run = build(Capacity(min=0, desired=1, max=3))

    assert only(run, SCALING_TARGET).inputs["minCapacity"] == 0
    assert only(run, SERVICE).inputs["desiredCount"] == 1


def test_autoscaling_tracks_cpu_on_the_service() -> None:
    run = configured()

    assert only(run, SCALING_TARGET).inputs["resourceId"] == "service/parkbrake-dev/control-plane"
    policy = only(run, SCALING_POLICY).inputs
    assert policy["policyType"] == "TargetTrackingScaling"
    tracking = policy["targetTrackingScalingPolicyConfiguration"]
    assert (
        tracking["predefinedMetricSpecification"]["predefinedMetricType"] == "ECSServiceAverageCPUUtilization"
    )
    assert tracking["targetValue"] == 60


def test_service_and_task_definition_carry_revision_and_service_tags() -> None:
    run = configured()

    for type_token in (SERVICE, TASK_DEFINITION):
        resource_tags = only(run, type_token).inputs["tags"]
        assert resource_tags["parkbrake:revision"] == "3f9c2ab"
        assert resource_tags["parkbrake:service"] == "control-plane"
        assert resource_tags["parkbrake:managed"] == "true"
    assert only(run, SERVICE).inputs["propagateTags"] == "SERVICE"
    assert container(run)["dockerLabels"] == {"parkbrake:revision": "3f9c2ab"}


def test_task_definition_is_fargate_with_sizes_as_strings() -> None:
    inputs = only(configured(), TASK_DEFINITION).inputs

    assert inputs["requiresCompatibilities"] == ["FARGATE"]
    assert (inputs["cpu"], inputs["memory"]) == ("512", "1024")
    assert inputs["networkMode"] == "awsvpc"
    assert inputs["family"] == "parkbrake-dev-control-plane"
    assert only(configured(), SERVICE).inputs["launchType"] == "FARGATE"


def test_endpoints_are_plain_environment_and_credentials_come_from_the_secret() -> None:
    definition = container(configured())

    environment = {entry["name"]: entry["value"] for entry in definition["environment"]}
    assert environment["DATABASE_ENDPOINT"] == "parkbrake-dev.cluster-abc.us-east-1.rds.amazonaws.com"
    assert environment["CACHE_ENDPOINT"] == "master.parkbrake-dev.abc.use1.cache.amazonaws.com"
    assert not any("PASSWORD" in name for name in environment)
    assert definition["secrets"] == [
        {"name": "DATABASE_USERNAME", "valueFrom": f"{SECRET_ARN}:username::"},
        {"name": "DATABASE_PASSWORD", "valueFrom": f"{SECRET_ARN}:password::"},
    ]


def test_execution_role_may_read_only_the_service_secrets() -> None:
    run = build(cache_secret_arn=CACHE_SECRET_ARN)

    (policy,) = [json.loads(resource.inputs["policy"]) for resource in run.of_type(ROLE_POLICY)]
    assert policy["Statement"] == [
        {
            "Sid": "ReadServiceSecrets",
            "Effect": "Allow",
            "Action": ["secretsmanager:GetSecretValue"],
            "Resource": [SECRET_ARN, CACHE_SECRET_ARN],
        }
    ]
    task_definition = only(run, TASK_DEFINITION).inputs
    assert task_definition["executionRoleArn"].endswith("control-plane-execution")
    secrets = {entry["name"]: entry["valueFrom"] for entry in container(run)["secrets"]}
    assert secrets["CACHE_PASSWORD"] == f"{CACHE_SECRET_ARN}:password::"


def test_tasks_run_with_a_task_role_of_their_own_that_grants_nothing() -> None:
    run = configured()

    task_role = run.named(ROLE, "control-plane-task")
    assert only(run, TASK_DEFINITION).inputs["taskRoleArn"].endswith(":control-plane-task")
    assert json.loads(task_role.inputs["assumeRolePolicy"])["Statement"][0]["Principal"] == {
        "Service": "ecs-tasks.amazonaws.com"
    }
    assert not [policy for policy in run.of_type(ROLE_POLICY) if policy.inputs["role"] == task_role.name]


def test_clients_verify_the_database_over_tls() -> None:
    environment = {entry["name"]: entry["value"] for entry in container(configured())["environment"]}

    assert environment["PGSSLMODE"] == "verify-full"
    assert environment["PGSSLROOTCERT"].endswith(".pem")


def test_unparked_application_auto_scaling_owns_the_desired_count() -> None:
    assert only(configured(), SERVICE).ignore_changes == ("desiredCount",)
    assert only(build(CONFIGURED.parked(), parked=True), SERVICE).ignore_changes == ()


def test_without_database_or_cache_there_are_no_secrets_and_no_secret_permission() -> None:
    run = build(database_endpoint=None, database_secret_arn=None, cache_endpoint=None)

    definition = container(run)
    assert definition["secrets"] == []
    assert {entry["name"] for entry in definition["environment"]} == {"PARKBRAKE_STACK", "PARKBRAKE_REVISION"}
    assert run.of_type(ROLE_POLICY) == []


def test_load_balancer_is_public_and_tasks_are_private_behind_it() -> None:
    run = configured()

    load_balancer = only(run, LOAD_BALANCER).inputs
    assert load_balancer["subnets"] == ["subnet-public-a", "subnet-public-b"]
    assert load_balancer["internal"] is False
    assert load_balancer["name"] == "parkbrake-dev-control-plane"
    network = only(run, SERVICE).inputs["networkConfiguration"]
    assert network["subnets"] == ["subnet-private-a", "subnet-private-b"]
    assert network["assignPublicIp"] is False

    tasks_group = run.named(SECURITY_GROUP, "control-plane-tasks").inputs
    (ingress,) = tasks_group["ingress"]
    assert (ingress["fromPort"], ingress["toPort"], ingress["protocol"]) == (8080, 8080, "tcp")
    assert ingress["securityGroups"] == load_balancer["securityGroups"]
    assert "cidrBlocks" not in ingress


def test_target_group_checks_the_health_path_and_the_service_registers_its_container() -> None:
    run = configured()

    group = only(run, TARGET_GROUP).inputs
    assert group["healthCheck"]["path"] == "/healthz"
    assert group["targetType"] == "ip"
    assert group["port"] == 8080
    (balancer,) = only(run, SERVICE).inputs["loadBalancers"]
    assert (balancer["containerName"], balancer["containerPort"]) == ("control-plane", 8080)
    assert container(run)["portMappings"] == [{"containerPort": 8080, "protocol": "tcp"}]


def test_every_resource_is_a_child_of_the_component() -> None:
    run = configured()

    (component,) = run.of_type("parkbrake:aws:ControlPlaneService")
    children = list(run.children_of(component))
    assert len(children) == len(run.resources) - 1
    assert {child.type for child in children} >= {SERVICE, TASK_DEFINITION, SCALING_TARGET, LOAD_BALANCER}


def test_parking_changes_only_the_desired_count_and_the_autoscaling_minimum() -> None:
    assert changed_inputs(configured(), configured(parked=True)) == {
        (SERVICE, "control-plane", "desiredCount"),
        (SCALING_TARGET, "control-plane", "minCapacity"),
    }
