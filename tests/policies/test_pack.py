"""The Pulumi adapter, in process: real ``PolicyResource``s (props behind the SDK's unknown-checking proxy)
handed to each policy's validate function, as the analyzer hands them during ``pulumi preview``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from policy_resources import (
    STACK_URN,
    compliant_stack,
    gpu_group,
    gpu_launch_template,
    reaper_role_policy,
    replacing,
    with_inputs,
)
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UNKNOWN_ARRAY_VALUE, UnknownValueError, unknown_checking_proxy

from policies.engine import evaluate
from policies.pack import SETTINGS, pack_policies
from policies.registry import RULES
from policies.rule import PolicyContext
from stacks.offline import RegisteredResource

Reports = list[tuple[str, str | None]]


def policy_resource(resource: RegisteredResource, parent: PolicyResource | None = None) -> PolicyResource:
    """What the analyzer builds: JSON-shaped props (numbers as floats) behind the proxy."""
    props = unknown_checking_proxy(json.loads(json.dumps(resource.inputs)))
    options = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], resource.parent)
    return PolicyResource(resource.type, props, resource.urn, resource.name, options, None, parent, [], {})


def policies_by_name() -> dict[str, StackValidationPolicy]:
    return {policy.name: policy for policy in pack_policies()}  # type: ignore[misc]


def validate(
    policy_name: str, resources: list[RegisteredResource], config: dict[str, Any] | None = None
) -> Reports:
    reports: Reports = []
    args = StackValidationArgs([policy_resource(resource) for resource in resources], config)
    policies_by_name()[policy_name].validate(args, lambda message, urn=None: reports.append((message, urn)))
    return reports


def test_the_pack_has_one_stack_policy_per_rule_with_its_enforcement_and_settings() -> None:
    policies = pack_policies()
    assert [policy.name for policy in policies] == [rule.name for rule in RULES]
    for policy, rule in zip(policies, RULES, strict=True):
        assert isinstance(policy, StackValidationPolicy)
        assert policy.description == rule.description
        assert policy.enforcement_level == EnforcementLevel(rule.enforcement)
        keys = set(policy.config_schema.properties) if policy.config_schema else set()
        assert keys == {SETTINGS[setting].key for setting in rule.settings}


def test_a_compliant_stack_raises_nothing_through_the_pack() -> None:
    for rule in RULES:
        assert validate(rule.name, compliant_stack()) == [], rule.name


def test_the_pack_reports_exactly_what_plan_reports() -> None:
    broken = replacing(
        compliant_stack(),
        gpu_group(max_size=12.0),
        with_inputs(
            gpu_launch_template(), instanceInitiatedShutdownBehavior=None, instanceType="p9.96xlarge"
        ),
        reaper_role_policy(
            json.dumps({"Statement": {"Effect": "Allow", "Action": "ec2:*", "Resource": "*"}})
        ),
    )
    verdicts = evaluate(broken, PolicyContext())
    assert sum(len(verdict.violations) for verdict in verdicts) >= 4
    for verdict in verdicts:
        expected = [(violation.message, violation.resource) for violation in verdict.violations]
        assert validate(verdict.policy, broken) == expected, verdict.policy


def test_policy_config_overrides_the_defaults() -> None:
    stack = compliant_stack()  # a pool of max 2, g5.12xlarge hosts capped at 4h
    assert validate("gpu-pool-size-ceiling", stack, {"maxPoolSize": 1.0}) == [
        (
            "maxSize 2 is above the GPU pool ceiling of 1; lower it or raise the ceiling deliberately",
            gpu_group().urn,
        )
    ]
    assert validate("instance-types-allowed", stack, {"allowedInstanceTypes": ["g6.xlarge"]})[0][0] == (
        "instance type g5.12xlarge is not allowed; allowed: g6.xlarge"
    )
    assert (
        "longer than the ceiling of 3h"
        in validate("gpu-hosts-have-a-cap", stack, {"maxRuntimeCeiling": "3h"})[0][0]
    )
    assert validate("required-tags", stack, {"requiredTags": ["team"]})[0][0] == "its tags lack team"


def test_a_budget_in_the_pack_config_is_checked_against_the_priced_resources() -> None:
    # One g5.12xlarge always on: 5.672 $/h × 730 h = 4,140.56 $, priced from the proxied resources.
    stack = [gpu_launch_template(), with_inputs(gpu_group(), desiredCapacity=1.0, minSize=1.0)]
    assert validate("cost-within-budgets", stack, {"tenantBudgetUsd": 5000}) == []
    assert validate("cost-within-budgets", stack, {"tenantBudgetUsd": 4000.0}) == [
        (
            "the estimated monthly cost unparked, $4,140.56, is above the tenants' budgets of $4,000.00 by $140.56",
            STACK_URN,
        )
    ]


def test_every_bad_config_value_is_reported_with_its_path_and_nothing_is_judged() -> None:
    reports = validate(
        "required-tags", [with_inputs(gpu_group(), tags=None)], {"requiredTags": "team", "gpuHostTags": [1]}
    )
    assert reports == [
        (
            "policy pack config has problems:\n"
            "  required-tags.requiredTags: 'team' is not a list of strings\n"
            "  required-tags.gpuHostTags: [1] is not a list of strings",
            None,
        )
    ]


@pytest.mark.parametrize(
    ("policy", "config", "problem"),
    [
        ("gpu-pool-size-ceiling", {"maxPoolSize": 2.5}, "gpu-pool-size-ceiling.maxPoolSize: 2.5 is not a positive whole number"),
        ("gpu-pool-size-ceiling", {"maxPoolSize": 0}, "0 is not a positive whole number"),
        ("cost-within-budgets", {"tenantBudgetUsd": "lots"}, "'lots' is not a positive amount of US dollars"),
        ("cost-within-budgets", {"tenantBudgetUsd": -5}, "-5 is not a positive amount of US dollars"),
        ("gpu-hosts-have-a-cap", {"maxRuntimeCeiling": "a day"}, "'a day' is not a duration"),
    ],
)  # fmt: skip
def test_bad_config_values(policy: str, config: dict[str, Any], problem: str) -> None:
    ((message, urn),) = validate(policy, compliant_stack(), config)
    assert problem in message
    assert urn is None


def test_a_value_unknown_during_preview_is_left_to_the_sdk_not_reported_as_a_violation() -> None:
    # The SDK turns UnknownValueError into "can't run policy during preview" (advisory) and runs the
    # policy again once the value is known; a false mandatory violation would block every first preview.
    template = gpu_launch_template()
    unknown = RegisteredResource(
        template.type,
        template.name,
        template.urn,
        template.parent,
        True,
        {**template.inputs, "tagSpecifications": UNKNOWN_ARRAY_VALUE},
    )
    with pytest.raises(UnknownValueError):
        validate("gpu-hosts-have-a-cap", [unknown])


@pytest.mark.parametrize("linked_by", ["parent", "options"])
def test_a_resources_parent_comes_from_its_parent_or_its_options(linked_by: str) -> None:
    # A pool's group is known as a GPU pool through its sibling template however the engine links parents.
    component = policy_resource(
        RegisteredResource("parkbrake:aws:GpuPool", "training", gpu_group().parent or "", None, False, {})
    )
    parent = component if linked_by == "parent" else None
    group = gpu_group(max_size=9.0, group_tags={})
    resources = [component, policy_resource(gpu_launch_template(), parent), policy_resource(group, parent)]
    if linked_by == "parent":
        for resource in resources[1:]:
            resource.opts.parent = None
    reports: Reports = []
    policies_by_name()["gpu-pool-size-ceiling"].validate(
        StackValidationArgs(resources), lambda message, urn=None: reports.append((message, urn))
    )
    assert [urn for _, urn in reports] == [group.urn]
