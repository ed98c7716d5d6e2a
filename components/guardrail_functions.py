"""The guardrails: the sweep, the per-host deadlines, the nightly launcher, the ledger's meter and
budget, their least-privilege roles, their triggers and the alarms that page when one errors or
goes quiet.

The guardrails are never parked. ``parked`` changes exactly two things here: the nightly schedule is
DISABLED and the SSM park parameter reads ``true``. The reaper's schedule, the state-change rule and
every alarm stay as they are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import pulumi
import pulumi_aws as aws

from components import guardrail_schedules as schedules
from components.common import child_of, named_child_of, type_token
from components.guardrail_alerting import GuardrailAlerting, GuardrailAlertingArgs
from components.guardrail_lambdas import (
    BUDGET,
    DEADLINE,
    FUNCTIONS,
    LAUNCHER,
    LEARN_MEMBER_ACCOUNTS,
    METER,
    REAPER,
    RECONCILER,
    Function,
)
from components.guardrail_schedules import NightlyStart
from components.iam_policies import GUARDRAIL_POLICIES, Grants, decision_bus_policy, trust_policy
from components.lambda_archive import (
    CODE_ARCHIVE,
    DEPENDENCY_LAYER,
    RUNTIME,
    FunctionSpec,
    lambda_functions,
    package_dir,
)
from components.org_spoke_parts import STATE_CHANGE_ACTED_ON, TAG_CHANGE_FORWARD
from components.rds_ca import LAYER_PATH as RDS_CA_LAYER_PATH
from guardrails import names, settings, tags
from guardrails.decisions import RELAY_DETAIL_TYPE, RELAY_SOURCE
from guardrails.durations import format_duration
from guardrails.schedules import rate_expression
from guardrails.settings_table import Tuning, tuning_environment
from guardrails.stack_budgets import STACK_BUDGETS

LOG_RETENTION_DAYS = 30
VPC_ACCESS_POLICY = "arn:aws:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole"
# libpq's own variables for the functions that use the ledger: the cluster refuses plain connections and
# the client verifies it against AWS's RDS CA bundle, which the dependency layer carries (layers unpack
# under /opt).
DATABASE_TLS = {"PGSSLMODE": "verify-full", "PGSSLROOTCERT": f"/opt/{RDS_CA_LAYER_PATH}"}
# The states the deadline and the ledger act on (``pending`` changes nothing). The event carries only the
# instance id and state, not its type, so EventBridge cannot filter on accelerator types: the handlers
# drop other hosts after one DescribeInstances.
STATE_CHANGE_PATTERN = json.dumps(STATE_CHANGE_ACTED_ON)
# A host's tag change, as the spokes forward it: one pattern for both (components/org_spoke_parts.py).
TAG_CHANGE_PATTERN = json.dumps(TAG_CHANGE_FORWARD, sort_keys=True)
# The reaper's and the deadlines' decisions, relayed to the meter for the decision log (lambdas.aws.decision_log):
# they run outside the VPC and never reach the database themselves.
RELAY_PATTERN = json.dumps({"source": [RELAY_SOURCE], "detail-type": [RELAY_DETAIL_TYPE]})
BUDGET_EVERY = timedelta(minutes=1)
RECONCILER_EVERY = timedelta(minutes=15)
# EventBridge keeps retrying a state change for the meter up to its own maximum, a day (Lambda's
# asynchronous retries stop at six hours): the ledger's database may be down that long.
METER_TARGET_EVENT_AGE = timedelta(hours=24)


@dataclass
class GuardrailsArgs:
    stack: str
    region: str
    parked: bool
    sweep_every: timedelta
    alarm_email: str | None
    alarm_topic_arn: str | None
    pool_caps: Mapping[str, timedelta]
    nightly: NightlyStart | None
    autoscaling_group_arns: Sequence[pulumi.Input[str]]
    database_secret_arn: pulumi.Input[str] | None
    vpc_id: pulumi.Input[str]
    subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]]
    tags: Mapping[str, str]
    # Layers providing psycopg to the functions that use the ledger database (launcher, meter, budget).
    database_layer_arns: Sequence[pulumi.Input[str]] = ()
    # The settings table's values (guardrails.settings_table): every row goes into the Lambdas' environment.
    tuning: Tuning = field(default_factory=Tuning)
    # The stack's declared tenants: a host's parkbrake:tenant tag that is none of them is metered unattributed.
    tenants: Sequence[str] = ()
    # The tenants' budgets the stack declares (guardrails.stack_budgets.budgets_json): the ledger's
    # Lambdas get them as PARKBRAKE_STACK_BUDGETS and the reconciler applies them after a deploy.
    stack_budgets: str | None = None
    # An organisation's hub only: what its guardrails read besides the settings table (where the
    # central sweep finds the spokes: PARKBRAKE_SPOKES_PARAMETER).
    hub_environment: Mapping[str, str] = field(default_factory=dict)
    # The hub's meter, budget and reconciler only, besides: where they learn their member accounts
    # (PARKBRAKE_SPOKES_PARAMETER in either sweep form; the reaper has it only with sweep: central,
    # which it means to the reaper).
    member_accounts_environment: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DatabaseAccess:
    """How the functions that use the ledger reach it: the secret, and the VPC security group they run in."""

    secret_arn: pulumi.Input[str]
    security_group_id: pulumi.Output[str]


def deployed_functions(args: GuardrailsArgs) -> list[Function]:
    """The reaper and the deadlines always; the launcher with a nightly start; meter, budget and
    reconciler with a ledger."""
    functions = [REAPER, DEADLINE]
    if args.nightly is not None:
        functions.append(LAUNCHER)
    if args.database_secret_arn is not None:
        functions += [METER, BUDGET, RECONCILER]
    return functions


# --- environment and IAM ----------------------------------------------------------------------------


def lambda_environment(
    args: GuardrailsArgs,
    *,
    topic_arn: pulumi.Input[str],
    reaper_arn: pulumi.Input[str],
    scheduler_role_arn: pulumi.Input[str],
    deadline_dead_letter_arn: pulumi.Input[str],
) -> dict[str, pulumi.Input[str]]:
    """The Lambda environment of docs/configuration.md, read by ``guardrails.settings`` (and by the CLI):
    every row of the settings table, then what the stack wires in (``settings_table.WIRED``)."""
    return {
        **tuning_environment(args.tuning),
        settings.STACK: args.stack,
        settings.REGIONS: args.region,
        settings.POOL_MAX_RUNTIMES: ",".join(
            f"{pool}={format_duration(cap)}" for pool, cap in args.pool_caps.items()
        ),
        settings.SNS_TOPIC_ARN: topic_arn,
        settings.DEADLINE_TARGET_ARN: reaper_arn,
        settings.SCHEDULER_ROLE_ARN: scheduler_role_arn,
        settings.DEADLINE_DEAD_LETTER_ARN: deadline_dead_letter_arn,
        settings.NOTICES_TABLE: names.notices_table(args.stack),
        **args.hub_environment,
        **({settings.TENANTS: ",".join(sorted(args.tenants))} if args.tenants else {}),
        # With a ledger, a guardrail outside the VPC relays its decisions to the meter on this bus.
        **(
            {settings.DECISION_BUS: names.decision_bus(args.stack)}
            if args.database_secret_arn is not None
            else {}
        ),
    }


def grants_output(
    args: GuardrailsArgs,
    *,
    partition: pulumi.Input[str],
    account_id: pulumi.Input[str],
    topic_arn: pulumi.Input[str],
    scheduler_role_arn: pulumi.Input[str],
) -> pulumi.Output[Grants]:
    """The roles' grants once every ARN they name is known."""
    return pulumi.Output.all(
        partition=partition,
        account_id=account_id,
        topic_arn=topic_arn,
        scheduler_role_arn=scheduler_role_arn,
        autoscaling_group_arns=pulumi.Output.all(*args.autoscaling_group_arns),
        nightly_group_arn=args.nightly.autoscaling_group_arn if args.nightly else None,
        database_secret_arn=args.database_secret_arn,
    ).apply(
        lambda arns: Grants(
            region=args.region,
            stack=args.stack,
            reap_untagged=args.tuning.reap_untagged,
            terminate_stopped=args.tuning.terminate_stopped,
            chat_webhook_secret_arn=args.tuning.chat_webhook_secret_arn,
            **{**arns, "autoscaling_group_arns": tuple(arns["autoscaling_group_arns"])},
        )
    )


