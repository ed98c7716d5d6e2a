"""What a spoke is, once, for both of its forms: a Pulumi component per account and region
(components/org_spoke.py) and a CloudFormation template a StackSet deploys to an OU
(components/org_spoke_stackset.py). Neither form describes a resource of its own; each renders these
parts.

A spoke is built for a literal account and region (the Pulumi form) or for CloudFormation's
pseudo parameters ``${AWS::AccountId}`` and ``${AWS::Region}`` (the StackSet form, whose accounts join
the OU later): every name and ARN is a string in which either may stand, and the template renders a
string holding a pseudo parameter as ``Fn::Sub``.

The parts (docs/organisation.md, "Hub and spokes"):

- two forwarding rules on the account's default bus, EC2's instance state changes and the tag
  changes of EC2 instances, whose one target is the hub bus, with a role allowed ``events:PutEvents`` on
  it. The hub admits the organisation by ``aws:PrincipalOrgID``, and then the sender must give a role
  (botocore ``events/2015-10-07/service-2.json``, ``PutTargets`` and ``PutPermission``). The rules sit
  on the default bus, where AWS's own events arrive, and target the hub bus itself: EventBridge
  delivers an event that came from another bus to no third bus (EventBridge User Guide,
  ``eb-bus-to-bus.html``: "EventBridge can't route events received from a sender event bus to a
  third event bus"), so no regional relay bus may stand between them. A spoke in another region than
  the hub's forwards across regions in the same rule, where the hub's region is a supported
  cross-Region destination (``eb-cross-account.html``);
- with ``sweep: central`` no deadline of its own: the hub's deadline Lambda takes the forwarded state
  and tag changes from the hub bus, reads the host through the spoke role and arms its schedule in
  the hub (central deadlines, lambdas/engines/deadlines.py). With ``sweep: spoke``, the deadline
  handler on the account's own state and tag changes (a service target in another account, such as
  the hub's Lambda, must be in the rule's region: ``eb-service-cross-account.html``), with what its
  schedules need: the spoke's own deadline schedule group (``PARKBRAKE_DEADLINE_GROUP`` in its
  functions' environment), the Scheduler role that invokes the spoke's reaper, and the grants to arm
  them in that group only;
- the launcher's guard: the spoke's park parameter (``/parkbrake/<stack>/spoke-<region>/parked``),
  set from the hub stack's ``parked``, so the organisation's park switch reaches every spoke;
- the spoke role the hub assumes, trusted by the hub account's ``parkbrake-<stack>-*`` roles only:
  read-only EC2 and ``ec2:StopInstances`` on managed hosts, for the central sweep and the meter's
  lookups;
- with ``sweep: spoke`` only, the sweep itself: the reaper function and its rate rule.

Names: everything a spoke names begins with ``names.spoke_role(stack, region)``, which holds the
region, so two regions of one account, and the hub's own resources in the hub account when it is in
the OU, never collide (instance-scheduler #561, #608).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal

from components.iam_policies import MANAGED_ONLY, document, statement, trust_policy
from guardrails import names, settings
from guardrails.schedules import rate_expression
from guardrails.settings_table import SWEEP_EVERY

# The two event patterns a spoke forwards; the policy pack looks for exactly these.
STATE_CHANGE_DETAIL_TYPE = "EC2 Instance State-change Notification"
TAG_CHANGE_DETAIL_TYPE = "Tag Change on Resource"
STATE_CHANGE_FORWARD: dict[str, Any] = {"source": ["aws.ec2"], "detail-type": [STATE_CHANGE_DETAIL_TYPE]}
# Tag changes come from the tagging service (source aws.tag, detail-type "Tag Change on Resource":
# EventBridge events reference, events-ref-tag.html) for every service; the event's detail names the
# service and resource type, so only EC2 instances' are forwarded.
TAG_CHANGE_FORWARD: dict[str, Any] = {
    "source": ["aws.tag"],
    "detail-type": [TAG_CHANGE_DETAIL_TYPE],
    "detail": {"service": ["ec2"], "resource-type": ["instance"]},
}
FORWARDED_DETAIL_TYPES = (STATE_CHANGE_DETAIL_TYPE, TAG_CHANGE_DETAIL_TYPE)
# The states the guardrails act on (``pending`` changes nothing): the filter of the stack's own
# state-change rule (components/guardrail_functions.py) and of the hub's rules on what the spokes
# forward (components/org_hub.py). The spokes forward every state: a filter there is one more thing
# a member account could change.
STATE_CHANGE_ACTED_ON: dict[str, Any] = {
    **STATE_CHANGE_FORWARD,
    "detail": {"state": ["running", "stopping", "stopped", "shutting-down", "terminated"]},
}
ACCOUNT_PSEUDO = "${AWS::AccountId}"
REGION_PSEUDO = "${AWS::Region}"
PARTITION_PSEUDO = "${AWS::Partition}"
SweepMode = Literal["central", "spoke"]


@dataclass(frozen=True)
class Ref:
    """Another part's ARN (or, for a function, its name), by the part's logical name."""

    logical: str
    attribute: Literal["arn", "name"] = "arn"


@dataclass(frozen=True)
class RolePart:
    logical: str
    name: str
    description: str
    trust: dict[str, Any]
    policy: dict[str, Any]


@dataclass(frozen=True)
class TargetPart:
    id: str
    arn: str | Ref
    role: Ref | None = None


@dataclass(frozen=True)
class RulePart:
    logical: str
    name: str
    description: str
    targets: tuple[TargetPart, ...]
    pattern: dict[str, Any] | None = None
    schedule: str | None = None

    @property
    def pattern_json(self) -> str | None:
        return json.dumps(self.pattern, sort_keys=True) if self.pattern is not None else None


@dataclass(frozen=True)
class LayerPart:
    """The guardrails' dependency layer (components/lambda_requirements.txt), in the spoke's region."""

    logical: str
    name: str


@dataclass(frozen=True)
class FunctionPart:
    """A guardrail Lambda from the one code archive; the layer is the spoke's own."""

    logical: str
    name: str
    guardrail: str  # the handler module: lambdas.<guardrail>.handler
    role: Ref
    timeout_s: int
    layer: Ref
    environment: dict[str, str] = field(default_factory=dict)
    # What both forms give the function and its log group (the stack's own functions' figures,
    # components/guardrail_functions.py).
    memory_mb: int = 256
    log_retention_days: int = 30


