"""The IAM documents as pure functions: one per guardrail Lambda, each passing the pack's stop rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from components.guardrail_lambdas import FUNCTIONS
from components.iam_policies import (
    GUARDRAIL_POLICIES,
    Grants,
    HostGrants,
    host_policy,
    scheduler_policy,
)
from policies.rules.no_unconditional_stop import document_problems

GRANTS = Grants(
    partition="aws",
    account_id="123456789012",
    region="eu-west-1",
    stack="prod",
    topic_arn="arn:aws:sns:eu-west-1:123456789012:alarms",
    scheduler_role_arn="arn:aws:iam::123456789012:role/parkbrake-prod-scheduler",
    autoscaling_group_arns=(
        "arn:aws:autoscaling:eu-west-1:123456789012:autoScalingGroup:1:autoScalingGroupName/g",
    ),
    nightly_group_arn="arn:aws:autoscaling:eu-west-1:123456789012:autoScalingGroup:1:autoScalingGroupName/g",
    database_secret_arn="arn:aws:secretsmanager:eu-west-1:123456789012:secret:db",
)


def sids(document: dict[str, object]) -> set[str]:
    return {statement["Sid"] for statement in document["Statement"]}  # type: ignore[attr-defined,index]


def test_one_policy_function_per_deployed_guardrail() -> None:
    assert set(GUARDRAIL_POLICIES) == {function.guardrail for function in FUNCTIONS}


@pytest.mark.parametrize("guardrail", sorted(GUARDRAIL_POLICIES))
def test_every_guardrail_policy_is_valid_and_passes_the_stop_rule(guardrail: str) -> None:
    document = GUARDRAIL_POLICIES[guardrail](GRANTS)

    assert document["Version"] == "2012-10-17"
    assert {"OwnLogs", "Heartbeat"} <= sids(document)
    # every guardrail publishes: its findings (the launcher: a group left short of capacity)
    assert "Notify" in sids(document)
    assert list(document_problems(document, guardrail)) == []
    logs = next(s for s in document["Statement"] if s["Sid"] == "OwnLogs")
    assert (
        logs["Resource"]
        == f"arn:aws:logs:eu-west-1:123456789012:log-group:/aws/lambda/parkbrake-prod-{guardrail}:*"
    )


def test_what_each_guardrail_may_do_beyond_the_basics() -> None:
    basics = {"OwnLogs", "Heartbeat", "Notify", "DeadLetters"}
    stop_path = {
        "Describe",
        "StopManagedInstancesOnly",
        "TerminateManagedSpotInstancesOnly",
        "ShrinkManagedGroupsOnly",
    }
    deadlines = {"DeadlineSchedulesOnly", "PassSchedulerRole"}
    rotation = {"DescribeGroups", "ReplaceInManagedGroupsOnly", "MarkRotatingHostsOnly"}

    sweep = {"ListStacks", "RememberNotices", "AdoptHostsOfNoStack"}
    stopped = {"DescribeVolumesAndSnapshots"}  # terminate_stopped adds the snapshot grants (below)
    relay = {"RelayDecisions"}  # with a ledger, the decisions go to the meter over EventBridge
    assert (
        sids(GUARDRAIL_POLICIES["reaper"](GRANTS)) - basics
        == stop_path | deadlines | rotation | sweep | stopped | relay
    )
    assert (
        sids(GUARDRAIL_POLICIES["deadline"](GRANTS)) - basics
        == stop_path | deadlines | rotation | sweep | relay
    )
    ledger = {"ReadDatabaseSecret"}
    # The meter checks the changed tenants' budgets at once: the stop path and the crossing checks.
    assert (
        sids(GUARDRAIL_POLICIES["meter"](GRANTS)) - basics
        == {"DescribeHosts"} | stop_path | deadlines | ledger
    )
    assert sids(GUARDRAIL_POLICIES["budget"](GRANTS)) - basics == stop_path | deadlines | ledger
    assert sids(GUARDRAIL_POLICIES["reconciler"](GRANTS)) - basics == {"DescribeHosts", "ReadDatabaseSecret"}
    # An admission re-arms the tenant's budget crossing check.
    # An organisation's park switches in the account: listed under /parkbrake (lambdas.engines.launching).
    launcher = {
        "ReadParkStateAndClosedDays",
        "ReadOrganisationParkSwitches",
        "DescribePool",
        "StartNightlyPool",
        "ReadDatabaseSecret",
    }
    assert sids(GUARDRAIL_POLICIES["launcher"](GRANTS)) - basics == launcher | deadlines


def test_scheduler_may_invoke_exactly_the_functions_given() -> None:
    arns = [GRANTS.function_arn("reaper"), GRANTS.function_arn("launcher")]

    (statement,) = scheduler_policy(arns)["Statement"]
    assert statement["Action"] == ["lambda:InvokeFunction"]
    assert statement["Resource"] == [
        "arn:aws:lambda:eu-west-1:123456789012:function:parkbrake-prod-reaper",
        "arn:aws:lambda:eu-west-1:123456789012:function:parkbrake-prod-launcher",
    ]


def test_a_host_joins_only_its_own_cluster_and_reads_only_its_tools() -> None:
    document = host_policy(
        HostGrants(
            partition="aws",
            account_id="123456789012",
            region="eu-west-1",
            autoscaling_group_arn=GRANTS.nightly_group_arn or "",
            ecs_cluster_name="parkbrake-prod",
            tools_object_arn="arn:aws:s3:::tools-bucket/host-tools.tar.gz",
        )
    )

    grants = {statement["Sid"]: statement for statement in document["Statement"]}
    assert grants["JoinOwnCluster"]["Resource"] == "arn:aws:ecs:eu-west-1:123456789012:cluster/parkbrake-prod"
    assert grants["ReadHostTools"] == {
        "Sid": "ReadHostTools",
        "Effect": "Allow",
        "Action": ["s3:GetObject"],
        "Resource": "arn:aws:s3:::tools-bucket/host-tools.tar.gz",
    }
    assert list(document_problems(document, "host")) == []


def test_terminate_stopped_lets_the_reaper_snapshot_managed_volumes_only() -> None:
    grants = replace(GRANTS, terminate_stopped=True)
    statements = {
        statement["Sid"]: statement for statement in GUARDRAIL_POLICIES["reaper"](grants)["Statement"]
    }

    volumes = statements["SnapshotManagedVolumesOnly"]
    assert (volumes["Action"], volumes["Resource"], volumes["Condition"]) == (
        ["ec2:CreateSnapshot"],
        f"arn:aws:ec2:{GRANTS.region}:{GRANTS.account_id}:volume/*",
        {
            "StringEquals": {
                "aws:ResourceTag/parkbrake:managed": "true",
                "aws:ResourceTag/parkbrake:stack": "prod",
            }
        },
    )
    own = {"aws:RequestTag/parkbrake:managed": "true", "aws:RequestTag/parkbrake:stack": "prod"}
    snapshots = statements["CreateManagedSnapshotsOnly"]
    assert (snapshots["Resource"], snapshots["Condition"]) == (
        f"arn:aws:ec2:{GRANTS.region}::snapshot/*",
        {"StringEquals": own},
    )
    tagging = statements["TagSnapshotsAsTheyAreCreated"]
    assert tagging["Condition"] == {"StringEquals": {"ec2:CreateAction": "CreateSnapshot", **own}}
    retire = statements["RetireManagedInstancesOnly"]
    assert (retire["Action"], retire["Condition"]) == (["ec2:TerminateInstances"], volumes["Condition"])
    for guardrail in ("deadline", "meter", "budget", "launcher"):
        assert "SnapshotManagedVolumesOnly" not in {
            statement["Sid"] for statement in GUARDRAIL_POLICIES[guardrail](grants)["Statement"]
        }
