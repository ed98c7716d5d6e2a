"""Every IAM policy document the stack declares, built by pure functions from plain ARNs.

One function per guardrail Lambda returns that function's whole permission policy, so a test can
compare it with the AWS calls the function really makes (and nothing else can drift from it); the
components resolve their Outputs into a :class:`Grants` and call these. No Pulumi here.

Every grant is the stack's own: on a resource stacks share (instances, volumes, snapshots, Auto Scaling
groups) it is conditioned on the resource's ``parkbrake:stack`` tag (``aws:ResourceTag``, or the tag
the request writes, ``aws:RequestTag``) being this stack; on anything else its ARN names the stack
(log group, queue, topic, table, schedule group, parameter, secret, event bus). The exceptions are
the calls IAM cannot scope by resource (``Describe*``, ``PutMetricData`` by namespace) and the sweep's
read of which stacks exist (:data:`UNSCOPED`); tests/components/test_iam_stack_scope.py holds every
policy to this and evaluates, by AWS's documented rules, that one stack's roles cannot stop, terminate
or adopt another stack's host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from guardrails import names, tags
from guardrails.instance_types import accelerator_filter_values
from guardrails.settings_table import DEFAULTS

VERSION = "2012-10-17"
# The one condition every stop, terminate and shrink grant carries (the no-unconditional-stop policy).
MANAGED_ONLY = {"StringEquals": {f"aws:ResourceTag/{tags.MANAGED}": "true"}}
# Sids of the grants that cannot name the stack: no resource-level permissions, (ListStacks) the read
# of which stacks exist, which is what tells this stack's sweep another stack's host from an orphan,
# or (ReadOrganisationParkSwitches) the launcher's read of an organisation's park switches in its
# account, whose hub stack it is never told (lambdas/aws/park_switches.py, organisation_parked).
UNSCOPED = frozenset({"Describe", "DescribeHosts", "DescribePool", "DescribeGroups", "Heartbeat",
                      "DescribeVolumesAndSnapshots", "ListStacks", "ReadOrganisationParkSwitches"})  # fmt: skip
Statement = dict[str, Any]
PolicyDocument = dict[str, Any]


@dataclass(frozen=True)
class Grants:
    """What the guardrails' roles may be granted, as plain ARNs: each resource they act on."""

    partition: str
    account_id: str
    region: str
    stack: str
    topic_arn: str
    scheduler_role_arn: str
    autoscaling_group_arns: tuple[str, ...] = ()
    nightly_group_arn: str | None = None
    database_secret_arn: str | None = None
    reap_untagged: bool = (
        DEFAULTS.reap_untagged
    )  # the sweep tags unmanaged hosts as managed before stopping them
    terminate_stopped: bool = (
        DEFAULTS.terminate_stopped
    )  # the sweep snapshots and terminates hosts stopped too long
    chat_webhook_secret_arn: str | None = None  # the chat channel's webhook URL, which the sweep posts to

    def arn(self, service: str, resource: str) -> str:
        return f"arn:{self.partition}:{service}:{self.region}:{self.account_id}:{resource}"

    def function_arn(self, guardrail: str) -> str:
        return self.arn("lambda", f"function:{names.function_name(self.stack, guardrail)}")

    @property
    def decision_bus_arn(self) -> str:
        return self.arn("events", f"event-bus/{names.decision_bus(self.stack)}")


def managed_in(stack: str) -> dict[str, Any]:
    """A resource this stack manages: tagged ``parkbrake:managed=true`` and ``parkbrake:stack=<stack>``."""
    return {"StringEquals": {**MANAGED_ONLY["StringEquals"], f"aws:ResourceTag/{tags.STACK}": stack}}


def statement(sid: str, actions: Sequence[str], resources: object, condition: object = None) -> Statement:
    body: Statement = {"Sid": sid, "Effect": "Allow", "Action": list(actions), "Resource": resources}
    if condition is not None:
        body["Condition"] = condition
    return body


def document(statements: Sequence[Statement]) -> PolicyDocument:
    return {"Version": VERSION, "Statement": list(statements)}