@dataclass(frozen=True)
class InvokePart:
    """EventBridge's permission to invoke a function from one rule."""

    logical: str
    function: Ref
    rule: Ref


@dataclass(frozen=True)
class ScheduleGroupPart:
    """An EventBridge Scheduler schedule group (the spoke's deadlines, ``sweep: spoke``)."""

    logical: str
    name: str


@dataclass(frozen=True)
class ParameterPart:
    logical: str
    name: str
    value: str
    description: str


Part = RolePart | RulePart | LayerPart | FunctionPart | InvokePart | ParameterPart | ScheduleGroupPart


@dataclass(frozen=True)
class SpokeArgs:
    """One spoke: the organisation's stack name, the hub, and where the spoke is."""

    stack: str
    hub_account: str
    hub_region: str
    account: str = ACCOUNT_PSEUDO
    region: str = REGION_PSEUDO
    partition: str = "aws"
    sweep: SweepMode = "central"
    sweep_every: timedelta = SWEEP_EVERY
    parked: bool = False


# The longest name AWS takes for each kind of part that names a resource (botocore's service models
# in the venv: iam/2010-05-08 ``roleNameType``, events/2015-10-07 ``RuleName`` and scheduler/2021-06-30
# ``ScheduleGroupName``, max 64; lambda/2015-03-31 ``FunctionName``: "If you specify only the function
# name, it is limited to 64 characters", and ``LayerName``, max 140).
NAME_LIMITS: dict[type, int] = {
    RolePart: 64,
    RulePart: 64,
    FunctionPart: 64,
    ScheduleGroupPart: 64,
    LayerPart: 140,
}


def overlong_names(args: SpokeArgs) -> list[tuple[str, int]]:
    """Every name the spoke would give (with ``sweep: spoke``, which names the most) that AWS would
    refuse, with its limit: the stack's and the region's names are in every one."""
    overlong = []
    for part in spoke_parts(replace(args, sweep="spoke")):
        if isinstance(part, (RolePart, RulePart, FunctionPart, ScheduleGroupPart, LayerPart)):
            limit = NAME_LIMITS[type(part)]
            if len(part.name) > limit:
                overlong.append((part.name, limit))
    return overlong


def hub_bus_arn(args: SpokeArgs) -> str:
    return f"arn:{args.partition}:events:{args.hub_region}:{args.hub_account}:event-bus/{names.hub_bus(args.stack)}"


def spoke_name(args: SpokeArgs, what: str) -> str:
    """``parkbrake-<stack>-spoke-<region>-<what>``: the spoke role's name, region included, and a suffix."""
    return f"{names.spoke_role(args.stack, args.region)}-{what}"


def hub_roles_pattern(args: SpokeArgs) -> str:
    """The hub's own roles (the reaper, the meter): the only principals the spoke role trusts."""
    return f"arn:{args.partition}:iam::{args.hub_account}:role/{names.prefix(args.stack)}-*"


