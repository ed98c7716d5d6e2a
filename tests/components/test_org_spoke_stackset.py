"""The spokes as a StackSet: the template is the Pulumi spoke's parts, rendered once more, valid against
CloudFormation's resource specification as cfn-lint carries it (cfn-lint 1.51, ``cfnlint.api.lint``,
which checks every resource type and property against the schemas of the regions given); the StackSet
is service-managed and deploys itself to every account of each OU and region."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cfnlint.api import ManualArgs, lint

from components.org_spoke_parts import FunctionPart, SpokeArgs, spoke_parts
from components.org_spoke_stackset import TemplateArgs, spoke_template
from tests.components.org_build import (
    FUNCTION,
    HUB_ACCOUNT,
    HUB_REGION,
    ROLE,
    RULE,
    TAGS,
    org_run_of,
    spoke_run,
)

STACK_SET = "aws:cloudformation/stackSet:StackSet"
INSTANCE = "aws:cloudformation/stackSetInstance:StackSetInstance"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"


def template(sweep: str = "central") -> dict[str, Any]:
    spoke = SpokeArgs("org", HUB_ACCOUNT, HUB_REGION, sweep=sweep)  # type: ignore[arg-type]
    return spoke_template(TemplateArgs(spoke, "parkbrake-org-code", TAGS))


def cfn_lint(document: dict[str, Any]) -> list[str]:
    matches = lint(json.dumps(document), config=ManualArgs(regions=["us-east-1", "us-west-2", "eu-west-1"]))
    return [f"{match.rule.id} {match.message}" for match in matches]


@pytest.mark.parametrize("sweep", ["central", "spoke"])
def test_the_template_is_valid_cloudformation(sweep: str) -> None:
    assert cfn_lint(template(sweep)) == []


def test_cfn_lint_would_catch_a_property_cloudformation_does_not_have() -> None:
    broken = template()
    broken["Resources"]["SpokeRole"]["Properties"]["RoleNam"] = "parkbrake-org-spoke"
    broken["Resources"]["ForwardTagChanges"]["Properties"]["Targets"][0]["RoleARN"] = "x"
    problems = cfn_lint(broken)
    assert any("RoleNam" in problem for problem in problems)
    assert any("RoleARN" in problem for problem in problems)


def substituted(value: Any, region: str, account: str) -> Any:
    """What CloudFormation makes of an ``Fn::Sub`` of the pseudo parameters in one account and region."""
    if isinstance(value, dict) and set(value) == {"Fn::Sub"}:
        return value["Fn::Sub"].replace("${AWS::Region}", region).replace("${AWS::AccountId}", account)
    return value


@pytest.mark.parametrize("sweep", ["central", "spoke"])
def test_the_template_names_what_the_pulumi_spoke_names_one_source_for_both(sweep: str) -> None:
    """In account 222222222222, us-west-2, the StackSet's instance and the Pulumi spoke name the same things."""
    resources = template(sweep)["Resources"].values()
    by_type = {
        "AWS::IAM::Role": "RoleName",
        "AWS::Events::Rule": "Name",
        "AWS::Lambda::Function": "FunctionName",
    }
    from_template = sorted(
        (kind, substituted(resource["Properties"][key], "us-west-2", "222222222222"))
        for resource in resources
        for kind, key in by_type.items()
        if resource["Type"] == kind
    )
    run = spoke_run(sweep)  # type: ignore[arg-type]
    pulumi_types = {ROLE: "AWS::IAM::Role", RULE: "AWS::Events::Rule", FUNCTION: "AWS::Lambda::Function"}
    from_pulumi = sorted(
        (pulumi_types[resource.type], resource.inputs["name"])
        for resource in run.resources
        if resource.type in pulumi_types
    )
    assert from_template == from_pulumi


def test_both_forms_give_each_function_its_parts_memory_and_log_retention() -> None:
    """The spoke's parts say what a function holds; neither form keeps a figure of its own."""
    functions = [part for part in spoke_parts(SpokeArgs("org", HUB_ACCOUNT, HUB_REGION, sweep="spoke"))
                 if isinstance(part, FunctionPart)]  # fmt: skip
    assert functions
    resources = template("spoke")["Resources"]
    run = spoke_run("spoke")
    for part in functions:
        assert resources[part.logical]["Properties"]["MemorySize"] == part.memory_mb
        assert resources[f"{part.logical}Logs"]["Properties"]["RetentionInDays"] == part.log_retention_days
        (declared,) = [f for f in run.of_type(FUNCTION) if f.inputs["name"].endswith(f"-{part.guardrail}")]
        assert declared.inputs["memorySize"] == part.memory_mb
        (logs,) = [
            g for g in run.of_type(LOG_GROUP) if g.inputs["name"] == f"/aws/lambda/{declared.inputs['name']}"
        ]
        assert logs.inputs["retentionInDays"] == part.log_retention_days


def test_the_stack_set_is_service_managed_and_deploys_itself_to_each_ou_and_region() -> None:
    run = org_run_of("stackset")
    (stack_set,) = run.of_type(STACK_SET)
    inputs = stack_set.inputs
    assert (inputs["name"], inputs["permissionModel"], inputs["callAs"]) == (
        "parkbrake-org-spokes",
        "SERVICE_MANAGED",
        "DELEGATED_ADMIN",
    )
    assert inputs["autoDeployment"] == {"enabled": True, "retainStacksOnAccountRemoval": False}
    assert inputs["capabilities"] == ["CAPABILITY_NAMED_IAM"]
    body = json.loads(inputs["templateBody"])
    assert {key: value["Type"] for key, value in body["Resources"].items()} == {
        key: value["Type"] for key, value in template()["Resources"].items()
    }
    assert cfn_lint(body) == []
    instances = run.of_type(INSTANCE)
    assert [
        (i.inputs["deploymentTargets"]["organizationalUnitIds"], i.inputs["stackSetInstanceRegion"])
        for i in instances
    ] == [(["ou-ab12-cdef3456"], "us-east-1")]
    assert not run.of_type("parkbrake:org:Spoke")  # no account is deployed by Pulumi in this form
