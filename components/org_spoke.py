"""A spoke as Pulumi declares it in one member account and region (``spokes: stacks``): the parts of
components/org_spoke_parts.py, each rendered as its pulumi-aws resource, through the provider that
assumes the account's role.

The same parts render as the StackSet's template (components/org_spoke_stackset.py); nothing here
says what a spoke holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.common import child_of, named_child_of
from components.lambda_archive import DEFAULT_ARCHITECTURE, RUNTIME, lambda_functions
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

SPOKE_TOKEN = "parkbrake:org:Spoke"


@dataclass
class OrgSpokeArgs:
    spoke: SpokeArgs  # a literal account and region
    account_name: str
    code: pulumi.Archive  # the guardrails' code archive (`parkbrake package`)
    dependencies: pulumi.Archive  # their dependency layer
    tags: Mapping[str, str]
    runtime: str = RUNTIME
    architecture: str = DEFAULT_ARCHITECTURE


class OrgSpoke(pulumi.ComponentResource):
    """The spoke's resources, children of this component; pass the account's provider in ``opts``."""

    account_id: str
    region: str
    spoke_role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: OrgSpokeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(SPOKE_TOKEN, name, None, opts)
        self._args = args
        self._name = name
        self._declared: dict[str, pulumi.CustomResource] = {}
        parts = spoke_parts(args.spoke)
        self._names = {part.logical: part.name for part in parts if isinstance(part, RolePart)}
        for part in parts:
            self._declared[part.logical] = self._declare(part)
        self.account_id = args.spoke.account
        self.region = args.spoke.region
        self.spoke_role_arn = self._declared["SpokeRole"].arn  # type: ignore[attr-defined]
        self.register_outputs(
            {"account_id": self.account_id, "region": self.region, "spoke_role_arn": self.spoke_role_arn}
        )

    def _child(self, logical: str) -> str:
        """A child's Pulumi name: a URN holds the parent's type, not its name, so every spoke's children
        carry the spoke's name."""
        return f"{self._name}-{kebab(logical)}"

    def _resolve(self, value: str | Ref) -> pulumi.Input[str]:
        if isinstance(value, str):
            return value
        declared = self._declared[value.logical]
        return declared.name if value.attribute == "name" else declared.arn  # type: ignore[attr-defined]

    def _declare(self, part: Part) -> pulumi.CustomResource:
        if isinstance(part, RolePart):
            return self._role(part)
        if isinstance(part, RulePart):
            return self._rule(part)
        if isinstance(part, LayerPart):
            return self._layer(part)
        if isinstance(part, FunctionPart):
            return self._function(part)
        if isinstance(part, InvokePart):
            return aws.lambda_.Permission(
                self._child(part.logical),
                action="lambda:InvokeFunction",
                function=self._resolve(Ref(part.function.logical, "name")),
                principal="events.amazonaws.com",
                source_arn=self._resolve(part.rule),
                opts=child_of(self),
            )
        if isinstance(part, ScheduleGroupPart):
            return aws.scheduler.ScheduleGroup(
                self._child(part.logical),
                name=part.name,
                tags=dict(self._args.tags),
                opts=named_child_of(self),
            )
        return self._parameter(part)

    def _role(self, part: RolePart) -> aws.iam.Role:
        role = aws.iam.Role(
            self._child(part.logical),
            name=part.name,
            description=part.description,
            assume_role_policy=json.dumps(part.trust),
            tags=dict(self._args.tags),
            opts=named_child_of(self),
        )
        aws.iam.RolePolicy(
            self._child(part.logical),
            role=role.id,
            policy=json.dumps(part.policy),
            opts=child_of(self),
        )
        return role

    def _rule(self, part: RulePart) -> aws.cloudwatch.EventRule:
        rule = aws.cloudwatch.EventRule(
            self._child(part.logical),
            name=part.name,
            description=part.description,
            event_pattern=part.pattern_json,
            schedule_expression=part.schedule,
            tags=dict(self._args.tags),
            opts=named_child_of(self),
        )
        for target in part.targets:
            # The rule's and the role's names are known before they exist: given as literals, the policy
            # pack reads them at `pulumi preview` too, where a new resource's outputs are unknown.
            role = self._declared[target.role.logical] if target.role is not None else None
            aws.cloudwatch.EventTarget(
                f"{self._child(part.logical)}-{target.id}",
                rule=part.name,
                target_id=target.id,
                arn=self._resolve(target.arn),
                role_arn=self._role_arn(target.role) if target.role is not None else None,
                opts=child_of(self, depends_on=[rule, *([role] if role is not None else [])]),
            )
        return rule

    def _role_arn(self, ref: Ref) -> str:
        spoke = self._args.spoke
        return f"arn:{spoke.partition}:iam::{spoke.account}:role/{self._names[ref.logical]}"

    def _layer(self, part: LayerPart) -> aws.lambda_.LayerVersion:
        return aws.lambda_.LayerVersion(
            self._child(part.logical),
            layer_name=part.name,
            description="the guardrail Lambdas' libraries (components/lambda_requirements.txt)",
            code=self._args.dependencies,
            compatible_runtimes=[self._args.runtime],
            compatible_architectures=[self._args.architecture],
            opts=child_of(self),
        )

    def _function(self, part: FunctionPart) -> aws.lambda_.Function:
        (spec,) = lambda_functions(
            [part.guardrail], runtime=self._args.runtime, architecture=self._args.architecture
        )
        log_group = aws.cloudwatch.LogGroup(
            self._child(part.logical),
            name=f"/aws/lambda/{part.name}",
            retention_in_days=part.log_retention_days,
            tags=dict(self._args.tags),
            opts=named_child_of(self),
        )
        return aws.lambda_.Function(
            self._child(part.logical),
            name=part.name,
            role=self._resolve(part.role),
            runtime=spec.runtime,
            handler=spec.handler,
            architectures=[spec.architecture],
            code=self._args.code,
            timeout=part.timeout_s,
            memory_size=part.memory_mb,
            layers=[self._resolve(part.layer)],
            environment={"variables": part.environment},
            tags=dict(self._args.tags),
            opts=named_child_of(self, depends_on=[log_group]),
        )

    def _parameter(self, part: ParameterPart) -> aws.ssm.Parameter:
        return aws.ssm.Parameter(
            self._child(part.logical),
            name=part.name,
            type="String",
            insecure_value=part.value,
            description=part.description,
            tags=dict(self._args.tags),
            opts=named_child_of(self),
        )


def kebab(logical: str) -> str:
    """``ForwardStateChanges`` → ``forward-state-changes``: Pulumi's names here are kebab-case."""
    return "".join(f"-{c.lower()}" if c.isupper() else c for c in logical).lstrip("-")