def launch_guard_parameter(args: SpokeArgs) -> str:
    """The spoke's park switch (guardrails/names.py), which every launcher in its account reads."""
    return names.spoke_park_parameter(args.stack, args.region)


def spoke_parts(args: SpokeArgs) -> list[Part]:
    """Every part of the spoke, in the order both forms declare them."""
    parts: list[Part] = [
        *_forwarding(args),
        _spoke_role(args),
        _launch_guard(args),
    ]
    if args.sweep == "spoke":  # a central spoke runs no function: no layer, no code to read
        parts += [
            LayerPart("Dependencies", spoke_name(args, "dependencies")),
            *_deadline(args),
            *_sweep(args),
        ]
    return parts


def _forwarding(args: SpokeArgs) -> list[Part]:
    bus = hub_bus_arn(args)
    role = RolePart(
        "ForwardRole",
        spoke_name(args, "forward"),
        "EventBridge forwarding this account's EC2 events to the organisation's hub bus",
        trust_policy("events.amazonaws.com"),
        document([statement("ForwardToHub", ["events:PutEvents"], bus)]),
    )
    rules = [
        RulePart(
            logical,
            spoke_name(args, what),
            f"{description} to the hub bus {names.hub_bus(args.stack)}",
            (TargetPart("hub-bus", bus, Ref("ForwardRole")),),
            pattern=pattern,
        )
        for logical, what, description, pattern in (
            ("ForwardStateChanges", "forward-state", "EC2 instance state changes", STATE_CHANGE_FORWARD),
            ("ForwardTagChanges", "forward-tags", "EC2 instance tag changes", TAG_CHANGE_FORWARD),
        )
    ]
    return [role, *rules]


def _spoke_role(args: SpokeArgs) -> RolePart:
    trust = document(
        [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:{args.partition}:iam::{args.hub_account}:root"},
                "Action": "sts:AssumeRole",
                "Condition": {"ArnLike": {"aws:PrincipalArn": hub_roles_pattern(args)}},
            }
        ]
    )
    policy = document(
        [
            # What the sweep, the meter, the budget and the reconciler read in the account: the hosts,
            # tags included (lambdas/aws/ec2_hosts.py), and the accelerator count of a type the price
            # table lacks (lambdas/engines/metering.py, accelerator_counts); no other read
            # (tests/components/test_org_spoke.py).
            statement("ReadHosts", ["ec2:DescribeInstances", "ec2:DescribeInstanceTypes"], "*"),
            statement(
                "StopManagedHosts",
                ["ec2:StopInstances"],
                f"arn:{args.partition}:ec2:{args.region}:{args.account}:instance/*",
                MANAGED_ONLY,
            ),
            # The sweep reads which stacks exist in the account when a host names another stack
            # (lambdas/aws/ec2_hosts.py): without it that place is an error and the heartbeat waits.
            statement(
                "ListStacks",
                ["ssm:GetParametersByPath"],
                [
                    f"arn:{args.partition}:ssm:{args.region}:{args.account}:parameter/parkbrake",
                    f"arn:{args.partition}:ssm:{args.region}:{args.account}:parameter/parkbrake/*",
                ],
            ),
        ]
    )
    return RolePart(
        "SpokeRole",
        names.spoke_role(args.stack, args.region),
        f"assumed by the hub of {args.stack}: the central sweep and the meter's lookups",
        trust,
        policy,
    )


def _launch_guard(args: SpokeArgs) -> ParameterPart:
    return ParameterPart(
        "LaunchGuard",
        launch_guard_parameter(args),
        "true" if args.parked else "false",
        "the spoke's park switch, set from the organisation hub's parked",
    )


