"""names-fit-aws: the table of AWS's character sets and lengths, over the whole plan and field by field."""

from __future__ import annotations

import functools

import pytest
from policy_resources import resource

from policies.aws_fields import FIELDS, TAG_KEY, TAG_VALUE, problem, values_at
from policies.engine import judge
from policies.rule import PolicyContext
from policies.rules import names_fit_aws
from stacks.config import load_stack_config
from stacks.offline import OfflineRun, RegisteredResource, run_offline
from stacks.platform import build_platform
from tests.conftest import REPO_ROOT


@functools.cache
def planned(stack: str) -> OfflineRun:
    config = load_stack_config(stack, REPO_ROOT)
    return run_offline(lambda: build_platform(config), stack=stack, region=config.region)


def messages(resources: list[RegisteredResource]) -> list[str]:
    return [
        violation.message for violation in judge(names_fit_aws.RULE, resources, PolicyContext()).violations
    ]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_name_description_and_tag_of_the_example_plans_fits(stack: str) -> None:
    run = planned(stack)
    checked = [
        (item.type, path)
        for item in run.resources
        for path_pattern in FIELDS.get(item.type, {})
        for path, value in values_at(item.inputs, path_pattern)
        if isinstance(value, str)
    ]

    assert messages(run.resources) == []
    # Not vacuous: the table reaches most of what the program names.
    assert len(checked) > 80
    assert len({type_token for type_token, _ in checked}) >= 25
    assert sum(1 for item in run.resources for _ in names_fit_aws.declared_tags(item)) > 300


def test_the_apostrophe_ec2_refused_in_a_rule_description_is_caught() -> None:
    rule = resource(
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
        "inference-alb-to-hosts",
        {"description": "inference load balancer to the tasks' dynamic host ports"},
    )

    (found,) = messages([rule])
    assert found.startswith("inference-alb-to-hosts: description: ")
    assert 'EC2 security group rule description (refused: "\'")' in found


@pytest.mark.parametrize(
    ("type_token", "inputs", "expected"),
    [
        ("aws:ec2/securityGroup:SecurityGroup", {"ingress": [{"description": "café"}]},
         "ingress[0].description: 'café' is not accepted"),
        ("aws:lb/loadBalancer:LoadBalancer", {"name": "parkbrake-production-eu-inference"},
         "is 33 characters; a load balancer name takes 1–32"),
        ("aws:lb/targetGroup:TargetGroup", {"name": "-blue"}, "not accepted as a target group name"),
        ("aws:rds/cluster:Cluster", {"finalSnapshotIdentifier": "parkbrake--final"}, "an RDS snapshot identifier"),
        ("aws:lambda/function:Function", {"name": "parkbrake dev reaper"}, "refused: ' '"),
        ("aws:autoscaling/group:Group", {"tags": [{"key": "parkbrake:owner", "value": "ann's team"}]},
         "tags[0]: \"ann's team\" is not accepted as a tag value"),
        ("aws:ec2/launchTemplate:LaunchTemplate",
         {"tagSpecifications": [{"resourceType": "instance", "tags": {"k": "x" * 257}}]},
         "is 257 characters; a tag value takes 0–256"),
        ("aws:sns/topic:Topic", {"tags": {"": "v"}}, "a tag key takes 1–128"),
    ],
)  # fmt: skip
def test_each_kind_of_field_is_judged(type_token: str, inputs: dict[str, object], expected: str) -> None:
    (found,) = messages([resource(type_token, "thing", inputs)])
    assert expected in found


def test_unknown_values_are_not_judged() -> None:
    """During a real preview an output may still be unknown; only strings are judged."""
    assert (
        messages([resource("aws:lb/loadBalancer:LoadBalancer", "x", {"name": None, "tags": {"a": 1}})]) == []
    )
    assert problem(TAG_KEY, "parkbrake:managed") is None
    assert problem(TAG_VALUE, "") is None
