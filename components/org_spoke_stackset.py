"""The spokes as one CloudFormation StackSet (``spokes: stackset``): service-managed permissions and
automatic deployment, so an account that joins an OU gets its spokes without a deploy of ours.

The template is rendered from the parts of components/org_spoke_parts.py, the ones the Pulumi form
(components/org_spoke.py) declares, built for CloudFormation's pseudo parameters: a string holding
``${AWS::AccountId}``, ``${AWS::Region}`` or ``${AWS::Partition}`` becomes ``Fn::Sub``. The resource
types and properties are CloudFormation's (AWS CloudFormation User Guide, the ``AWS::IAM::Role``,
``AWS::Events::Rule``, ``AWS::Lambda::*``, ``AWS::Logs::LogGroup`` and ``AWS::SSM::Parameter``
references); tests/components/test_org_spoke_stackset.py checks the template with cfn-lint's copy of
the resource specification.

Service-managed StackSets never deploy to the organisation's management account (AWS
CloudFormation User Guide, ``stacksets-orgs-manage-auto-deployment.html``); the hub account may be in
the OU, since every spoke name holds ``spoke-<region>`` (components/org_spoke_parts.py).

The functions and the layer read their code from the hub's bucket ``<code_bucket_prefix>-<region>``
of the instance's region, filled by components/org_code_buckets.py. The template names each object's
version too (``CODE_VERSIONS``, below): a new archive is a new template, and CloudFormation rolls it
into every account's functions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pulumi
import pulumi_aws as aws

from components.common import child_of, named_child_of
from components.lambda_archive import (
    CODE_ARCHIVE,
    DEFAULT_ARCHITECTURE,
    DEPENDENCY_LAYER,
    RUNTIME,
    lambda_functions,
)
from components.org_spoke_parts import (
    FunctionPart,
    InvokePart,
    LayerPart,
    ParameterPart,
    Part,
    Ref,
    RolePart,
    RulePart,
    ScheduleGroupPart,
    SpokeArgs,
    spoke_parts,
)
from guardrails import names

STACKSET_TOKEN = "parkbrake:org:SpokeStackSet"
TEMPLATE_VERSION = "2010-09-09"
# The hub deploys as the organisation's delegated administrator for StackSets, not from the
# management account (``call_as``, CloudFormation's CallAs).
CALL_AS = "DELEGATED_ADMIN"
PSEUDO = "${AWS::"
# The archives the template reads from the code buckets, by the name of their column in the
# template's ``CODE_VERSIONS`` mapping (CloudFormation's mapping keys are alphanumeric).
CODE_ARCHIVES = {"Code": CODE_ARCHIVE, "Layer": DEPENDENCY_LAYER}
CODE_VERSIONS = "CodeVersions"


@dataclass(frozen=True)
class TemplateArgs:
    spoke: SpokeArgs  # built for ${AWS::AccountId} and ${AWS::Region}
    code_bucket_prefix: str  # the code is read from <prefix>-<region>
    tags: Mapping[str, str]
    runtime: str = RUNTIME
    architecture: str = DEFAULT_ARCHITECTURE
    # region → column of CODE_ARCHIVES → the S3 version id of that archive in that region's bucket;
    # empty, the template names the keys alone (the latest version when CloudFormation creates the
    # function, never read again).
    code_versions: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass
class OrgSpokeStackSetArgs:
    template: TemplateArgs
    organizational_units: Sequence[str]
    regions: Sequence[str]
    tags: Mapping[str, str]
    # The uploaded archives' versions (components/org_code_buckets.py), and the uploads themselves,
    # which the StackSet and its instances wait for: no account's spoke is created before its code.
    code_versions: pulumi.Input[Mapping[str, Mapping[str, str]]] | None = None
    code_objects: Sequence[pulumi.Resource] = ()


def stack_set_name(stack: str) -> str:
    return f"{names.prefix(stack)}-spokes"


def code_key(stack: str, archive: str) -> str:
    return f"parkbrake/{stack}/{archive}"


def code_bucket(prefix: str, region: str) -> str:
    """The code bucket of ``region`` (``${AWS::Region}`` in the template): Lambda reads a function's
    code from a bucket in the function's own region (botocore ``lambda/2015-03-31/service-2.json``,
    ``FunctionCode.S3Bucket``: "An Amazon S3 bucket in the same Amazon Web Services Region as your
    function. The bucket can be in a different Amazon Web Services account.")."""
    return f"{prefix}-{region}"