def trust_policy(service: str, condition: object = None) -> PolicyDocument:
    trust: Statement = {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
    if condition is not None:
        trust["Condition"] = condition
    return document([trust])


# --- statement groups the guardrails share -----------------------------------------------------------


def _basics(guardrail: str, grants: Grants, *, notifies: bool) -> list[Statement]:
    """Every guardrail: its own log group and its heartbeat; the alarm topic for those that publish."""
    name = names.function_name(grants.stack, guardrail)
    notify = [statement("Notify", ["sns:Publish"], grants.topic_arn)] if notifies else []
    return [
        statement(
            "OwnLogs",
            ["logs:CreateLogStream", "logs:PutLogEvents"],
            grants.arn("logs", f"log-group:/aws/lambda/{name}:*"),
        ),
        statement(
            "Heartbeat",
            ["cloudwatch:PutMetricData"],
            "*",  # PutMetricData has no resource-level permissions; the namespace condition scopes it
            {"StringEquals": {"cloudwatch:namespace": names.heartbeat_namespace()}},
        ),
        *notify,
        # Lambda's on-failure destination: an event that failed its retries, to this function's queue.
        statement(
            "DeadLetters",
            ["sqs:SendMessage"],
            grants.arn("sqs", names.dead_letter_queue(grants.stack, guardrail)),
        ),
    ]


def _stop_path(grants: Grants) -> list[Statement]:
    """The one stop path (lambdas/aws/stop_path.py) on this stack's managed hosts only: a stand-alone
    host is stopped, a stand-alone spot host terminated (so termination is granted on spot hosts only),
    a host in one of the stack's pools' Auto Scaling groups removed from it."""
    own = managed_in(grants.stack)
    spot = {"StringEquals": {**own["StringEquals"], "ec2:InstanceMarketType": "spot"}}
    statements = [
        statement("Describe", ["ec2:DescribeInstances"], "*"),  # no resource-level permissions
        statement("StopManagedInstancesOnly", ["ec2:StopInstances"], grants.arn("ec2", "instance/*"), own),
        statement(
            "TerminateManagedSpotInstancesOnly",
            ["ec2:TerminateInstances"],
            grants.arn("ec2", "instance/*"),
            spot,
        ),
    ]
    if grants.autoscaling_group_arns:
        statements.append(
            statement(
                "ShrinkManagedGroupsOnly",
                ["autoscaling:TerminateInstanceInAutoScalingGroup"],  # decrementing the desired capacity
                list(grants.autoscaling_group_arns),
                own,
            )
        )
    return statements


def _serving_rotation(grants: Grants) -> list[Statement]:
    """Rotating serving hosts (lambdas/aws/serving_rotation.py): read the groups, ask a managed group
    for a replacement, mark the old host; its removal is the stop path's group termination."""
    if not grants.autoscaling_group_arns:
        return []
    return [
        statement("DescribeGroups", ["autoscaling:DescribeAutoScalingGroups"], "*"),  # no resource-level
        statement(
            "ReplaceInManagedGroupsOnly",
            ["autoscaling:SetDesiredCapacity"],
            list(grants.autoscaling_group_arns),
            managed_in(grants.stack),
        ),
        statement(
            "MarkRotatingHostsOnly",
            ["ec2:CreateTags"],
            grants.arn("ec2", "instance/*"),
            {**managed_in(grants.stack), "ForAllValues:StringEquals": {"aws:TagKeys": [tags.ROTATING_SINCE]}},
        ),
    ]


def _deadline_schedules(grants: Grants, *, disarms: bool) -> list[Statement]:
    """Create and move (and, for ``disarms``, delete) the per-host deadline schedules, in their group
    only, as the scheduler role."""
    actions = ["scheduler:CreateSchedule", "scheduler:UpdateSchedule"]
    return [
        statement(
            "DeadlineSchedulesOnly",
            [*actions, "scheduler:DeleteSchedule"] if disarms else actions,
            grants.arn("scheduler", f"schedule/{names.deadline_schedule_group(grants.stack)}/*"),
        ),
        statement(
            "PassSchedulerRole",
            ["iam:PassRole"],
            grants.scheduler_role_arn,
            {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
        ),
    ]  # fmt: skip


def _adoption(grants: Grants) -> Statement:
    """Tagging a host of no stack as this stack's (``parkbrake:managed=true``, ``parkbrake:stack=<stack>``:
    the only tags, with exactly these values) so that the stop path may stop it: a managed host whose
    stack tag is missing (an orphan) and, with reap_untagged, an unmanaged accelerator host. Never a host
    another stack's tag names, never a type that carries no accelerator (lambdas/engines/sweeping.py)."""
    request = {f"aws:RequestTag/{tags.MANAGED}": "true", f"aws:RequestTag/{tags.STACK}": grants.stack}
    if not grants.reap_untagged:  # orphans only: the host is managed already
        request |= MANAGED_ONLY["StringEquals"]
    return statement(
        "AdoptHostsOfNoStack",
        ["ec2:CreateTags"],
        grants.arn("ec2", "instance/*"),
        {
            "StringEquals": request,
            # Absent (no stack) or already this stack's: the documented ...IfExists operator.
            "StringEqualsIfExists": {f"aws:ResourceTag/{tags.STACK}": grants.stack},
            "ForAllValues:StringEquals": {"aws:TagKeys": [tags.MANAGED, tags.STACK]},
            "StringLike": {"ec2:InstanceType": accelerator_filter_values()},
        },
    )


def _sweep(grants: Grants) -> list[Statement]:
    """Judging every host: which stacks exist (park parameters), the once-a-day notices, the chat
    channel's webhook (with one), and adopting a host of no stack so that the stop path may stop it."""
    statements = [
        statement(
            "ListStacks",
            ["ssm:GetParametersByPath"],
            [grants.arn("ssm", "parameter/parkbrake"), grants.arn("ssm", "parameter/parkbrake/*")],
        ),
        statement(
            "RememberNotices",
            ["dynamodb:PutItem", "dynamodb:DeleteItem"],
            grants.arn("dynamodb", f"table/{names.notices_table(grants.stack)}"),
        ),
    ]
    if grants.chat_webhook_secret_arn is not None:
        statements.append(
            statement("ReadChatWebhook", ["secretsmanager:GetSecretValue"], grants.chat_webhook_secret_arn)
        )
    return [*statements, _adoption(grants)]


# The guardrails outside the VPC that relay their decisions to the meter (guardrails.decisions.RELAYING_ACTORS).
DECISION_WRITERS = ("reaper", "deadline")


def _decision_relay(grants: Grants) -> list[Statement]:
    """With a ledger, the guardrails outside the VPC relay their decisions on the stack's decision bus."""
    if grants.database_secret_arn is None:
        return []
    return [statement("RelayDecisions", ["events:PutEvents"], grants.decision_bus_arn)]


def decision_bus_policy(grants: Grants, writers: Sequence[str] = DECISION_WRITERS) -> PolicyDocument:
    """The decision bus's resource policy: nobody but the writers' own roles puts events on it.

    An explicit ``Deny`` in a resource-based policy overrides any ``Allow`` an identity policy gives
    (IAM's evaluation logic, reference_policies_evaluation-logic.html), so a principal of this account
    allowed ``events:PutEvents`` on ``*`` is refused too. For a role's session ``aws:PrincipalArn`` is
    the role's ARN (reference_policies_condition-keys.html#condition-keys-principalarn).
    """
    roles = [f"arn:{grants.partition}:iam::{grants.account_id}:role/{names.function_name(grants.stack, w)}"
             for w in writers]  # fmt: skip
    deny: Statement = {
        "Sid": "OnlyTheGuardrailsWriteDecisions",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "events:PutEvents",
        "Resource": grants.decision_bus_arn,
        "Condition": {"ArnNotEquals": {"aws:PrincipalArn": roles}},
    }
    # No Allow here: the writers' own policies allow them (same account), and a condition, unlike a
    # Principal, does not need the roles to exist before the bus.
    return document([deny])


def _stopped_hosts(grants: Grants) -> list[Statement]:
    """Hosts stopped too long: their volumes priced; with terminate_stopped, each volume of a managed
    host snapshotted (the snapshot tagged as it is created) before the stop path's termination."""
    statements = [
        statement("DescribeVolumesAndSnapshots", ["ec2:DescribeVolumes", "ec2:DescribeSnapshots"], "*")
    ]
    if not grants.terminate_stopped:
        return statements
    snapshots = f"arn:{grants.partition}:ec2:{grants.region}::snapshot/*"
    own_request = {f"aws:RequestTag/{tags.MANAGED}": "true", f"aws:RequestTag/{tags.STACK}": grants.stack}
    return [
        *statements,
        statement(
            "SnapshotManagedVolumesOnly",
            ["ec2:CreateSnapshot"],
            grants.arn("ec2", "volume/*"),
            managed_in(grants.stack),
        ),
        statement(
            "CreateManagedSnapshotsOnly", ["ec2:CreateSnapshot"], snapshots, {"StringEquals": own_request}
        ),
        statement(
            "TagSnapshotsAsTheyAreCreated",
            ["ec2:CreateTags"],
            snapshots,
            {"StringEquals": {"ec2:CreateAction": "CreateSnapshot", **own_request}},
        ),
        # A host stopped too long is terminated once snapshotted, on-demand or spot.
        statement(
            "RetireManagedInstancesOnly",
            ["ec2:TerminateInstances"],
            grants.arn("ec2", "instance/*"),
            managed_in(grants.stack),
        ),
    ]


def _ledger(grants: Grants) -> list[Statement]:
    if grants.database_secret_arn is None:
        return []
    return [statement("ReadDatabaseSecret", ["secretsmanager:GetSecretValue"], grants.database_secret_arn)]


# --- one policy per guardrail Lambda --------------------------------------------------------------------


def reaper_policy(grants: Grants) -> PolicyDocument:
    """The sweep: stops hosts past their deadline and re-arms deadline schedules."""
    return document(
        [
            *_basics("reaper", grants, notifies=True),
            *_stop_path(grants),
            *_serving_rotation(grants),
            *_deadline_schedules(grants, disarms=False),
            *_sweep(grants),
            *_decision_relay(grants),
            *_stopped_hosts(grants),
        ]
    )


def deadline_policy(grants: Grants) -> PolicyDocument:
    """Per-host deadlines: arms them on ``running``, and stops a host already past its cap."""
    return document(
        [
            *_basics("deadline", grants, notifies=True),  # it judges a late host through the sweep
            *_stop_path(grants),
            *_serving_rotation(grants),  # a deadline judges its host through the sweep, rotation included
            *_deadline_schedules(grants, disarms=True),
            *_sweep(grants),
            *_decision_relay(grants),
        ]
    )


def launcher_policy(grants: Grants) -> PolicyDocument:
    """The nightly start: reads the park state and the pool, consults the ledger, sets the pool's capacity."""
    statements = [
        *_basics("launcher", grants, notifies=True),  # a pool left short for want of capacity
        statement(
            "ReadParkStateAndClosedDays",
            ["ssm:GetParameter"],
            [
                grants.arn("ssm", f"parameter{names.park_parameter(grants.stack)}"),
                grants.arn("ssm", f"parameter{names.calendar_parameter(grants.stack)}"),
            ],
        ),
        # The organisation's park switches in the account, found under /parkbrake (a member account's
        # stack is not told which hub deploys its spokes there: lambdas.engines.launching).
        statement(
            "ReadOrganisationParkSwitches",
            ["ssm:GetParametersByPath"],
            [grants.arn("ssm", "parameter/parkbrake"), grants.arn("ssm", "parameter/parkbrake/*")],
        ),
        statement(
            "DescribePool",
            [
                "autoscaling:DescribeAutoScalingGroups",
                "autoscaling:DescribeScalingActivities",  # what a start got: the launches EC2 refused
                "ec2:DescribeLaunchTemplateVersions",
            ],
            "*",
        ),
    ]
    if grants.nightly_group_arn is not None:
        statements.append(
            statement(
                "StartNightlyPool",
                ["autoscaling:SetDesiredCapacity"],
                grants.nightly_group_arn,
                managed_in(grants.stack),
            )
        )
    # An admission re-arms (or removes) the tenant's budget crossing check (lambdas.engines.budgeting.rearm_crossing).
    return document([*statements, *_ledger(grants), *_deadline_schedules(grants, disarms=True)])


def meter_policy(grants: Grants) -> PolicyDocument:
    """The usage ledger's meter: attributes each state change from EC2 (the host, its type's accelerators),
    records it, tells people about hosts it cannot price, and checks the changed tenants' budgets at
    once (lambdas.engines.budgeting: which may stop hosts, and arms each tenant's budget-crossing check)."""
    describe = statement(
        "DescribeHosts", ["ec2:DescribeInstances", "ec2:DescribeInstanceTypes"], "*"
    )  # no resource-level permissions
    return document([*_basics("meter", grants, notifies=True), describe, *_stop_path(grants),
                     *_deadline_schedules(grants, disarms=True), *_ledger(grants)])  # fmt: skip


def budget_policy(grants: Grants) -> PolicyDocument:
    """The budget check: spend caps per tenant, enforced through the stop path, re-armed at each
    tenant's crossing (and the check removed when nothing would cross)."""
    return document([*_basics("budget", grants, notifies=True), *_stop_path(grants),
                     *_deadline_schedules(grants, disarms=True), *_ledger(grants)])  # fmt: skip


def reconciler_policy(grants: Grants) -> PolicyDocument:
    """The reconciler: lists the accelerator hosts and appends the ledger's repairs (and tells people
    about hosts it cannot price), and records the spot prices of its spot hosts' zones."""
    describe = statement(
        "DescribeHosts",
        ["ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeSpotPriceHistory"],
        "*",
    )  # no resource-level permissions
    return document([*_basics("reconciler", grants, notifies=True), describe, *_ledger(grants)])


GUARDRAIL_POLICIES: dict[str, Callable[[Grants], PolicyDocument]] = {
    "reaper": reaper_policy,
    "deadline": deadline_policy,
    "launcher": launcher_policy,
    "meter": meter_policy,
    "budget": budget_policy,
    "reconciler": reconciler_policy,
}


def scheduler_policy(
    invoked_function_arns: Sequence[str], dead_letter_arns: Sequence[str] = ()
) -> PolicyDocument:
    """EventBridge Scheduler's role: invoke the functions its schedules target, and write a delivery that
    failed its retries to their dead-letter queues; nothing else."""
    statements = [statement("InvokeGuardrails", ["lambda:InvokeFunction"], list(invoked_function_arns))]
    if dead_letter_arns:
        statements.append(statement("DeadLetters", ["sqs:SendMessage"], list(dead_letter_arns)))
    return document(statements)


# --- GPU hosts --------------------------------------------------------------------------------------------

# What Session Manager needs on the host, instead of AmazonSSMManagedInstanceCore (which also reads every
# SSM parameter and S3 object the account lets it). These calls have no resource-level permissions.
SESSION_MANAGER_ACTIONS = (
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
)
# What the ECS agent needs to join one cluster, instead of AmazonEC2ContainerServiceforEC2Role (which joins
# any cluster and pulls any ECR image; tasks pull their images through their execution role).
ECS_REGISTER_ACTIONS = (
    "ecs:RegisterContainerInstance",
    "ecs:DeregisterContainerInstance",
    "ecs:SubmitAttachmentStateChanges",
    "ecs:SubmitContainerStateChange",
    "ecs:SubmitTaskStateChange",
)
ECS_AGENT_ACTIONS = ("ecs:Poll", "ecs:StartTelemetrySession", "ecs:UpdateContainerInstancesState")


@dataclass(frozen=True)
class HostGrants:
    """What a GPU host's role may act on: its own group and, when it serves, its own ECS cluster."""

    partition: str
    account_id: str
    region: str
    autoscaling_group_arn: str
    ecs_cluster_name: str | None = None
    # The pinned host-tools artifact the stack uploads (bucket ARN/key), when the hosts install from it.
    tools_object_arn: str | None = None

    def arn(self, service: str, resource: str) -> str:
        return f"arn:{self.partition}:{service}:{self.region}:{self.account_id}:{resource}"


def host_policy(grants: HostGrants) -> PolicyDocument:
    """A GPU host's own permissions: leave its own (managed) group, stop its own instance, Session
    Manager, its ECS cluster.

    Auto Scaling has no condition key naming the instance a call acts on, so the narrowest grant for
    leaving the group is the host's own group.
    """
    statements = [
        statement(
            "LeaveOwnGroupOnly",
            ["autoscaling:TerminateInstanceInAutoScalingGroup"],
            grants.autoscaling_group_arn,
            MANAGED_ONLY,
        ),
        # The self-stop's last resort when the OS shutdown did not happen: the EC2 API, on the
        # instance the role's credentials were issued to, and no other.
        statement(
            "StopOwnInstanceOnly",
            ["ec2:StopInstances", "ec2:TerminateInstances"],
            grants.arn("ec2", "instance/*"),
            {"StringEquals": {"aws:ARN": "${ec2:SourceInstanceARN}", **MANAGED_ONLY["StringEquals"]}},
        ),
        statement("SessionManager", SESSION_MANAGER_ACTIONS, "*"),
    ]
    if grants.tools_object_arn is not None:
        statements.append(statement("ReadHostTools", ["s3:GetObject"], grants.tools_object_arn))
    if grants.ecs_cluster_name is not None:
        cluster = grants.ecs_cluster_name
        statements += [
            statement("JoinOwnCluster", ECS_REGISTER_ACTIONS, grants.arn("ecs", f"cluster/{cluster}")),
            statement(
                "AgentInOwnCluster", ECS_AGENT_ACTIONS, grants.arn("ecs", f"container-instance/{cluster}/*")
            ),
            statement(
                "TagOwnRegistration",
                ["ecs:TagResource"],
                grants.arn("ecs", f"container-instance/{cluster}/*"),
                {"StringEquals": {"ecs:CreateAction": "RegisterContainerInstance"}},
            ),
            statement("DiscoverPollEndpoint", ["ecs:DiscoverPollEndpoint"], "*"),
        ]
    return document(statements)