def _function_role(args: SpokeArgs, logical: str, guardrail: str, stops: bool) -> RolePart:
    name = spoke_name(args, guardrail)
    log_group = f"arn:{args.partition}:logs:{args.region}:{args.account}:log-group:/aws/lambda/{name}:*"
    statements = [
        statement("OwnLogs", ["logs:CreateLogStream", "logs:PutLogEvents"], log_group),
        # The heartbeat (lambdas/aws/heartbeat.py): PutMetricData takes no resource ARN, so its namespace.
        statement(
            "Heartbeat",
            ["cloudwatch:PutMetricData"],
            "*",
            {"StringEquals": {"cloudwatch:namespace": names.heartbeat_namespace()}},
        ),
        # Arms, moves and deletes the deadline schedules in the spoke's group, as the spoke's Scheduler
        # role (the sweep re-arms a deadline whose cap was extended).
        statement(
            "DeadlineSchedulesOnly",
            ["scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule"],
            f"arn:{args.partition}:scheduler:{args.region}:{args.account}:schedule/{deadline_group(args)}/*",
        ),
        statement(
            "PassSchedulerRole",
            ["iam:PassRole"],
            scheduler_role_arn(args),
            {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
        ),
        statement("ReadHosts", ["ec2:DescribeInstances"], "*"),  # tags come with the hosts
        statement(
            "ParkSwitch",
            ["ssm:GetParameter"],
            f"arn:{args.partition}:ssm:{args.region}:{args.account}:parameter{launch_guard_parameter(args)}",
        ),
    ]
    if stops:
        instances = f"arn:{args.partition}:ec2:{args.region}:{args.account}:instance/*"
        statements.append(statement("StopManagedHosts", ["ec2:StopInstances"], instances, MANAGED_ONLY))
    return RolePart(
        logical,
        name,
        f"the spoke's {guardrail} Lambda",
        trust_policy("lambda.amazonaws.com"),
        document(statements),
    )


def reaper_arn(args: SpokeArgs) -> str:
    """The spoke's reaper (``sweep: spoke``): what its deadline schedules invoke."""
    return f"arn:{args.partition}:lambda:{args.region}:{args.account}:function:{spoke_name(args, 'reaper')}"


def deadline_group(args: SpokeArgs) -> str:
    """The spoke's own deadline schedule group (``sweep: spoke``), ``parkbrake-<stack>-spoke-<region>-deadlines``:
    not the hub's ``parkbrake-<stack>-deadlines``, which the hub account already holds in the hub's region
    when it is in the OU. Its functions arm there because ``PARKBRAKE_DEADLINE_GROUP`` names it."""
    return spoke_name(args, "deadlines")


def scheduler_role_arn(args: SpokeArgs) -> str:
    return f"arn:{args.partition}:iam::{args.account}:role/{spoke_name(args, 'scheduler')}"


def _function(args: SpokeArgs, logical: str, guardrail: str, timeout_s: int) -> FunctionPart:
    return FunctionPart(
        logical,
        spoke_name(args, guardrail),
        guardrail,
        Ref(f"{logical}Role"),
        timeout_s,
        Ref("Dependencies"),
        # No decision bus: the hub bus admits the whole organisation, so relayed decisions on it could
        # be forged by any member account; a spoke's decisions stay in its own logs.
        {
            settings.STACK: args.stack,
            settings.REGIONS: args.region,
            settings.DEADLINE_TARGET_ARN: reaper_arn(args),
            settings.SCHEDULER_ROLE_ARN: scheduler_role_arn(args),
            settings.DEADLINE_GROUP: deadline_group(args),
        },
    )


def _deadline(args: SpokeArgs) -> list[Part]:
    """``sweep: spoke``'s own deadlines: the handler on the account's state and tag changes, its own
    schedule group (:func:`deadline_group`, which its functions' environment names), and the role
    Scheduler invokes the spoke's reaper as."""
    invoke_reaper = document([statement("InvokeReaper", ["lambda:InvokeFunction"], reaper_arn(args))])
    return [
        RolePart(
            "DeadlineSchedulerRole",
            spoke_name(args, "scheduler"),
            "EventBridge Scheduler invoking the spoke's reaper at a host's deadline",
            trust_policy("scheduler.amazonaws.com"),
            invoke_reaper,
        ),
        ScheduleGroupPart("DeadlineSchedules", deadline_group(args)),
        _function_role(args, "DeadlineRole", "deadline", stops=True),
        _function(args, "Deadline", "deadline", timeout_s=60),
        RulePart(
            "DeadlineStateChanges",
            spoke_name(args, "deadline"),
            "EC2 instance state changes in this account: per-host deadlines",
            (TargetPart("deadline", Ref("Deadline")),),
            pattern=STATE_CHANGE_FORWARD,
        ),
        InvokePart("DeadlineFromStateChanges", Ref("Deadline"), Ref("DeadlineStateChanges")),
        RulePart(
            "DeadlineTagChanges",
            spoke_name(args, "deadline-tags"),
            "EC2 instance tag changes in this account: a host's deadline judged again",
            (TargetPart("deadline", Ref("Deadline")),),
            pattern=TAG_CHANGE_FORWARD,
        ),
        InvokePart("DeadlineFromTagChanges", Ref("Deadline"), Ref("DeadlineTagChanges")),
    ]


def _sweep(args: SpokeArgs) -> list[Part]:
    return [
        _function_role(args, "SweepRole", "reaper", stops=True),
        _function(args, "Sweep", "reaper", timeout_s=900),
        RulePart(
            "SweepClock",
            spoke_name(args, "reaper"),
            "the sweep in this account: hosts past their caps",
            (TargetPart("reaper", Ref("Sweep")),),
            schedule=rate_expression(args.sweep_every),
        ),
        InvokePart("SweepFromClock", Ref("Sweep"), Ref("SweepClock")),
    ]