# --- alarms -------------------------------------------------------------------------------------------


def heartbeat_alarm_shape(every: timedelta) -> dict[str, int]:
    """Minute periods spanning one run interval and a minute of slack, all of them empty to alarm.

    A guardrail that runs every N minutes leaves at most N-1 empty minutes between heartbeats, so N+1
    empty minutes mean a run was missed: the page comes within a minute or two of the missed run.
    """
    periods = max(1, int(every.total_seconds()) // 60) + 1
    return {"period": 60, "evaluation_periods": periods, "datapoints_to_alarm": periods}


# --- the component ------------------------------------------------------------------------------------


class Guardrails(pulumi.ComponentResource):
    topic_arn: pulumi.Output[str]
    reaper_function_arn: pulumi.Output[str]
    function_names: dict[str, pulumi.Output[str]]
    scheduler_role_arn: pulumi.Output[str]
    park_parameter_name: pulumi.Output[str]
    # The security group the ledger's functions run in (None without a database): what the database admits.
    database_security_group_id: pulumi.Output[str] | None

    def __init__(self, name: str, args: GuardrailsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(type_token("Guardrails"), name, None, opts)
        self._args = args
        invoke = pulumi.InvokeOutputOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        account_id = aws.get_caller_identity_output(opts=invoke).account_id
        functions = deployed_functions(args)
        topic_arn = self._topic()
        scheduler_role = schedules.scheduler_role(self, args.stack, account_id, args.tags)
        grants = grants_output(
            args,
            partition=partition,
            account_id=account_id,
            topic_arn=topic_arn,
            scheduler_role_arn=scheduler_role.arn,
        )
        # The budget is invoked by its own crossing checks.
        invoked = [function.guardrail for function in functions if function in (REAPER, LAUNCHER, BUDGET)]
        scheduler_permission = schedules.scheduler_role_policy(self, invoked, grants, scheduler_role)
        environment = lambda_environment(
            args,
            topic_arn=topic_arn,
            reaper_arn=grants.apply(lambda known: known.function_arn(REAPER.guardrail)),
            scheduler_role_arn=scheduler_role.arn,
            # Deadline schedules invoke the reaper: a delivery that fails lands in the reaper's queue.
            deadline_dead_letter_arn=grants.apply(
                lambda known: known.arn("sqs", names.dead_letter_queue(args.stack, REAPER.guardrail))
            ),
        )
        database = self._database_access()
        self.database_security_group_id = database.security_group_id if database else None
        specs, code, layer = self._artifacts(functions)
        deployed = {
            function.guardrail: self._function(
                function,
                spec=specs[function.guardrail],
                grants=grants,
                environment=environment,
                artifacts=(code, layer.arn),
                database=database,
            )
            for function in functions
        }
        alerting = GuardrailAlerting(
            "alerting",
            GuardrailAlertingArgs(args.stack, deployed, topic_arn, args.sweep_every, args.tags),
            opts=child_of(self),
        )
        schedules.declare_schedules(
            self,
            schedules.ScheduleArgs(args.stack, args.sweep_every, args.parked, args.nightly, args.tags),
            reaper_arn=deployed[REAPER.guardrail].arn,
            launcher_arn=deployed[LAUNCHER.guardrail].arn if LAUNCHER.guardrail in deployed else None,
            role_arn=scheduler_role.arn,
            permission=scheduler_permission,
            alerting=alerting,
        )
        self._event_rules(deployed, alerting, grants)
        self._alarms(deployed, topic_arn)
        park_parameter = self._park_parameter()

        self.topic_arn = pulumi.Output.from_input(topic_arn)
        self.reaper_function_arn = deployed[REAPER.guardrail].arn
        self.function_names = {guardrail: function.name for guardrail, function in deployed.items()}
        self.scheduler_role_arn = scheduler_role.arn
        self.park_parameter_name = park_parameter.name
        self.register_outputs(
            {
                "topic_arn": self.topic_arn,
                "reaper_function_arn": self.reaper_function_arn,
                "function_names": self.function_names,
                "scheduler_role_arn": self.scheduler_role_arn,
                "park_parameter_name": self.park_parameter_name,
            }
        )

    def _artifacts(
        self, functions: Sequence[Function]
    ) -> tuple[dict[str, FunctionSpec], pulumi.FileArchive, aws.lambda_.LayerVersion]:
        """The artifacts `parkbrake package` writes, built by stacks/__main__.py before the program runs:
        each function's spec, the code archive, and the dependency layer."""
        artifacts = package_dir(self._args.stack)
        specs = {spec.name: spec for spec in lambda_functions(function.guardrail for function in functions)}
        layer = aws.lambda_.LayerVersion(
            "dependencies",
            layer_name=f"{names.prefix(self._args.stack)}-dependencies",
            description="the guardrail Lambdas' libraries (components/lambda_requirements.txt)",
            code=pulumi.FileArchive(str(artifacts / DEPENDENCY_LAYER)),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=sorted({spec.architecture for spec in specs.values()}),
            opts=child_of(self),
        )
        return specs, pulumi.FileArchive(str(artifacts / CODE_ARCHIVE)), layer

    def _event_rules(
        self,
        deployed: Mapping[str, aws.lambda_.Function],
        alerting: GuardrailAlerting,
        grants: pulumi.Output[Grants],
    ) -> None:
        """EC2 state changes to the deadline (and the meter); the relayed decisions, from the stack's own
        decision bus, to the meter; the budget clock to the budget check."""
        args = self._args
        state_change_rule = aws.cloudwatch.EventRule(
            "ec2-state-change",
            name=f"{names.prefix(args.stack)}-ec2-state-change",
            description="EC2 instance state changes: per-host deadlines and the usage ledger",
            event_pattern=STATE_CHANGE_PATTERN,
            tags=dict(args.tags),
            opts=named_child_of(self),
        )
        for function in (DEADLINE, METER):
            if function.guardrail in deployed:
                self._trigger(
                    function, "state-change", state_change_rule, deployed[function.guardrail], alerting
                )
        self._tag_change_rule(deployed[DEADLINE.guardrail], alerting)
        if METER.guardrail in deployed:
            # Its own bus, not the default one anybody in the account may put events on: its policy
            # refuses every principal but the writers' roles (iam_policies.decision_bus_policy).
            bus = aws.cloudwatch.EventBus(
                "decisions",
                name=names.decision_bus(args.stack),
                tags=dict(args.tags),
                opts=named_child_of(self),
            )
            aws.cloudwatch.EventBusPolicy(
                "decisions",
                event_bus_name=bus.name,
                policy=grants.apply(lambda known: json.dumps(decision_bus_policy(known))),
                opts=child_of(self),
            )
            decisions_rule = aws.cloudwatch.EventRule(
                "guardrail-decisions",
                name=f"{names.prefix(args.stack)}-guardrail-decisions",
                description="the reaper's and the deadlines' decisions, onto the ledger's decision log",
                event_bus_name=bus.name,
                event_pattern=RELAY_PATTERN,
                tags=dict(args.tags),
                opts=named_child_of(self),
            )
            self._trigger(
                METER,
                "decisions",
                decisions_rule,
                deployed[METER.guardrail],
                alerting,
                event_bus_name=bus.name,
            )
        # (function, the rule's logical name — kept, since renaming it replaces the rule —, what it does, how often)
        clocks = (
            (RECONCILER, "reconciler-clock", "the ledger's reconciler: EC2's accelerator hosts against the ledger",
             RECONCILER_EVERY),
            (BUDGET, "budget-every-minute", "the budget check: spend caps per tenant", BUDGET_EVERY),
        )  # fmt: skip
        for function, rule_name, description, every in clocks:
            if function.guardrail not in deployed:
                continue
            clock_rule = aws.cloudwatch.EventRule(
                rule_name,
                name=f"{names.prefix(args.stack)}-{function.guardrail}",
                description=description,
                schedule_expression=rate_expression(every),
                tags=dict(args.tags),
                opts=named_child_of(self),
            )
            self._trigger(function, "clock", clock_rule, deployed[function.guardrail], alerting)

    def _tag_change_rule(self, deadline: aws.lambda_.Function, alerting: GuardrailAlerting) -> None:
        """A host's tags changed (a lowered cap, an exemption): its deadline judged again. The tagging
        service's event (source aws.tag, "Tag Change on Resource": EventBridge events reference,
        events-ref-tag.html), EC2 instances' only."""
        args = self._args
        rule = aws.cloudwatch.EventRule(
            "ec2-tag-change",
            name=f"{names.prefix(args.stack)}-ec2-tag-change",
            description="EC2 instance tag changes: a host's deadline judged again",
            event_pattern=TAG_CHANGE_PATTERN,
            tags=dict(args.tags),
            opts=named_child_of(self),
        )
        self._trigger(DEADLINE, "tag-change", rule, deadline, alerting)

    def _alarms(self, deployed: Mapping[str, aws.lambda_.Function], topic_arn: pulumi.Input[str]) -> None:
        """Errors of every function; a missing heartbeat of every periodic one."""
        for function in FUNCTIONS:
            if function.guardrail in deployed:
                self._errors_alarm(function, deployed[function.guardrail], topic_arn)
        heartbeats = {REAPER: self._args.sweep_every, BUDGET: BUDGET_EVERY, RECONCILER: RECONCILER_EVERY}
        for function, every in heartbeats.items():
            if function.guardrail in deployed:
                self._heartbeat_alarm(function, every, topic_arn)

    def _park_parameter(self) -> aws.ssm.Parameter:
        args = self._args
        return aws.ssm.Parameter(
            "park-state",
            name=names.park_parameter(args.stack),
            type="String",
            # Not a secret: `insecure_value` keeps it readable in plans and diffs.
            insecure_value="true" if args.parked else "false",
            description="parkbrake park state: the nightly launcher refuses to start pools while true",
            tags=dict(args.tags),
            opts=named_child_of(self),
        )

    def _topic(self) -> pulumi.Input[str]:
        """The alarm topic: adopted when configured, else created; e-mail subscribed when given."""
        args = self._args
        topic_arn: pulumi.Input[str]
        if args.alarm_topic_arn:
            topic_arn = args.alarm_topic_arn
        else:
            topic = aws.sns.Topic(
                "alarms",
                name=names.alarm_topic(args.stack),
                tags=dict(args.tags),
                opts=named_child_of(self),
            )
            topic_arn = topic.arn
        if args.alarm_email:
            aws.sns.TopicSubscription(
                "alarms-email",
                topic=topic_arn,
                protocol="email",
                endpoint=args.alarm_email,
                opts=child_of(self),
            )
        return topic_arn

    def _database_access(self) -> DatabaseAccess | None:
        args = self._args
        if args.database_secret_arn is None:
            return None
        security_group = aws.ec2.SecurityGroup(
            "guardrails-lambdas",
            description="guardrail Lambdas in the VPC: outbound only (AWS APIs, the ledger database)",
            vpc_id=args.vpc_id,
            egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]}],
            tags=dict(args.tags),
            opts=child_of(self),
        )
        return DatabaseAccess(args.database_secret_arn, security_group.id)

    def _function(
        self,
        function: Function,
        *,
        spec: FunctionSpec,
        grants: pulumi.Output[Grants],
        environment: Mapping[str, pulumi.Input[str]],
        artifacts: tuple[pulumi.Archive, pulumi.Output[str]],
        database: DatabaseAccess | None,
    ) -> aws.lambda_.Function:
        args = self._args
        guardrail = function.guardrail
        function_name = names.function_name(args.stack, guardrail)
        function_tags = dict(args.tags)
        if function.database_while_hosts_run:
            function_tags[tags.DATABASE_USE] = tags.DATABASE_WHILE_HOSTS_RUN
        role, permissions = self._role(function, grants)
        # The functions that reach the ledger database run in the VPC; the reaper and the deadlines stay
        # outside it, so a network or database outage can never silence them.
        database = database if function.uses_database else None
        variables = dict(environment)
        if function in LEARN_MEMBER_ACCOUNTS:
            variables.update(args.member_accounts_environment)
        if database is not None:
            variables.update(self._database_variables(database))
            permissions.append(
                aws.iam.RolePolicyAttachment(
                    f"{guardrail}-vpc-access",
                    role=role.name,
                    policy_arn=VPC_ACCESS_POLICY,
                    opts=child_of(self),
                )
            )
        log_group = aws.cloudwatch.LogGroup(
            guardrail,
            name=f"/aws/lambda/{function_name}",
            retention_in_days=LOG_RETENTION_DAYS,
            tags=function_tags,
            opts=named_child_of(self),
        )
        return aws.lambda_.Function(
            guardrail,
            name=function_name,
            role=role.arn,
            runtime=spec.runtime,
            handler=spec.handler,
            architectures=[spec.architecture],
            code=artifacts[0],
            timeout=function.timeout_s,
            memory_size=256,
            environment={"variables": variables},
            vpc_config=(
                {"subnet_ids": args.subnet_ids, "security_group_ids": [database.security_group_id]}
                if database is not None
                else None
            ),
            layers=[artifacts[1], *(args.database_layer_arns if database is not None else ())],
            tags=function_tags,
            opts=named_child_of(self, depends_on=[log_group, *permissions]),
        )

    def _database_variables(self, database: DatabaseAccess) -> dict[str, pulumi.Input[str]]:
        """What a function that reaches the ledger is told: the secret, TLS, and the stack's budgets."""
        variables: dict[str, pulumi.Input[str]] = {
            settings.DATABASE_SECRET_ARN: database.secret_arn,
            **DATABASE_TLS,
        }
        if self._args.stack_budgets is not None:
            variables[STACK_BUDGETS] = self._args.stack_budgets
        return variables

    def _role(
        self, function: Function, grants: pulumi.Output[Grants]
    ) -> tuple[aws.iam.Role, list[pulumi.CustomResource]]:
        """The function's own role, with its policy document (``components.iam_policies``)."""
        guardrail = function.guardrail
        role = aws.iam.Role(
            guardrail,
            name=names.function_name(self._args.stack, guardrail),
            description=f"the {guardrail} guardrail Lambda",
            assume_role_policy=json.dumps(trust_policy("lambda.amazonaws.com")),
            tags=dict(self._args.tags),
            opts=named_child_of(self),
        )
        build_policy = GUARDRAIL_POLICIES[guardrail]
        policy = aws.iam.RolePolicy(
            guardrail,
            role=role.id,
            policy=grants.apply(lambda known: json.dumps(build_policy(known))),
            opts=child_of(self),
        )
        return role, [policy]

    def _trigger(
        self,
        function: Function,
        source: str,
        rule: aws.cloudwatch.EventRule,
        target: aws.lambda_.Function,
        alerting: GuardrailAlerting,
        *,
        event_bus_name: pulumi.Input[str] | None = None,
    ) -> None:
        aws.lambda_.Permission(
            f"{function.guardrail}-from-{source}",
            action="lambda:InvokeFunction",
            function=target.name,
            principal="events.amazonaws.com",
            source_arn=rule.arn,
            opts=child_of(self),
        )
        aws.cloudwatch.EventTarget(
            f"{function.guardrail}-from-{source}",
            rule=rule.name,
            event_bus_name=event_bus_name,
            arn=target.arn,
            **alerting.delivery(function.guardrail, METER_TARGET_EVENT_AGE if function is METER else None),
            opts=child_of(self),
        )

    def _errors_alarm(
        self, function: Function, target: aws.lambda_.Function, topic_arn: pulumi.Input[str]
    ) -> None:
        guardrail = function.guardrail
        aws.cloudwatch.MetricAlarm(
            f"{guardrail}-errors",
            name=f"{names.function_name(self._args.stack, guardrail)}-errors",
            alarm_description=f"the {guardrail} guardrail Lambda failed (an exception, a timeout, a missing permission)",
            namespace="AWS/Lambda",
            metric_name="Errors",
            dimensions={"FunctionName": target.name},
            statistic="Sum",
            period=60,
            evaluation_periods=1,
            comparison_operator="GreaterThanThreshold",
            threshold=0,
            # No invocations means no errors; silence is the heartbeat alarm's business.
            treat_missing_data="notBreaching",
            alarm_actions=[topic_arn],
            ok_actions=[topic_arn],
            tags=dict(self._args.tags),
            opts=named_child_of(self),
        )

    def _heartbeat_alarm(self, function: Function, every: timedelta, topic_arn: pulumi.Input[str]) -> None:
        guardrail = function.guardrail
        aws.cloudwatch.MetricAlarm(
            f"{guardrail}-heartbeat",
            name=f"{names.function_name(self._args.stack, guardrail)}-heartbeat",
            alarm_description=(
                f"the {guardrail} guardrail has not completed a run for longer than its interval "
                f"({format_duration(every)}): it is failing, denied, or not being invoked"
            ),
            namespace=names.heartbeat_namespace(),
            metric_name=names.HEARTBEAT_METRIC,
            # The stack's own: two stacks in one region must not mask each other's silent guardrail.
            dimensions={"Guardrail": guardrail, "Stack": self._args.stack},
            statistic="SampleCount",
            comparison_operator="LessThanThreshold",
            threshold=1,
            treat_missing_data="breaching",
            **heartbeat_alarm_shape(every),
            alarm_actions=[topic_arn],
            ok_actions=[topic_arn],
            tags=dict(self._args.tags),
            opts=named_child_of(self),
        )
