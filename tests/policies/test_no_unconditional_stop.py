"""no-unconditional-stop: IAM grants of StopInstances/TerminateInstances on every instance."""

from __future__ import annotations

import json

import pytest
from policy_resources import compliant_stack, reaper_policy_document, reaper_role_policy, replacing, resource

from policies.engine import judge
from policies.rule import PolicyContext
from policies.rules import no_unconditional_stop
from stacks.offline import RegisteredResource


def messages(resources: list[RegisteredResource]) -> list[str]:
    return [
        violation.message
        for violation in judge(no_unconditional_stop.RULE, resources, PolicyContext()).violations
    ]


def test_the_reapers_tag_conditioned_grant_passes() -> None:
    assert messages(compliant_stack()) == []


@pytest.mark.parametrize(
    "changes",
    [
        {"Condition": None},
        {"Condition": None, "Action": "ec2:*"},
        {"Condition": None, "Action": "*"},
        {"Condition": None, "Action": ["ec2:Describe*", "ec2:Stop*"]},
        {"Condition": None, "Action": "EC2:terminateinstances"},
        {"Condition": None, "Action": "ec2:*Instances"},
        {"Condition": None, "Resource": "arn:aws:ec2:us-east-1:123456789012:instance/*"},
        {"Condition": None, "Resource": "arn:aws:ec2:*:*:instance/i-?????????????????"},
        {"Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}},
        {"Condition": None, "Action": None, "NotAction": ["iam:*"]},
        {"Condition": None, "Resource": None, "NotResource": "arn:aws:ec2:*:*:instance/i-0abc"},
        # The bypasses the old rule let through: any tag key under any operator counted.
        {"Condition": {"StringNotEquals": {"aws:ResourceTag/parkbrake:managed": "true"}}},
        {"Condition": {"Null": {"aws:ResourceTag/Name": "false"}}},
        {"Condition": {"StringLike": {"aws:ResourceTag/parkbrake:managed": "*"}}},
        {"Condition": {"StringEqualsIfExists": {"aws:ResourceTag/parkbrake:managed": "true"}}},
        {"Condition": {"StringEquals": {"ec2:ResourceTag/parkbrake:managed": "true"}}},
        {"Condition": {"StringEquals": {"aws:ResourceTag/parkbrake:pool": "training"}}},
        {"Condition": {"StringEquals": {"aws:ResourceTag/parkbrake:managed": ["true", "false"]}}},
        {"Condition": {"StringEquals": {"aws:ResourceTag/parkbrake:managed": "yes"}}},
        {"Condition": None, "Resource": "arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"},
        {"Condition": None, "Action": None, "NotAction": ["ec2:*"]},
        {"Condition": None, "Action": "autoscaling:TerminateInstanceInAutoScalingGroup",
         "Resource": "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*"},
    ],
    ids=[
        "no-condition", "ec2-star", "star", "stop-star", "case-insensitive", "star-instances",
        "every-instance-arn", "question-marks", "non-tag-condition", "not-action", "not-resource",
        "string-not-equals", "null-name", "string-like", "if-exists", "ec2-prefix", "other-tag",
        "any-of-values", "other-value", "one-instance", "not-action-ec2", "leave-any-group",
    ],
)  # fmt: skip
def test_unconditional_grants_are_violations(changes: dict[str, object]) -> None:
    statement = json.loads(reaper_policy_document())["Statement"][0]
    for key, value in changes.items():
        if value is None:
            statement.pop(key, None)
        else:
            statement[key] = value
    document = json.dumps({"Version": "2012-10-17", "Statement": statement})  # a single statement, unlisted
    found = messages(replacing(compliant_stack(), reaper_role_policy(document)))
    assert len(found) == 1, found
    assert "statement StopManagedHosts allows " in found[0]
    assert 'without exactly the condition StringEquals aws:ResourceTag/parkbrake:managed = "true"' in found[0]


@pytest.mark.parametrize(
    "changes",
    [
        {},  # the tag condition itself
        # A further condition is ANDed: it only narrows the grant (a host stopping itself, say).
        {"Condition": {"StringEquals": {"aws:ResourceTag/parkbrake:managed": "true"},
                       "ArnEquals": {"ec2:SourceInstanceARN": "arn:aws:ec2:us-east-1:1:instance/i-1"}}},
        {"Condition": {"StringEquals": {"aws:resourcetag/parkbrake:managed": ["true"]}}},
        {"Condition": None, "Effect": "Deny"},
        {"Condition": None, "Action": ["ec2:StartInstances", "ec2:Describe*"]},
        {"Condition": None, "Action": None, "NotAction": ["ec2:*", "autoscaling:*"]},
        {"Condition": None, "Resource": None, "NotResource": "arn:aws:ec2:*:*:instance/*"},
    ],
    ids=[
        "managed-tag",
        "managed-tag-and-more",
        "key-case-and-list",
        "deny",
        "start-only",
        "not-action-ec2-and-autoscaling",
        "not-resource-all",
    ],
)  # fmt: skip
def test_limited_grants_pass(changes: dict[str, object]) -> None:
    statement = json.loads(reaper_policy_document())["Statement"][0]
    for key, value in changes.items():
        if value is None:
            statement.pop(key, None)
        else:
            statement[key] = value
    document = json.dumps({"Version": "2012-10-17", "Statement": [statement]})
    assert messages([reaper_role_policy(document)]) == []


def test_every_kind_of_policy_holder_is_read() -> None:
    unconditional = reaper_policy_document(Condition={})
    holders = [
        resource("aws:iam/policy:Policy", "managed", {"policy": unconditional}),
        resource("aws:iam/userPolicy:UserPolicy", "user", {"policy": json.loads(unconditional)}),
        resource(
            "aws:iam/role:Role", "role", {"inlinePolicies": [{"name": "stop", "policy": unconditional}]}
        ),
        resource(
            "aws:iam/role:Role",
            "admin-role",
            {"managedPolicyArns": ["arn:aws:iam::aws:policy/AdministratorAccess"]},
        ),
        resource(
            "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
            "ec2-full",
            {"role": "r", "policyArn": "arn:aws:iam::aws:policy/AmazonEC2FullAccess"},
        ),
    ]
    found = judge(no_unconditional_stop.RULE, holders, PolicyContext()).violations
    # One each, in the engine's (resource, message) order.
    assert [violation.resource for violation in found] == sorted(holder.urn for holder in holders)
    message_of = {violation.resource: violation.message for violation in found}
    assert "inline policy stop statement StopManagedHosts allows" in message_of[holders[2].urn]
    assert message_of[holders[3].urn].startswith("attaches arn:aws:iam::aws:policy/AdministratorAccess")


def test_narrow_managed_policies_may_be_attached() -> None:
    attachment = resource(
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        "ssm",
        {"role": "r", "policyArn": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"},
    )
    assert messages([attachment]) == []


def test_a_policy_that_is_not_json_cannot_pass() -> None:
    assert messages([reaper_role_policy("{not json")]) == [
        "the policy is not valid JSON, so it cannot be shown to be safe"
    ]


def test_each_offending_statement_is_reported() -> None:
    statements = [
        {"Effect": "Allow", "Action": "ec2:StopInstances", "Resource": "*"},
        {"Effect": "Allow", "Action": "ec2:DescribeInstances", "Resource": "*"},
        {"Sid": "Terminate", "Effect": "Allow", "Action": "ec2:TerminateInstances", "Resource": ["*"]},
    ]
    found = messages([reaper_role_policy(json.dumps({"Statement": statements}))])
    assert [message.split(" allows ")[0] for message in found] == [
        "the policy statement #0",
        "the policy statement Terminate",
    ]
