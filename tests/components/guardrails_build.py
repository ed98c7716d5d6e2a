"""The Guardrails component built under the mock engine, and readers of what it declared, for the
guardrail component tests."""

from __future__ import annotations

import functools
import json
from datetime import timedelta
from typing import Any

from components.guardrail_functions import Guardrails, GuardrailsArgs, NightlyStart
from guardrails.settings_table import TUNING, Tuning
from stacks.offline import OfflineRun, run_offline

SCHEDULE = "aws:scheduler/schedule:Schedule"
SCHEDULE_GROUP = "aws:scheduler/scheduleGroup:ScheduleGroup"
FUNCTION = "aws:lambda/function:Function"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
RULE = "aws:cloudwatch/eventRule:EventRule"
EVENT_TARGET = "aws:cloudwatch/eventTarget:EventTarget"
PERMISSION = "aws:lambda/permission:Permission"
PARAMETER = "aws:ssm/parameter:Parameter"
TOPIC = "aws:sns/topic:Topic"
SUBSCRIPTION = "aws:sns/topicSubscription:TopicSubscription"

ACCOUNT = "123456789012"
TRAINING_GROUP = f"arn:aws:autoscaling:us-east-1:{ACCOUNT}:autoScalingGroup:1a2b:autoScalingGroupName/parkbrake-dev-training"
SERVING_GROUP = f"arn:aws:autoscaling:us-east-1:{ACCOUNT}:autoScalingGroup:3c4d:autoScalingGroupName/parkbrake-dev-inference"
SECRET_ARN = f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:parkbrake-dev-db-AbCdEf"
REAPER_ARN = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:parkbrake-dev-reaper"
LAUNCHER_ARN = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:parkbrake-dev-launcher"
BUDGET_ARN = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:parkbrake-dev-budget"
STOP_ACTIONS = {
    "ec2:StopInstances",
    "ec2:TerminateInstances",
    "autoscaling:TerminateInstanceInAutoScalingGroup",
    "autoscaling:SetDesiredCapacity",
}
TUNED = {row.name for row in TUNING}
MANAGED_CONDITION = {
    "StringEquals": {"aws:ResourceTag/parkbrake:managed": "true", "aws:ResourceTag/parkbrake:stack": "dev"}
}
SPOT_CONDITION = {"StringEquals": {**MANAGED_CONDITION["StringEquals"], "ec2:InstanceMarketType": "spot"}}


def arguments(**overrides: Any) -> GuardrailsArgs:
    fields: dict[str, Any] = {
        "stack": "dev",
        "region": "us-east-1",
        "parked": False,
        "sweep_every": timedelta(minutes=5),
        "alarm_email": "oncall@example.com",
        "alarm_topic_arn": None,
        "pool_caps": {"training": timedelta(hours=4), "inference": timedelta(hours=24)},
        "nightly": NightlyStart(
            pool="training",
            cron="0 2 * * 1-5",
            timezone="Europe/Berlin",
            capacity=3,
            autoscaling_group_arn=TRAINING_GROUP,
        ),
        "autoscaling_group_arns": [TRAINING_GROUP, SERVING_GROUP],
        "database_secret_arn": SECRET_ARN,
        "vpc_id": "vpc-0abc",
        "subnet_ids": ["subnet-private-a", "subnet-private-b"],
        "tags": {"parkbrake:managed": "true", "parkbrake:stack": "dev", "parkbrake:revision": "3f9c2ab"},
        "tenants": ["product", "research"],
        **{key: value for key, value in overrides.items() if key not in TUNED},
    }
    # A row of the settings table is overridden by name, as a field of the args' Tuning.
    tuned = {key: value for key, value in overrides.items() if key in TUNED}
    return GuardrailsArgs(**fields, tuning=Tuning(**tuned))


def build(**overrides: Any) -> OfflineRun:
    args = arguments(**overrides)

    def program() -> None:
        Guardrails("guardrails", args)

    return run_offline(program, stack="dev", region="us-east-1")


@functools.cache
def configured(parked: bool = False) -> OfflineRun:
    """The default arguments' run, built once: tests read it and never change it."""
    return build(parked=parked)


def statements_of(run: OfflineRun, role: str) -> list[dict[str, Any]]:
    policy = json.loads(run.named(ROLE_POLICY, role).inputs["policy"])
    assert policy["Version"] == "2012-10-17"
    return policy["Statement"]


def all_statements(run: OfflineRun) -> list[dict[str, Any]]:
    return [
        statement
        for policy in run.of_type(ROLE_POLICY)
        for statement in json.loads(policy.inputs["policy"])["Statement"]
    ]


def by_sid(statements: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {statement["Sid"]: statement for statement in statements}


def actions(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return {action} if isinstance(action, str) else set(action)


def environment_of(run: OfflineRun, guardrail: str) -> dict[str, str]:
    return run.named(FUNCTION, guardrail).inputs["environment"]["variables"]