def spoke_template(args: TemplateArgs) -> dict[str, Any]:
    """The spoke as a CloudFormation template, every part of ``spoke_parts`` a resource (or two)."""
    parts = spoke_parts(args.spoke)
    kinds = {part.logical: part for part in parts}
    resources: dict[str, Any] = {}
    for part in parts:
        resources.update(_resources(part, args, kinds))
    template: dict[str, Any] = {
        "AWSTemplateFormatVersion": TEMPLATE_VERSION,
        "Description": f"parkbrake {args.spoke.stack}: a spoke (forwarding, deadlines, the sweep's role)",
    }
    if args.code_versions:
        template["Mappings"] = {
            CODE_VERSIONS: {
                region: {column: versions[column] for column in CODE_ARCHIVES}
                for region, versions in sorted(args.code_versions.items())
            }
        }
    template["Resources"] = resources
    return _substituted(template)


def _ref(ref: Ref | str, kinds: Mapping[str, Part]) -> Any:
    if isinstance(ref, str):
        return ref
    if ref.attribute == "name" or isinstance(kinds[ref.logical], LayerPart):
        return {"Ref": ref.logical}  # a function's Ref is its name; a layer version's, its ARN
    return {"Fn::GetAtt": [ref.logical, "Arn"]}


def _code(args: TemplateArgs, column: str) -> dict[str, Any]:
    code: dict[str, Any] = {
        "S3Bucket": code_bucket(args.code_bucket_prefix, "${AWS::Region}"),
        "S3Key": code_key(args.spoke.stack, CODE_ARCHIVES[column]),
    }
    if args.code_versions:
        # Each region's bucket numbers its own versions, so the one template looks its region's up.
        code["S3ObjectVersion"] = {"Fn::FindInMap": [CODE_VERSIONS, {"Ref": "AWS::Region"}, column]}
    return code


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in sorted(tags.items())]


def _resources(part: Part, args: TemplateArgs, kinds: Mapping[str, Part]) -> dict[str, Any]:
    if isinstance(part, RolePart):
        properties = {
            "RoleName": part.name,
            "Description": part.description,
            "AssumeRolePolicyDocument": part.trust,
            "Policies": [{"PolicyName": "spoke", "PolicyDocument": part.policy}],
            "Tags": _tag_list(args.tags),
        }
        return {part.logical: {"Type": "AWS::IAM::Role", "Properties": properties}}
    if isinstance(part, RulePart):
        return {part.logical: {"Type": "AWS::Events::Rule", "Properties": _rule(part, kinds)}}
    if isinstance(part, LayerPart):
        properties = {
            "LayerName": part.name,
            "Description": "the guardrail Lambdas' libraries (components/lambda_requirements.txt)",
            "Content": _code(args, "Layer"),
            "CompatibleRuntimes": [args.runtime],
            "CompatibleArchitectures": [args.architecture],
        }
        return {part.logical: {"Type": "AWS::Lambda::LayerVersion", "Properties": properties}}
    if isinstance(part, FunctionPart):
        return _function(part, args, kinds)
    if isinstance(part, InvokePart):
        properties = {
            "Action": "lambda:InvokeFunction",
            "FunctionName": _ref(Ref(part.function.logical, "name"), kinds),
            "Principal": "events.amazonaws.com",
            "SourceArn": _ref(part.rule, kinds),
        }
        return {part.logical: {"Type": "AWS::Lambda::Permission", "Properties": properties}}
    if isinstance(part, ScheduleGroupPart):
        properties = {"Name": part.name, "Tags": _tag_list(args.tags)}
        return {part.logical: {"Type": "AWS::Scheduler::ScheduleGroup", "Properties": properties}}
    return {part.logical: {"Type": "AWS::SSM::Parameter", "Properties": _parameter(part, args)}}


