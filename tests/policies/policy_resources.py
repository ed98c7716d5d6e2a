"""Synthetic stacks for the policy tests, built from the same ``RegisteredResource`` that ``plan`` collects.

Each builder returns a compliant resource; tests change one thing at a time with ``with_inputs``.
"""

from __future__ import annotations

import importlib
import inspect
import json
from dataclasses import replace
from typing import Any

from guardrails import names, tags
from stacks.offline import RegisteredResource

STACK = "dev"
PROJECT = "parkbrake"
STACK_URN = f"urn:pulumi:{STACK}::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-{STACK}"
REAPER_FUNCTION = names.function_name(STACK, "reaper")


def resource(
    type_token: str, name: str, inputs: dict[str, Any], parent: str | None = None
) -> RegisteredResource:
    return RegisteredResource(
        type=type_token,
        name=name,
        urn=f"urn:pulumi:{STACK}::{PROJECT}::{type_token}::{name}",
        parent=parent,
        custom=True,
        inputs=inputs,
    )


def with_inputs(original: RegisteredResource, **changes: Any) -> RegisteredResource:
    """A copy with some inputs replaced; a value of ``None`` removes the input."""
    inputs = {**original.inputs, **changes}
    return replace(original, inputs={key: value for key, value in inputs.items() if value is not None})


def base_tags(**extra: str) -> dict[str, str]:
    return {tags.MANAGED: "true", tags.STACK: STACK, tags.REVISION: "abc1234", **extra}


def gpu_host_tags(**extra: str) -> dict[str, str]:
    return base_tags(**{tags.POOL: "training", tags.TENANT: "research", tags.MAX_RUNTIME: "4h", **extra})


def pool_component(pool: str = "training") -> str:
    return f"urn:pulumi:{STACK}::{PROJECT}::parkbrake:aws:GpuPool::{pool}"


def gpu_launch_template(
    pool: str = "training", instance_type: str = "g5.12xlarge", host_tags: dict[str, str] | None = None
) -> RegisteredResource:
    launched = host_tags if host_tags is not None else gpu_host_tags()
    return resource(
        "aws:ec2/launchTemplate:LaunchTemplate",
        f"{pool}-launch-template",
        {
            "instanceType": instance_type,
            "instanceInitiatedShutdownBehavior": "terminate",
            "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1},
            "tagSpecifications": [
                {"resourceType": "instance", "tags": launched},
                {"resourceType": "volume", "tags": launched},
            ],
            "tags": launched,
        },
        parent=pool_component(pool),
    )


def gpu_group(
    pool: str = "training", max_size: float = 2.0, group_tags: dict[str, str] | None = None
) -> RegisteredResource:
    listed = group_tags if group_tags is not None else gpu_host_tags()
    return resource(
        "aws:autoscaling/group:Group",
        f"{pool}-group",
        {
            "name": names.autoscaling_group(STACK, pool),
            "minSize": 0.0,
            "desiredCapacity": 0.0,
            "maxSize": max_size,
            "launchTemplate": {"id": f"{pool}-launch-template-0123456789ab", "version": "$Latest"},
            "tags": [
                {"key": key, "value": value, "propagateAtLaunch": True} for key, value in listed.items()
            ],
        },
        parent=pool_component(pool),
    )


def topic_arn() -> str:
    return f"arn:aws:sns:us-east-1:123456789012:{names.prefix(STACK)}-alarms"


def reaper_function() -> RegisteredResource:
    return resource(
        "aws:lambda/function:Function",
        "reaper",
        {
            "name": REAPER_FUNCTION,
            "handler": "lambdas.reaper.handler",
            "runtime": "python3.12",
            "tags": base_tags(),
        },
    )


def reaper_schedule() -> RegisteredResource:
    return resource(
        "aws:scheduler/schedule:Schedule",
        "reaper-schedule",
        {
            "name": names.reaper_schedule(STACK),
            "groupName": names.schedule_group(STACK),
            "scheduleExpression": "rate(5 minutes)",
            "state": "ENABLED",
            "flexibleTimeWindow": {"mode": "OFF"},
            "target": {"arn": f"arn:aws:lambda:us-east-1:123456789012:function:{REAPER_FUNCTION}"},
        },
    )


