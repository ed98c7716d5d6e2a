"""spokes-forward-and-sweep over what the real hub program registers (both spoke forms, both sweep modes),
and over the same resources with one piece of a spoke taken away or changed, as a broken program would
register them."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from policies.registry import RULES
from policies.rule import PolicyContext
from policies.rules.spokes_forward_and_sweep import RULE, spoke_problems
from stacks.offline import RegisteredResource
from tests.components.org_build import ROLE, ROLE_POLICY, TARGET, org_run_of
from tests.components.org_build import RULE as EVENT_RULE

CONTEXT = PolicyContext()
SPOKE = "spoke-222222222222-us-west-2"
STACK_SET = "aws:cloudformation/stackSet:StackSet"


def messages(resources: list[RegisteredResource]) -> list[str]:
    return [violation.message for violation in spoke_problems(resources, CONTEXT)]


def without(resources: list[RegisteredResource], type_token: str, name: str) -> list[RegisteredResource]:
    kept = [r for r in resources if not (r.type == type_token and r.name == name)]
    assert len(kept) == len(resources) - 1
    return kept


def changed(
    resources: list[RegisteredResource], type_token: str, name: str, **inputs: Any
) -> list[RegisteredResource]:
    return [
        replace(r, inputs={**r.inputs, **inputs}) if (r.type, r.name) == (type_token, name) else r
        for r in resources
    ]


def test_the_rule_is_registered_and_mandatory() -> None:
    assert RULE in RULES
    assert RULE.enforcement == "mandatory"


@pytest.mark.parametrize("spokes", ["stacks", "stackset"])
@pytest.mark.parametrize("sweep", ["central", "spoke"])
def test_the_hub_program_passes_in_every_form_and_mode(spokes: str, sweep: str) -> None:
    assert messages(org_run_of(spokes, sweep).resources) == []


def test_a_stack_without_spokes_is_not_judged() -> None:
    assert messages([]) == []


def test_a_spoke_missing_a_forwarding_rule_is_refused_by_name() -> None:
    resources = without(org_run_of().resources, EVENT_RULE, f"{SPOKE}-forward-tag-changes")
    assert messages(resources) == [
        "spoke 222222222222/us-west-2: no rule forwards 'Tag Change on Resource' events; the hub never hears of them"
    ]


def test_a_forwarding_target_elsewhere_or_without_its_role_is_refused() -> None:
    resources = org_run_of().resources
    name = f"{SPOKE}-forward-state-changes-hub-bus"
    elsewhere = changed(
        resources, TARGET, name, arn="arn:aws:events:us-east-1:111111111111:event-bus/default"
    )
    assert messages(elsewhere) == [
        "spoke 222222222222/us-west-2: the 'EC2 Instance State-change Notification' rule has no target on the "
        "hub bus parkbrake-org-hub"
    ]
    no_role = [
        replace(r, inputs={k: v for k, v in r.inputs.items() if k != "roleArn"}) if r.name == name else r
        for r in resources
    ]
    assert messages(no_role) == [
        "spoke 222222222222/us-west-2: the 'EC2 Instance State-change Notification' rule's hub target has no "
        "role; a bus that admits the organisation refuses its events"
    ]


def test_central_sweep_needs_the_spoke_role_with_stop() -> None:
    resources = org_run_of().resources
    assert messages(without(resources, ROLE, f"{SPOKE}-spoke-role")) == [
        "spoke 222222222222/us-west-2: sweep: central, but no spoke role 'parkbrake-org-spoke-us-west-2' for the "
        "hub's sweep to assume"
    ]
    read_only = json.dumps(
        {"Statement": [{"Effect": "Allow", "Action": ["ec2:DescribeInstances"], "Resource": "*"}]}
    )
    assert messages(changed(resources, ROLE_POLICY, f"{SPOKE}-spoke-role", policy=read_only)) == [
        "spoke 222222222222/us-west-2: the spoke role 'parkbrake-org-spoke-us-west-2' does not allow "
        "ec2:StopInstances; the central sweep cannot stop a host"
    ]


def test_spoke_sweep_needs_its_function_and_its_schedule() -> None:
    resources = org_run_of("stacks", "spoke").resources
    assert messages(without(resources, EVENT_RULE, f"{SPOKE}-sweep-clock")) == [
        "spoke 222222222222/us-west-2: sweep: spoke, but no schedule invokes the sweep"
    ]
    no_function = without(resources, "aws:lambda/function:Function", f"{SPOKE}-sweep")
    assert messages(no_function) == [
        "spoke 222222222222/us-west-2: sweep: spoke, but no sweep function "
        "'parkbrake-org-spoke-us-west-2-reaper'; its hosts are never swept"
    ]


def test_a_stack_sets_template_is_judged_as_a_spoke() -> None:
    resources = org_run_of("stackset").resources
    (stack_set,) = [r for r in resources if r.type == STACK_SET]
    template = json.loads(stack_set.inputs["templateBody"])
    del template["Resources"]["ForwardStateChanges"]
    policy = template["Resources"]["SpokeRole"]["Properties"]["Policies"][0]["PolicyDocument"]
    policy["Statement"] = [s for s in policy["Statement"] if s["Sid"] != "StopManagedHosts"]
    broken = changed(resources, STACK_SET, stack_set.name, templateBody=json.dumps(template))
    # sweep: central, so no deadline rule of the spoke's own is left to match state changes either.
    assert messages(broken) == [
        "StackSet parkbrake-org-spokes: no rule forwards 'EC2 Instance State-change Notification' events; "
        "the hub never hears of them",
        "StackSet parkbrake-org-spokes: the spoke role 'parkbrake-org-spoke-${AWS::Region}' does not allow "
        "ec2:StopInstances; the central sweep cannot stop a host",
    ]
