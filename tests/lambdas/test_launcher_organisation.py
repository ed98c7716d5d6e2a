"""A launcher in a member account honours the organisation's park switch: the parameter the hub's
spoke writes there (``/parkbrake/<hub stack>/spoke-<region>/parked``, components/org_spoke_parts.py).

On moto's server, the member account reached through ``sts:AssumeRole`` (moto's multi-account
support: the credentials act in the role's account); the denied read through moto's IAM
enforcement (tests/moto_iam_auth.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from guardrail_fleet import REGION, STACK, create_pool, guardrail_settings, heartbeats, managed_tags
from moto_iam_auth import HUB, reset_auth

from guardrails import names
from guardrails.errors import ParkbrakeError
from lambdas import launcher
from lambdas.aws.assumed import AccountAccess, AccountSessions
from lambdas.aws.environment import ClientFactory
from lambdas.engines import launching

MEMBER = "222222222222"
ORG = "org"  # the organisation's hub stack
SWITCH = names.spoke_park_parameter(ORG, REGION)
NOW = launching.datetime(2025, 3, 1, 1, 0, tzinfo=launching.UTC)


def member_clients(role: str = "admin") -> ClientFactory:
    return AccountSessions().clients(AccountAccess(MEMBER, (f"arn:aws:iam::{MEMBER}:role/{role}",)))


@pytest.fixture
def member(aws: str) -> ClientFactory:
    """The member account with its own stack deployed and unparked, and a pool of three."""
    clients = member_clients()
    create_pool(
        clients("autoscaling", REGION),
        clients("ec2", REGION),
        pool="training",
        instance_type="g5.12xlarge",
        max_size=3,
        group_tags=managed_tags(max_runtime="2h", tenant="research"),
    )
    put(clients, names.park_parameter(STACK), "false")
    return clients


def put(clients: ClientFactory, name: str, value: str) -> None:
    clients("ssm", REGION).put_parameter(Name=name, Value=value, Type="String", Overwrite=True)


def start(clients: ClientFactory) -> dict[str, Any]:
    return launcher.handle(
        {"pool": "training"}, settings=guardrail_settings(), clients=clients, gate=None, now=NOW
    )


def desired(clients: ClientFactory) -> int:
    group = clients("autoscaling", REGION).describe_auto_scaling_groups(
        AutoScalingGroupNames=[names.autoscaling_group(STACK, "training")]
    )["AutoScalingGroups"][0]
    return int(group["DesiredCapacity"])


def test_the_organisation_switch_on_refuses_the_start_naming_it(member: ClientFactory) -> None:
    put(member, SWITCH, "true")
    result = start(member)
    assert result["refused"]["kind"] == "parked"
    assert SWITCH in result["refused"]["reason"]
    assert f"hub stack ({ORG})" in result["refused"]["reason"]
    assert (result["started"], desired(member)) == (0, 0)


@pytest.mark.parametrize(
    "switches",
    [
        {},  # no organisation deploys here
        {SWITCH: "false"},
        {SWITCH: " False\n"},  # written by hand: read as the stack's own switch is
        {names.spoke_park_parameter(ORG, "us-west-2"): "true"},  # another region's switch
        {"/parkbrake/org/spokes": "{}", "/parkbrake/org/spoke-us-east-1/other": "true"},  # not switches
    ],
)
def test_the_start_goes_ahead_when_the_organisation_switch_is_off_or_absent(
    member: ClientFactory, switches: dict[str, str]
) -> None:
    for name, value in switches.items():
        put(member, name, value)
    result = start(member)
    assert (result["refused"], result["started"], desired(member)) == (None, 3, 3)


def test_the_own_switch_still_refuses_first(member: ClientFactory) -> None:
    put(member, names.park_parameter(STACK), "true")
    put(member, SWITCH, "true")
    assert start(member)["refused"]["reason"] == "the stack is parked; unpark it to run the nightly pools"


def test_any_of_two_organisations_switches_on_refuses(member: ClientFactory) -> None:
    put(member, SWITCH, "false")
    put(member, names.spoke_park_parameter("finance", REGION), "true")
    reason = start(member)["refused"]["reason"]
    assert names.spoke_park_parameter("finance", REGION) in reason
    assert SWITCH not in reason


def test_a_switch_that_is_neither_true_nor_false_is_an_error(member: ClientFactory) -> None:
    put(member, SWITCH, "maybe")
    with pytest.raises(ParkbrakeError, match=f"{SWITCH} is 'maybe', neither 'true' nor 'false'"):
        start(member)
    assert desired(member) == 0


def test_many_parameters_under_parkbrake_are_read_through_every_page(member: ClientFactory) -> None:
    for index in range(25):  # GetParametersByPath pages hold at most 10
        put(member, f"/parkbrake/app{index:02}/parked", "false")
    put(member, SWITCH, "true")
    assert start(member)["refused"]["kind"] == "parked"


@contextmanager
def denied_launcher(aws: str, member: ClientFactory) -> Iterator[ClientFactory]:
    """The member's launcher as a role that may do anything but list ``/parkbrake``, with moto's IAM
    enforced; the hub's caller an IAM user allowed to assume it."""
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{HUB}:root"}, "Action": "sts:AssumeRole"}
        ],
    }
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "*", "Resource": "*"},
            {"Effect": "Deny", "Action": "ssm:GetParametersByPath", "Resource": "*"},
        ],
    }
    iam = member("iam", None)
    iam.create_role(RoleName="launcher", AssumeRolePolicyDocument=json.dumps(trust))
    iam.put_role_policy(RoleName="launcher", PolicyName="launch", PolicyDocument=json.dumps(policy))
    hub_iam = boto3.client("iam")
    hub_iam.create_user(UserName="hub")
    assume = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*"}],
    }
    hub_iam.put_user_policy(UserName="hub", PolicyName="assume", PolicyDocument=json.dumps(assume))
    key = hub_iam.create_access_key(UserName="hub")["AccessKey"]
    put(member, SWITCH, "false")
    reset_auth(aws, "0")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
            patch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
            yield member_clients("launcher")
    finally:
        reset_auth(aws, "inf")


def test_an_unreadable_organisation_switch_is_an_error_not_unparked(aws: str, member: ClientFactory) -> None:
    with denied_launcher(aws, member) as launcher_clients, pytest.raises(ParkbrakeError) as raised:
        start(launcher_clients)
    # moto answers SSM's JSON protocol with an XML error here, so botocore names no code: the text is asserted.
    assert str(raised.value).startswith("cannot read the organisation's park switches under /parkbrake: ")
    assert "not authorized to perform: ssm:GetParametersByPath" in str(raised.value)
    assert desired(member) == 0  # read once the enforcement is off again
    assert heartbeats(member) == []
