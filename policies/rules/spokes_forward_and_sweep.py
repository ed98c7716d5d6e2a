"""Every spoke of an organisation forwards its hosts' events to the hub bus and can be swept.

A spoke is either a ``parkbrake:org:Spoke`` component (one per member account and region, its
resources its children) or the template of a StackSet named ``parkbrake-<stack>-spokes`` (deployed
by CloudFormation to the OUs). Both are read into one view here, so one check judges both forms:

- forwarding: a rule matching EC2's ``EC2 Instance State-change Notification`` and one matching
  ``Tag Change on Resource``, each with a target that is the hub bus
  (``:event-bus/parkbrake-<stack>-hub``) and a role, without which an event bus that admits an
  organisation refuses the events (botocore ``events/2015-10-07/service-2.json``, ``PutTargets``);
- the sweep, by the organisation's mode (the hub's ``/parkbrake/<stack>/spokes`` parameter, central
  when it is not found): central, the spoke role ``parkbrake-<stack>-spoke-<region>`` granting
  ``ec2:StopInstances``; spoke, the reaper function and a rule with a schedule that targets it.

The event detail types are AWS's (EventBridge User Guide, the EC2 and tag-change event references);
components/org_spoke_parts.py declares the same, and tests/policies/test_spokes_rule.py checks that
both forms of a complete spoke pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from guardrails import names
from policies.resources import LAMBDA_FUNCTION, items, mapping, text
from policies.rule import PolicyContext, PolicyRule, ResourceView, Violation, stack_name

SPOKE = "parkbrake:org:Spoke"
STACK_SET = "aws:cloudformation/stackSet:StackSet"
EVENT_RULE = "aws:cloudwatch/eventRule:EventRule"
EVENT_TARGET = "aws:cloudwatch/eventTarget:EventTarget"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
SSM_PARAMETER = "aws:ssm/parameter:Parameter"
FORWARDED = {
    "EC2 Instance State-change Notification": "aws.ec2",
    "Tag Change on Resource": "aws.tag",
}
STOP = "ec2:StopInstances"
# stacks/org_program.py names a spoke component spoke-<account>-<region>.
SPOKE_NAME = re.compile(r"spoke-(?P<account>\d{12})-(?P<region>.+)")
REGION_PSEUDO = "${AWS::Region}"


@dataclass
class Target:
    arn: str
    has_role: bool


@dataclass
class Rule:
    pattern: Mapping[str, Any]
    schedule: str | None
    targets: list[Target] = field(default_factory=list)


@dataclass
class SpokeView:
    """What one spoke declares, whichever its form: where to report it and what it holds."""

    urn: str
    label: str
    region: str
    rules: list[Rule] = field(default_factory=list)
    roles: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # name: its policy document
    functions: list[str] = field(default_factory=list)


def _json(value: object) -> Mapping[str, Any]:
    if isinstance(value, str):
        try:
            return mapping(json.loads(value))
        except ValueError:
            return {}
    return mapping(value)


def _component_spoke(spoke: ResourceView, children: Sequence[ResourceView]) -> SpokeView:
    match = SPOKE_NAME.fullmatch(spoke.name)
    account, region = (match["account"], match["region"]) if match else ("?", "?")
    view = SpokeView(spoke.urn, f"spoke {account}/{region}", region)
    targets: dict[str, list[Target]] = {}
    for child in children:
        if child.type == EVENT_TARGET:
            target = Target(text(child.inputs.get("arn")) or "", bool(text(child.inputs.get("roleArn"))))
            targets.setdefault(text(child.inputs.get("rule")) or "", []).append(target)
    policies = {
        child.name: _json(child.inputs.get("policy")) for child in children if child.type == ROLE_POLICY
    }
    for child in children:
        if child.type == EVENT_RULE:
            rule_name = text(child.inputs.get("name")) or ""
            schedule = text(child.inputs.get("scheduleExpression"))
            view.rules.append(
                Rule(_json(child.inputs.get("eventPattern")), schedule, targets.get(rule_name, []))
            )
        elif child.type == ROLE:
            # The role's policy is declared under the role's own Pulumi name (components/org_spoke.py).
            view.roles[text(child.inputs.get("name")) or ""] = policies.get(child.name, {})
        elif child.type == LAMBDA_FUNCTION:
            view.functions.append(text(child.inputs.get("name")) or "")
    return view


def _substituted(value: object) -> str:
    """A template string, or the string of its ``Fn::Sub``."""
    return text(mapping(value).get("Fn::Sub")) or text(value) or ""


def _template_spoke(stack_set: ResourceView) -> SpokeView:
    view = SpokeView(stack_set.urn, f"StackSet {stack_set.inputs.get('name')}", REGION_PSEUDO)
    template = _json(stack_set.inputs.get("templateBody"))
    for resource in map(mapping, mapping(template.get("Resources")).values()):
        properties = mapping(resource.get("Properties"))
        kind = resource.get("Type")
        if kind == "AWS::Events::Rule":
            targets = [
                Target(_substituted(target.get("Arn")), "RoleArn" in target)
                for target in map(mapping, items(properties.get("Targets")))
            ]
            view.rules.append(
                Rule(
                    mapping(properties.get("EventPattern")),
                    text(properties.get("ScheduleExpression")),
                    targets,
                )
            )
        elif kind == "AWS::IAM::Role":
            documents = [
                mapping(policy).get("PolicyDocument") for policy in items(properties.get("Policies"))
            ]
            merged = {
                "Statement": [s for document in documents for s in items(mapping(document).get("Statement"))]
            }
            view.roles[_substituted(properties.get("RoleName"))] = merged
        elif kind == "AWS::Lambda::Function":
            view.functions.append(_substituted(properties.get("FunctionName")))
    return view


def _matches(pattern: Mapping[str, Any], detail_type: str, source: str) -> bool:
    return detail_type in items(pattern.get("detail-type")) and source in items(pattern.get("source"))


def _grants_stop(policy: Mapping[str, Any]) -> bool:
    for statement in map(mapping, items(policy.get("Statement"))):
        actions = statement.get("Action")
        listed = [actions] if isinstance(actions, str) else items(actions)
        if statement.get("Effect") == "Allow" and STOP in listed:
            return True
    return False


def _forwarding_problems(view: SpokeView, stack: str) -> Iterator[str]:
    bus = f":event-bus/{names.hub_bus(stack)}"
    for detail_type, source in FORWARDED.items():
        rules = [rule for rule in view.rules if _matches(rule.pattern, detail_type, source)]
        if not rules:
            yield f"{view.label}: no rule forwards {detail_type!r} events; the hub never hears of them"
            continue
        to_hub = [target for rule in rules for target in rule.targets if target.arn.endswith(bus)]
        if not to_hub:
            yield f"{view.label}: the {detail_type!r} rule has no target on the hub bus {names.hub_bus(stack)}"
        elif not any(target.has_role for target in to_hub):
            yield (
                f"{view.label}: the {detail_type!r} rule's hub target has no role; a bus that admits the "
                "organisation refuses its events"
            )


def _sweep_problems(view: SpokeView, stack: str, mode: str) -> Iterator[str]:
    if mode == "spoke":
        reaper = f"{names.spoke_role(stack, view.region)}-reaper"
        if reaper not in view.functions:
            yield f"{view.label}: sweep: spoke, but no sweep function {reaper!r}; its hosts are never swept"
        elif not any(rule.schedule and rule.targets for rule in view.rules):
            yield f"{view.label}: sweep: spoke, but no schedule invokes the sweep"
        return
    role = names.spoke_role(stack, view.region)
    if role not in view.roles:
        yield f"{view.label}: sweep: central, but no spoke role {role!r} for the hub's sweep to assume"
    elif not _grants_stop(view.roles[role]):
        yield f"{view.label}: the spoke role {role!r} does not allow {STOP}; the central sweep cannot stop a host"


def _sweep_mode(resources: Sequence[ResourceView], stack: str) -> str:
    wanted = f"/parkbrake/{stack}/spokes"
    for resource in resources:
        if resource.type == SSM_PARAMETER and resource.inputs.get("name") == wanted:
            return str(_json(resource.inputs.get("insecureValue")).get("sweep", "central"))
    return "central"


def spoke_views(resources: Sequence[ResourceView]) -> Iterator[SpokeView]:
    for resource in resources:
        if resource.type == SPOKE:
            yield _component_spoke(resource, [child for child in resources if child.parent == resource.urn])
        elif resource.type == STACK_SET and str(resource.inputs.get("name", "")).endswith("-spokes"):
            yield _template_spoke(resource)


def spoke_problems(resources: Sequence[ResourceView], _context: PolicyContext) -> Iterator[Violation]:
    views = list(spoke_views(resources))
    if not views:
        return
    stack = stack_name(next(resource for resource in resources if resource.urn == views[0].urn))
    mode = _sweep_mode(resources, stack)
    for view in views:
        for problem in (*_forwarding_problems(view, stack), *_sweep_problems(view, stack, mode)):
            yield Violation(view.urn, problem)


RULE = PolicyRule(
    name="spokes-forward-and-sweep",
    description=(
        "Every spoke of an organisation forwards EC2 state changes and tag changes to the hub bus "
        "(with a role), and has its sweep: the spoke role with ec2:StopInstances (central) or the "
        "sweep function and its schedule (spoke)."
    ),
    enforcement="mandatory",
    check=spoke_problems,
)