def errors_alarm() -> RegisteredResource:
    return resource(
        "aws:cloudwatch/metricAlarm:MetricAlarm",
        "reaper-errors",
        {
            "namespace": "AWS/Lambda",
            "metricName": "Errors",
            "dimensions": {"FunctionName": REAPER_FUNCTION},
            "statistic": "Sum",
            "period": 300.0,
            "evaluationPeriods": 1.0,
            "threshold": 0.0,
            "comparisonOperator": "GreaterThanThreshold",
            "treatMissingData": "notBreaching",
            "alarmActions": [topic_arn()],
            "tags": base_tags(),
        },
    )


def heartbeat_alarm() -> RegisteredResource:
    return resource(
        "aws:cloudwatch/metricAlarm:MetricAlarm",
        "reaper-heartbeat",
        {
            "namespace": names.heartbeat_namespace(),
            "metricName": names.HEARTBEAT_METRIC,
            "dimensions": {"Guardrail": "reaper"},
            "statistic": "Sum",
            "period": 600.0,
            "evaluationPeriods": 1.0,
            "threshold": 1.0,
            "comparisonOperator": "LessThanThreshold",
            "treatMissingData": "breaching",
            "alarmActions": [topic_arn()],
            "tags": base_tags(),
        },
    )


def reaper_policy_document(**statement_changes: Any) -> str:
    """The reaper's stop grant, limited to managed hosts by a tag condition."""
    statement = {
        "Sid": "StopManagedHosts",
        "Effect": "Allow",
        "Action": ["ec2:StopInstances", "ec2:TerminateInstances"],
        "Resource": "*",
        "Condition": {"StringEquals": {f"aws:ResourceTag/{tags.MANAGED}": "true"}},
        **statement_changes,
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def reaper_role_policy(document: str | None = None) -> RegisteredResource:
    return resource(
        "aws:iam/rolePolicy:RolePolicy",
        "reaper-policy",
        {"role": "reaper-role", "policy": document if document is not None else reaper_policy_document()},
    )


def database() -> list[RegisteredResource]:
    return [
        resource(
            "aws:rds/cluster:Cluster",
            "database",
            {
                "engine": "aurora-postgresql",
                "storageEncrypted": True,
                "dbClusterParameterGroupName": "database-parameters",
                "tags": base_tags(),
            },
        ),
        resource(
            "aws:rds/clusterParameterGroup:ClusterParameterGroup",
            "database-parameters",
            {
                "family": "aurora-postgresql16",
                "parameters": [{"name": "rds.force_ssl", "value": "1", "applyMethod": "immediate"}],
                "tags": base_tags(),
            },
        ),
        resource(
            "aws:rds/clusterInstance:ClusterInstance",
            "database-writer",
            {"instanceClass": "db.serverless", "publiclyAccessible": False, "tags": base_tags()},
        ),
    ]


def cache() -> RegisteredResource:
    return resource(
        "aws:elasticache/replicationGroup:ReplicationGroup",
        "cache",
        {
            "nodeType": "cache.t4g.small",
            "atRestEncryptionEnabled": True,
            "transitEncryptionEnabled": True,
            "transitEncryptionMode": "required",
            "userGroupIds": ["cache-users"],
            "tags": base_tags(),
        },
    )


def reaper() -> list[RegisteredResource]:
    return [reaper_function(), reaper_schedule(), errors_alarm(), heartbeat_alarm(), reaper_role_policy()]


def compliant_stack() -> list[RegisteredResource]:
    """A small stack every rule passes: one GPU pool, the reaper, Postgres and Redis."""
    return [gpu_launch_template(), gpu_group(), *reaper(), *database(), cache()]


def replacing(stack: list[RegisteredResource], *replacements: RegisteredResource) -> list[RegisteredResource]:
    """``stack`` with the resources of the same URN swapped for ``replacements``."""
    by_urn = {replacement.urn: replacement for replacement in replacements}
    return [by_urn.get(item.urn, item) for item in stack]


def takes_tags(type_token: str) -> bool:
    """Whether pulumi-aws's resource class for ``type_token`` accepts ``tags``."""
    _, module, class_name = type_token.split(":")
    package = module.split("/")[0]
    sdk = importlib.import_module(f"pulumi_aws.{'lambda_' if package == 'lambda' else package}")
    return "tags" in inspect.signature(getattr(sdk, class_name)._internal_init).parameters