def _rule(part: RulePart, kinds: Mapping[str, Part]) -> dict[str, Any]:
    properties: dict[str, Any] = {"Name": part.name, "Description": part.description, "State": "ENABLED"}
    if part.pattern is not None:
        properties["EventPattern"] = part.pattern
    if part.schedule is not None:
        properties["ScheduleExpression"] = part.schedule
    properties["Targets"] = [
        {
            "Id": target.id,
            "Arn": _ref(target.arn, kinds),
            **({"RoleArn": _ref(target.role, kinds)} if target.role is not None else {}),
        }
        for target in part.targets
    ]
    return properties


def _function(part: FunctionPart, args: TemplateArgs, kinds: Mapping[str, Part]) -> dict[str, Any]:
    (spec,) = lambda_functions([part.guardrail], runtime=args.runtime, architecture=args.architecture)
    logs = f"{part.logical}Logs"
    properties = {
        "FunctionName": part.name,
        "Role": _ref(part.role, kinds),
        "Runtime": spec.runtime,
        "Handler": spec.handler,
        "Architectures": [spec.architecture],
        "Code": _code(args, "Code"),
        "Timeout": part.timeout_s,
        "MemorySize": part.memory_mb,
        "Layers": [_ref(part.layer, kinds)],
        "Environment": {"Variables": part.environment},
        "Tags": _tag_list(args.tags),
    }
    return {
        logs: {
            "Type": "AWS::Logs::LogGroup",
            "Properties": {
                "LogGroupName": f"/aws/lambda/{part.name}",
                "RetentionInDays": part.log_retention_days,
            },
        },
        part.logical: {"Type": "AWS::Lambda::Function", "DependsOn": [logs], "Properties": properties},
    }


def _parameter(part: ParameterPart, args: TemplateArgs) -> dict[str, Any]:
    return {
        "Name": part.name,
        "Type": "String",
        "Value": part.value,
        "Description": part.description,
        "Tags": dict(sorted(args.tags.items())),  # a map here, unlike the other types' lists
    }


def _substituted(value: Any) -> Any:
    """Every string holding a pseudo parameter as ``Fn::Sub``; intrinsic functions are left as they are."""
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)) in ("Ref", "Fn::GetAtt"):
            return value
        return {key: _substituted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_substituted(item) for item in value]
    if isinstance(value, str) and PSEUDO in value:
        return {"Fn::Sub": value}
    return value


class OrgSpokeStackSet(pulumi.ComponentResource):
    """The StackSet and one instance per OU and region; CloudFormation deploys the accounts."""

    stack_set_name: pulumi.Output[str]
    template_body: pulumi.Output[str]

    def __init__(
        self, name: str, args: OrgSpokeStackSetArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(STACKSET_TOKEN, name, None, opts)
        # The versions are known once the archives are uploaded, so the template is too.
        self.template_body = pulumi.Output.from_input(args.code_versions or {}).apply(
            lambda versions: template_body(args.template, versions, args.regions)
        )
        after_code = list(args.code_objects)
        stack_set = aws.cloudformation.StackSet(
            name,
            name=stack_set_name(args.template.spoke.stack),
            description="parkbrake spokes: forwarding to the hub bus, deadlines, the sweep's role",
            permission_model="SERVICE_MANAGED",
            auto_deployment={"enabled": True, "retain_stacks_on_account_removal": False},
            capabilities=["CAPABILITY_NAMED_IAM"],
            call_as=CALL_AS,
            template_body=self.template_body,
            tags=dict(args.tags),
            opts=named_child_of(self, depends_on=after_code),
        )
        for unit in args.organizational_units:
            for region in args.regions:
                aws.cloudformation.StackSetInstance(
                    f"{name}-{unit}-{region}",
                    stack_set_name=stack_set.name,
                    deployment_targets={"organizational_unit_ids": [unit]},
                    stack_set_instance_region=region,
                    call_as=CALL_AS,
                    opts=child_of(self, depends_on=after_code),
                )
        self.stack_set_name = stack_set.name
        self.register_outputs({"stack_set_name": self.stack_set_name, "template_body": self.template_body})


def template_body(
    template: TemplateArgs, versions: Mapping[str, Mapping[str, str]], regions: Sequence[str]
) -> str:
    """The template as the StackSet takes it, with the code's versions in every region it deploys to."""
    missing = [region for region in regions if versions and region not in versions]
    if missing:
        raise ValueError(f"no code versions for {', '.join(missing)}: upload the code to every region")
    return json.dumps(spoke_template(replace(template, code_versions=versions)), sort_keys=True)
