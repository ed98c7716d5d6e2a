"""The organisation's hub, beside the hub stack's own guardrails (the ledger, the meter, the notifier):
the central bus every spoke forwards its hosts' events to, its policy admitting the organisation,
the rule that hands the forwarded state changes to the meter, an archive of everything forwarded,
and (``sweep: central``) the reaper's grant to assume the spoke roles, and the central deadlines: a
rule handing the forwarded state and tag changes to the hub's deadline Lambda, which reads a member's
host through its spoke role and arms the schedule in the hub (lambdas/engines/deadlines.py).

The bus policy is EventBridge's documented shape for an organisation: ``Principal: "*"`` with the
condition ``aws:PrincipalOrgID`` (botocore ``events/2015-10-07/service-2.json``, ``PutPermission`` and
the ``Condition`` shape: "the only supported condition is membership in a certain Amazon Web Services
organization"). A sender admitted through the organisation must give its rule's target a role
(``PutTargets``), which the spokes do (components/org_spoke_parts.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import pulumi
import pulumi_aws as aws

from components.common import child_of, named_child_of
from components.iam_policies import document, statement
from components.org_spoke_parts import STATE_CHANGE_ACTED_ON, TAG_CHANGE_FORWARD
from guardrails import names

HUB_TOKEN = "parkbrake:org:Hub"
# Long enough to replay a month into the ledger, which changes nothing for an event it already holds.
ARCHIVE_RETENTION = timedelta(days=35)
# What the hub's deadline takes from the hub bus, the two rules of the stack's own deadline
# (components/guardrail_functions.py): the state changes it acts on (a ``pending`` costs no
# invocation), and EC2 instances' tag changes (a lowered cap, an exemption: the host judged again).
# Each: (the rule, its invoke permission, its description, its pattern).
CENTRAL_DEADLINE_RULES: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("hub-deadline-events", "deadline-from-hub",
     "the spokes' EC2 state changes: per-host deadlines, armed in the hub", STATE_CHANGE_ACTED_ON),
    ("hub-deadline-tag-changes", "deadline-tags-from-hub",
     "the spokes' EC2 tag changes: a host's deadline judged again", TAG_CHANGE_FORWARD),
)  # fmt: skip


@dataclass
class OrgHubArgs:
    stack: str
    org_id: str
    sweep: Literal["central", "spoke"]
    # The hub's meter (None without a ledger) and the reaper's role, which the central sweep extends.
    meter_function_name: str | None
    reaper_role_name: str
    # The hub's deadline Lambda (its role has the same name): with ``sweep: central``, every spoke's
    # forwarded state and tag changes reach it, and it may assume the spoke roles.
    deadline_function_name: str
    # What the sweep reads to find the spokes: the form, the roles (stacks) or the OUs (stackset).
    spokes: Mapping[str, Any]
    tags: Mapping[str, str]
    # Besides the meter, the ledger's guardrails that act in the member accounts, by role name (the
    # budget's stops, the reconciler's listing): they read the spokes as the meter does.
    member_account_roles: Sequence[str] = ()


def bus_policy(bus_arn: str, org_id: str) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "OrganisationForwards",
                "Effect": "Allow",
                "Principal": "*",
                "Action": "events:PutEvents",
                "Resource": bus_arn,
                "Condition": {"StringEquals": {"aws:PrincipalOrgID": org_id}},
            }
        ],
    }


def assume_spokes_policy(stack: str, org_id: str, partition: str) -> dict[str, Any]:
    """Every spoke's role, in the organisation's accounts only."""
    roles = f"arn:{partition}:iam::*:role/{names.spoke_role(stack, '*')}"
    return document(
        [
            statement(
                "AssumeSpokeRoles", ["sts:AssumeRole"], roles, {"StringEquals": {"aws:ResourceOrgID": org_id}}
            )
        ]
    )


def central_sweep_policy(
    stack: str, org_id: str, partition: str, form: str = "stacks", hub: tuple[str, str] = ("*", "*")
) -> dict[str, Any]:
    """The reaper (central sweep) and the hub's meter may assume every spoke's role, in the
    organisation's accounts only, and read the spokes' parameter; with a StackSet, they list the
    OUs' accounts (lambdas/aws/spoke_list.py). ``hub`` is the hub's (region, account)."""
    region, account = hub
    statements = [
        *assume_spokes_policy(stack, org_id, partition)["Statement"],
        statement(
            "ReadSpokes",
            ["ssm:GetParameter"],
            f"arn:{partition}:ssm:{region}:{account}:parameter{spokes_parameter(stack)}",
        ),
    ]
    if form == "stackset":
        # Organizations' listing actions take no resource-level ARN for the organisation's root
        # reads (service authorization reference for AWS Organizations): "*".
        statements.append(
            statement(
                "ListSpokeAccounts",
                [
                    "organizations:DescribeOrganization",
                    "organizations:ListAccountsForParent",
                    "organizations:ListOrganizationalUnitsForParent",
                ],
                "*",
            )
        )
    return document(statements)


def spokes_parameter(stack: str) -> str:
    """SSM parameter the central sweep reads: which spokes there are and how to reach them."""
    return f"/parkbrake/{stack}/spokes"


class OrgHub(pulumi.ComponentResource):
    bus_name: pulumi.Output[str]
    bus_arn: pulumi.Output[str]

    def __init__(self, name: str, args: OrgHubArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(HUB_TOKEN, name, None, opts)
        tags = dict(args.tags)
        bus = aws.cloudwatch.EventBus(
            "hub", name=names.hub_bus(args.stack), tags=tags, opts=named_child_of(self)
        )
        aws.cloudwatch.EventBusPolicy(
            "hub",
            event_bus_name=bus.name,
            policy=bus.arn.apply(lambda arn: json.dumps(bus_policy(arn, args.org_id))),
            opts=child_of(self),
        )
        aws.cloudwatch.EventArchive(
            "hub",
            name=names.hub_bus(args.stack),
            event_source_arn=bus.arn,
            retention_days=ARCHIVE_RETENTION.days,
            description="every event the spokes forwarded, to replay into the ledger",
            opts=named_child_of(self),
        )
        partition = aws.get_partition_output(opts=pulumi.InvokeOutputOptions(parent=self)).partition
        identity = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=self))
        region = aws.get_region_output(opts=pulumi.InvokeOutputOptions(parent=self))
        form = str(args.spokes.get("form", "stacks"))
        # The spokes' roles, their parameter and (StackSet) the OUs' accounts: the reaper's with the
        # central sweep; always the meter's, the budget's and the reconciler's, which act in the member
        # accounts and learn them.
        spokes_reader = pulumi.Output.all(partition, region.region, identity.account_id).apply(
            lambda known: json.dumps(
                central_sweep_policy(args.stack, args.org_id, known[0], form, (known[1], known[2]))
            )
        )
        if args.meter_function_name is not None:
            self._meter_rule(args.stack, args.meter_function_name, bus, partition, tags)
        meter = [args.meter_function_name] if args.meter_function_name is not None else []
        for role_name in [*meter, *args.member_account_roles]:  # "meter-reads-spokes", "budget-…"
            guardrail = role_name.removeprefix(f"{names.prefix(args.stack)}-")
            aws.iam.RolePolicy(
                f"{guardrail}-reads-spokes", role=role_name, policy=spokes_reader, opts=child_of(self)
            )
        if args.sweep == "central":
            self._central(args, bus, partition, tags, spokes_reader)
        aws.ssm.Parameter(
            "spokes",
            name=spokes_parameter(args.stack),
            type="String",
            insecure_value=json.dumps(
                args.spokes, sort_keys=True
            ),  # no secret: the value is plain, and the policy pack reads it
            description="the organisation's spokes, for the central sweep and the meter",
            tags=tags,
            opts=named_child_of(self),
        )
        self.bus_name = bus.name
        self.bus_arn = bus.arn
        self.register_outputs({"bus_name": self.bus_name, "bus_arn": self.bus_arn})

    def _central(
        self,
        args: OrgHubArgs,
        bus: aws.cloudwatch.EventBus,
        partition: pulumi.Output[str],
        tags: dict[str, str],
        spokes_reader: pulumi.Output[str],
    ) -> None:
        """``sweep: central``: the reaper and the deadline reach the spokes (the deadline reads a member's
        host and checks its account against the same spokes parameter: lambdas/engines/deadlines.py,
        central_place), and the forwarded state and tag changes reach the deadline."""
        aws.iam.RolePolicy(
            "central-sweep", role=args.reaper_role_name, policy=spokes_reader, opts=child_of(self)
        )
        aws.iam.RolePolicy(
            "central-deadlines", role=args.deadline_function_name, policy=spokes_reader, opts=child_of(self)
        )
        for rule_name, invoke, description, pattern in CENTRAL_DEADLINE_RULES:
            self._to_function(
                rule_name,
                description,
                pattern,
                (invoke, args.deadline_function_name),
                (args.stack, bus, partition, tags),
            )

    def _meter_rule(
        self,
        stack: str,
        meter: str,
        bus: aws.cloudwatch.EventBus,
        partition: pulumi.Output[str],
        tags: dict[str, str],
    ) -> None:
        self._to_function(
            "hub-state-changes",
            "the spokes' EC2 state changes, onto the one ledger",
            STATE_CHANGE_ACTED_ON,
            ("meter-from-hub", meter),
            (stack, bus, partition, tags),
        )

    def _to_function(
        self,
        rule_name: str,
        description: str,
        pattern: dict[str, Any],
        function: tuple[str, str],
        where: tuple[str, aws.cloudwatch.EventBus, pulumi.Output[str], dict[str, str]],
    ) -> None:
        """A rule on the hub bus whose one target is the hub's function ``(logical name, name)``,
        with EventBridge's permission to invoke it from that rule."""
        (logical, name), (stack, bus, partition, tags) = function, where
        rule = aws.cloudwatch.EventRule(
            rule_name,
            name=f"{names.prefix(stack)}-{rule_name}",
            description=description,
            event_bus_name=bus.name,
            event_pattern=json.dumps(pattern, sort_keys=True),
            tags=tags,
            opts=named_child_of(self),
        )
        identity = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=self))
        region = aws.get_region_output(opts=pulumi.InvokeOutputOptions(parent=self))
        function_arn = pulumi.Output.concat(
            "arn:", partition, ":lambda:", region.region, ":", identity.account_id, ":function:", name
        )
        aws.lambda_.Permission(
            logical,
            action="lambda:InvokeFunction",
            function=name,
            principal="events.amazonaws.com",
            source_arn=rule.arn,
            opts=child_of(self),
        )
        aws.cloudwatch.EventTarget(
            logical, rule=rule.name, event_bus_name=bus.name, arn=function_arn, opts=child_of(self)
        )


def spoke_roles(stack: str, placements: Sequence[tuple[str, str]], partition: str = "aws") -> list[str]:
    """The role ARN of every (account, region) spoke, as the central sweep assumes them."""
    return [names.spoke_role_arn(stack, account, region, partition) for account, region in placements]
