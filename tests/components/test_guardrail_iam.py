"""The guardrails' least-privilege IAM under the mock engine: stop grants need the managed tag, each role
reaches only its own pools, parameters, schedules and functions."""

from __future__ import annotations

import json

import pytest

from tests.components.guardrails_build import (
    ACCOUNT,
    BUDGET_ARN,
    FUNCTION,
    LAUNCHER_ARN,
    MANAGED_CONDITION,
    REAPER_ARN,
    ROLE,
    SECRET_ARN,
    SERVING_GROUP,
    SPOT_CONDITION,
    STOP_ACTIONS,
    TRAINING_GROUP,
    actions,
    all_statements,
    by_sid,
    configured,
    statements_of,
)


def test_every_stop_or_terminate_grant_requires_the_managed_tag() -> None:
    statements = [
        statement for statement in all_statements(configured()) if actions(statement) & STOP_ACTIONS
    ]

    assert statements  # the reaper, the budget and the launcher can act
    for statement in statements:
        # The stack's own managed hosts; termination only of spot hosts (the stop path's only use of it).
        expected = SPOT_CONDITION if actions(statement) == {"ec2:TerminateInstances"} else MANAGED_CONDITION
        assert statement["Condition"] == expected
        assert statement["Resource"] != "*"
    for statement in all_statements(configured()):
        assert not any(action.endswith(":*") or action == "*" for action in actions(statement))


def test_reaper_may_stop_instances_and_shrink_only_the_stack_pools() -> None:
    grants = by_sid(statements_of(configured(), "reaper"))

    assert grants["StopManagedInstancesOnly"]["Resource"] == f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/*"
    assert grants["ShrinkManagedGroupsOnly"]["Resource"] == [TRAINING_GROUP, SERVING_GROUP]
    assert actions(grants["Describe"]) == {"ec2:DescribeInstances"}
    assert actions(grants["ShrinkManagedGroupsOnly"]) == {"autoscaling:TerminateInstanceInAutoScalingGroup"}
    assert grants["Notify"]["Resource"] == "arn:aws:sns:us-east-1:123456789012:alarms"
    assert grants["Heartbeat"]["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": "Parkbrake/Guardrails"}
    }
    assert grants["OwnLogs"]["Resource"] == (
        f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:/aws/lambda/parkbrake-dev-reaper:*"
    )
    assert "ReadDatabaseSecret" not in grants


@pytest.mark.parametrize(
    ("guardrail", "disarms"), [("deadline", {"scheduler:DeleteSchedule"}), ("reaper", set())]
)
def test_deadline_schedules_only_in_their_group_passing_only_the_scheduler_role(
    guardrail: str, disarms: set[str]
) -> None:
    grants = by_sid(statements_of(configured(), guardrail))

    schedules = grants["DeadlineSchedulesOnly"]
    # only the deadline disarms (deletes) a schedule; the reaper arms and moves them
    assert actions(schedules) == {"scheduler:CreateSchedule", "scheduler:UpdateSchedule", *disarms}
    deadline_group = f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule/parkbrake-dev-deadlines/*"
    assert schedules["Resource"] == deadline_group
    assert grants["PassSchedulerRole"]["Resource"] == "arn:aws:iam:us-east-1:123456789012:scheduler"
    assert grants["PassSchedulerRole"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}
    }


def test_only_the_functions_that_act_through_the_stop_path_may_stop_hosts() -> None:
    run = configured()
    stop_path = STOP_ACTIONS - {"autoscaling:SetDesiredCapacity"}

    may_stop = {
        function.name
        for function in run.of_type(FUNCTION)
        if any(actions(statement) & stop_path for statement in statements_of(run, function.name))
    }
    # The deadline stops a host already past its cap when its event arrives; the budget enforces budgets,
    # and so does the meter for the tenants whose usage an event changed (lambdas.engines.budgeting, at once).
    assert may_stop == {"reaper", "deadline", "budget", "meter"}
    assert "ShrinkManagedGroupsOnly" not in by_sid(statements_of(run, "launcher"))


def test_launcher_reads_only_the_park_and_closed_days_parameters_and_starts_only_the_nightly_pool() -> None:
    grants = by_sid(statements_of(configured(), "launcher"))

    assert grants["ReadParkStateAndClosedDays"]["Resource"] == [
        f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/parkbrake/dev/parked",
        f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/parkbrake/dev/closed-days",
    ]
    assert actions(grants["ReadParkStateAndClosedDays"]) == {"ssm:GetParameter"}
    assert actions(grants["DescribePool"]) == {
        "autoscaling:DescribeAutoScalingGroups",
        "autoscaling:DescribeScalingActivities",
        "ec2:DescribeLaunchTemplateVersions",
    }
    assert (actions(grants["Notify"]), grants["Notify"]["Resource"]) == (
        {"sns:Publish"},
        "arn:aws:sns:us-east-1:123456789012:alarms",
    )
    start = grants["StartNightlyPool"]
    assert (actions(start), start["Resource"], start["Condition"]) == (
        {"autoscaling:SetDesiredCapacity"},
        TRAINING_GROUP,
        MANAGED_CONDITION,
    )
    assert grants["ReadDatabaseSecret"]["Resource"] == SECRET_ARN


def test_scheduler_role_may_invoke_only_the_reaper_the_launcher_and_the_budget() -> None:
    run = configured()

    invoke, dead_letters = statements_of(run, "scheduler")
    assert actions(invoke) == {"lambda:InvokeFunction"}
    assert actions(dead_letters) == {"sqs:SendMessage"}  # their queues: test_guardrail_alerting
    assert invoke["Resource"] == [REAPER_ARN, LAUNCHER_ARN, BUDGET_ARN]
    trust = json.loads(run.named(ROLE, "scheduler").inputs["assumeRolePolicy"])["Statement"]
    assert trust == [
        {
            "Effect": "Allow",
            "Principal": {"Service": "scheduler.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"aws:SourceAccount": ACCOUNT}},
        }
    ]
