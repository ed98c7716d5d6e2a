"""Guardrails under the mock engine: the park switch, triggers, alarms, the environment."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pulumi
import pytest
from holiday_calendar import CHRISTMAS, ics

from components.guardrail_functions import Guardrails, NightlyStart
from guardrails import names
from guardrails.errors import InputError
from guardrails.schedules import eventbridge_cron, rate_expression
from guardrails.settings import settings_from_environment
from stacks.offline import run_offline
from tests.components.guardrails_build import (
    ACCOUNT,
    ALARM,
    BUDGET_ARN,
    EVENT_TARGET,
    FUNCTION,
    PARAMETER,
    PERMISSION,
    REAPER_ARN,
    ROLE_POLICY,
    RULE,
    SCHEDULE,
    SCHEDULE_GROUP,
    SECRET_ARN,
    SUBSCRIPTION,
    TOPIC,
    TRAINING_GROUP,
    actions,
    all_statements,
    arguments,
    build,
    by_sid,
    configured,
    environment_of,
    statements_of,
)
from tests.components.offline_outputs import changed_inputs

# --- the park switch -------------------------------------------------------------------------------------


def test_parking_changes_only_the_nightly_schedule_state_and_the_park_parameter() -> None:
    assert changed_inputs(configured(parked=False), configured(parked=True)) == {
        (SCHEDULE, "nightly-training", "state"),
        (PARAMETER, "park-state", "insecureValue"),
    }


@pytest.mark.parametrize(
    ("parked", "nightly_state", "parameter"), [(False, "ENABLED", "false"), (True, "DISABLED", "true")]
)
def test_park_switch_values(parked: bool, nightly_state: str, parameter: str) -> None:
    run = configured(parked=parked)

    assert run.named(SCHEDULE, "nightly-training").inputs["state"] == nightly_state
    assert run.named(SCHEDULE, "reaper").inputs["state"] == "ENABLED"
    park = run.named(PARAMETER, "park-state").inputs
    assert (park["name"], park["type"], park["insecureValue"]) == (
        "/parkbrake/dev/parked",
        "String",
        parameter,
    )
    alarms = {alarm.inputs["name"] for alarm in run.of_type(ALARM)}
    assert {"parkbrake-dev-reaper-errors", "parkbrake-dev-reaper-heartbeat"} <= alarms
    # the state-change and tag-change rules, the budget clock, the reconciler's and the relayed decisions'
    assert len(run.of_type(RULE)) == 5


# --- triggers -----------------------------------------------------------------------------------------------


def test_reaper_sweeps_on_a_rate_schedule_in_the_stack_group_as_the_scheduler_role() -> None:
    run = build(sweep_every=timedelta(minutes=15))

    schedule = run.named(SCHEDULE, "reaper").inputs
    assert schedule["name"] == names.reaper_schedule("dev")
    assert schedule["groupName"] == names.schedule_group("dev")
    assert schedule["scheduleExpression"] == "rate(15 minutes)"
    assert schedule["flexibleTimeWindow"] == {"mode": "OFF"}
    target = schedule["target"]
    assert json.loads(target["input"]) == {"dry_run": False}
    assert target["arn"] == "arn:aws:lambda:us-east-1:123456789012:reaper"  # the function's (mock) ARN
    assert target["roleArn"].endswith(":scheduler")
    assert target["retryPolicy"]["maximumEventAgeInSeconds"] == 900


def test_nightly_start_payload_timezone_and_eventbridge_cron() -> None:
    schedule = configured().named(SCHEDULE, "nightly-training").inputs

    assert schedule["name"] == names.nightly_schedule("dev", "training")
    assert schedule["groupName"] == names.schedule_group("dev")
    assert schedule["scheduleExpression"] == "cron(0 2 ? * MON-FRI *)"
    assert schedule["scheduleExpressionTimezone"] == "Europe/Berlin"
    assert json.loads(schedule["target"]["input"]) == {"pool": "training", "capacity": 3}
    assert schedule["target"]["arn"].endswith(":launcher")


@pytest.mark.parametrize(("events", "tier"), [(1, "Standard"), (40, "Advanced")])
def test_a_calendar_of_closed_days_goes_to_its_parameter_and_the_nightly_start_names_it(
    events: int, tier: str
) -> None:
    calendar = ics(*[CHRISTMAS.replace("christmas@", f"day-{n}@") for n in range(events)])
    nightly = NightlyStart("training", "0 2 * * 1-5", "Europe/Berlin", 3, TRAINING_GROUP, calendar=calendar)
    run = build(nightly=nightly)

    parameter = run.named(PARAMETER, "closed-days").inputs
    assert (parameter["name"], parameter["insecureValue"], parameter["tier"]) == (
        names.calendar_parameter("dev"),
        calendar,
        tier,
    )
    assert json.loads(run.named(SCHEDULE, "nightly-training").inputs["target"]["input"]) == {
        "pool": "training",
        "capacity": 3,
        "calendar": "/parkbrake/dev/closed-days",
        "timezone": "Europe/Berlin",
        "scheduled_time": "<aws.scheduler.scheduled-time>",
    }
    assert "closed-days" not in {resource.name for resource in configured().of_type(PARAMETER)}


def test_without_a_nightly_schedule_there_is_no_launcher() -> None:
    run = build(nightly=None)

    assert [schedule.name for schedule in run.of_type(SCHEDULE)] == ["reaper"]
    assert "launcher" not in {function.name for function in run.of_type(FUNCTION)}
    assert statements_of(run, "scheduler")[0]["Resource"] == [REAPER_ARN, BUDGET_ARN]


def test_schedule_groups_for_recurring_and_deadline_schedules() -> None:
    groups = {group.inputs["name"] for group in configured().of_type(SCHEDULE_GROUP)}

    assert groups == {names.schedule_group("dev"), names.deadline_schedule_group("dev")}


def test_state_change_rule_feeds_the_deadline_and_the_meter_with_permission() -> None:
    run = configured()

    rule = run.named(RULE, "ec2-state-change").inputs
    assert json.loads(rule["eventPattern"]) == {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Instance State-change Notification"],
        # `pending` changes nothing for the deadline or the ledger, so it never invokes them.
        "detail": {"state": ["running", "stopping", "stopped", "shutting-down", "terminated"]},
    }
    tag_rule = run.named(RULE, "ec2-tag-change").inputs
    assert json.loads(tag_rule["eventPattern"]) == {  # EventBridge events reference, events-ref-tag.html
        "source": ["aws.tag"],
        "detail-type": ["Tag Change on Resource"],
        "detail": {"service": ["ec2"], "resource-type": ["instance"]},
    }
    targets = {target.name: target.inputs for target in run.of_type(EVENT_TARGET)}
    assert targets["deadline-from-state-change"]["arn"].endswith(":deadline")
    assert targets["deadline-from-tag-change"]["arn"].endswith(":deadline")
    assert targets["meter-from-state-change"]["arn"].endswith(":meter")
    assert targets["budget-from-clock"]["arn"].endswith(":budget")
    assert run.named(RULE, "budget-every-minute").inputs["scheduleExpression"] == "rate(1 minute)"
    rule_arn = {  # the mock engine's ARNs
        "deadline-from-state-change": f"arn:aws:cloudwatch:us-east-1:{ACCOUNT}:ec2-state-change",
        "deadline-from-tag-change": f"arn:aws:cloudwatch:us-east-1:{ACCOUNT}:ec2-tag-change",
        "meter-from-state-change": f"arn:aws:cloudwatch:us-east-1:{ACCOUNT}:ec2-state-change",
        "budget-from-clock": f"arn:aws:cloudwatch:us-east-1:{ACCOUNT}:budget-every-minute",
        "reconciler-from-clock": f"arn:aws:cloudwatch:us-east-1:{ACCOUNT}:reconciler-clock",
        "meter-from-decisions": f"arn:aws:cloudwatch:us-east-1:{ACCOUNT}:guardrail-decisions",
    }
    permissions = {permission.name: permission.inputs for permission in run.of_type(PERMISSION)}
    assert set(permissions) == set(rule_arn)
    for name, permission in permissions.items():
        assert permission["principal"] == "events.amazonaws.com"
        assert permission["action"] == "lambda:InvokeFunction"
        assert permission["sourceArn"] == rule_arn[name]
    assert run.named(RULE, "reconciler-clock").inputs["scheduleExpression"] == "rate(15 minutes)"


def test_the_meter_never_loses_an_event_retries_24h_then_its_dead_letter_queue() -> None:
    run = configured()

    targets = {target.name: target.inputs for target in run.of_type(EVENT_TARGET)}
    meter = targets["meter-from-state-change"]
    # EventBridge's longest: the ledger's database may be down for hours (Lambda's own retries stop at 6 h).
    assert meter["retryPolicy"]["maximumEventAgeInSeconds"] == 86400
    assert meter["deadLetterConfig"]["arn"]  # the meter's queue, replayed by `parkbrake ledger replay-dlq`
    assert targets["reconciler-from-clock"]["deadLetterConfig"]["arn"]
    assert {"parkbrake-dev-reconciler-heartbeat", "parkbrake-dev-reconciler-errors"} <= {
        alarm.inputs["name"] for alarm in run.of_type(ALARM)
    }


def test_the_reaper_and_the_deadlines_relay_their_decisions_to_the_meter_only_with_a_ledger() -> None:
    run = configured()

    rule = run.named(RULE, "guardrail-decisions").inputs
    assert json.loads(rule["eventPattern"]) == {
        "source": ["parkbrake.guardrails"],
        "detail-type": ["Guardrail Decisions"],
    }
    relay = {target.name: target.inputs for target in run.of_type(EVENT_TARGET)}["meter-from-decisions"]
    assert relay["arn"].endswith(":meter")
    assert relay["retryPolicy"]["maximumEventAgeInSeconds"] == 86400  # the database may be down for hours
    assert relay["deadLetterConfig"]["arn"]
    for guardrail in ("reaper", "deadline"):
        assert environment_of(run, guardrail)["PARKBRAKE_DECISION_BUS"] == "parkbrake-dev-decisions"
        (grant,) = [s for s in statements_of(run, guardrail) if "events:PutEvents" in actions(s)]
        assert grant["Resource"] == f"arn:aws:events:us-east-1:{ACCOUNT}:event-bus/parkbrake-dev-decisions"
    assert not any("events:PutEvents" in actions(s) for s in statements_of(run, "budget"))

    without = build(database_secret_arn=None)
    assert "guardrail-decisions" not in {rule.name for rule in without.of_type(RULE)}
    assert "PARKBRAKE_DECISION_BUS" not in environment_of(without, "reaper")
    assert not any("events:PutEvents" in actions(statement) for statement in all_statements(without))


def test_without_a_database_there_is_no_meter_or_budget_and_nothing_runs_in_the_vpc() -> None:
    run = build(database_secret_arn=None)

    functions = {function.name: function.inputs for function in run.of_type(FUNCTION)}
    assert set(functions) == {"reaper", "deadline", "launcher"}
    assert all("vpcConfig" not in inputs for inputs in functions.values())
    assert sorted(target.name for target in run.of_type(EVENT_TARGET)) == [
        "deadline-from-state-change",
        "deadline-from-tag-change",
    ]
    assert {alarm.name for alarm in run.of_type(ALARM)} == {
        "reaper-errors",
        "deadline-errors",
        "launcher-errors",
        "reaper-heartbeat",
        "reaper-dead-letters",
        "deadline-dead-letters",
        "launcher-dead-letters",
        "unmanaged-hosts",
        "orphaned-hosts",
    }
    assert not any("secretsmanager:GetSecretValue" in actions(statement) for statement in all_statements(run))


# --- functions and their environment --------------------------------------------------------------------------


def test_functions_are_named_and_handled_by_their_lambdas_module() -> None:
    functions = {function.name: function.inputs for function in configured().of_type(FUNCTION)}

    assert set(functions) == {"reaper", "deadline", "launcher", "meter", "budget", "reconciler"}
    for guardrail, inputs in functions.items():
        assert inputs["name"] == names.function_name("dev", guardrail)
        assert inputs["handler"] == f"lambdas.{guardrail}.handler"
        # An Amazon Linux 2023 runtime: python3.12 or later.
        major, minor = inputs["runtime"].removeprefix("python").split(".")
        assert (int(major), int(minor)) >= (3, 12)


def test_lambda_environment_is_the_design_list_and_the_settings_parser_reads_it_back() -> None:
    run = build(
        reap_untagged=True,
        default_max_runtime=timedelta(hours=2),
        stopped_retention=timedelta(days=14),
        terminate_stopped=True,
    )
    environment = environment_of(run, "reaper")

    assert environment == {
        "PARKBRAKE_STACK": "dev",
        "PARKBRAKE_REGIONS": "us-east-1",
        "PARKBRAKE_DEFAULT_MAX_RUNTIME": "2h",
        "PARKBRAKE_MAX_EXEMPTION": "1d",
        "PARKBRAKE_REAP_UNTAGGED": "true",
        "PARKBRAKE_POOL_MAX_RUNTIMES": "training=4h,inference=1d",
        "PARKBRAKE_SNS_TOPIC_ARN": "arn:aws:sns:us-east-1:123456789012:alarms",
        "PARKBRAKE_DEADLINE_TARGET_ARN": REAPER_ARN,
        "PARKBRAKE_SCHEDULER_ROLE_ARN": "arn:aws:iam:us-east-1:123456789012:scheduler",
        "PARKBRAKE_MAX_RUNTIME_CEILING": "1d",
        "PARKBRAKE_DEADLINE_DEAD_LETTER_ARN": f"arn:aws:sqs:us-east-1:{ACCOUNT}:parkbrake-dev-reaper-dlq",
        "PARKBRAKE_NOTICES_TABLE": "parkbrake-dev-notices",
        "PARKBRAKE_TENANTS": "product,research",
        "PARKBRAKE_DECISION_BUS": "parkbrake-dev-decisions",
        "PARKBRAKE_STOPPED_RETENTION": "14d",
        "PARKBRAKE_TERMINATE_STOPPED": "true",
        "PARKBRAKE_DECISION_RETENTION": "400d",
        "PARKBRAKE_WARN_BEFORE": "15m",
    }
    settings = settings_from_environment(environment)
    assert settings.stack == "dev"
    assert settings.regions == ("us-east-1",)
    assert settings.default_max_runtime == timedelta(hours=2)
    assert settings.max_exemption == timedelta(hours=24)
    assert settings.reap_untagged is True
    assert dict(settings.pool_max_runtimes) == {
        "training": timedelta(hours=4),
        "inference": timedelta(hours=24),
    }
    assert settings.deadline_target_arn == REAPER_ARN
    assert (settings.stopped_retention, settings.terminate_stopped) == (timedelta(days=14), True)
    assert settings.warn_before == timedelta(minutes=15)
    assert settings.tenants == {"product", "research"}
    assert settings.decision_retention == timedelta(days=400)


CHAT_SECRET = f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:parkbrake/dev/chat-webhook-AbCdEf"


def test_the_chat_webhook_secret_is_read_only_by_the_functions_that_post_the_sweeps_notices() -> None:
    run = build(chat_webhook_secret_arn=CHAT_SECRET, warn_before=timedelta(minutes=30))
    for guardrail in ("reaper", "deadline"):
        assert environment_of(run, guardrail)["PARKBRAKE_CHAT_WEBHOOK_SECRET_ARN"] == CHAT_SECRET
        assert environment_of(run, guardrail)["PARKBRAKE_WARN_BEFORE"] == "30m"
        read = by_sid(statements_of(run, guardrail))["ReadChatWebhook"]
        assert (actions(read), read["Resource"]) == ({"secretsmanager:GetSecretValue"}, CHAT_SECRET)
    readers = {
        policy.name
        for policy in run.of_type(ROLE_POLICY)
        for statement in json.loads(policy.inputs["policy"])["Statement"]
        if statement["Resource"] == CHAT_SECRET
    }
    assert readers == {"reaper", "deadline"}
    assert "PARKBRAKE_CHAT_WEBHOOK_SECRET_ARN" not in environment_of(build(), "reaper")
    assert "ReadChatWebhook" not in by_sid(statements_of(build(), "reaper"))


def test_only_the_database_functions_get_the_secret_and_run_in_the_private_subnets() -> None:
    run = configured()

    for guardrail in ("launcher", "meter", "budget"):
        inputs = run.named(FUNCTION, guardrail).inputs
        assert environment_of(run, guardrail)["PARKBRAKE_DATABASE_SECRET_ARN"] == SECRET_ARN
        # libpq verifies the TLS-only cluster against the RDS CA bundle.
        assert environment_of(run, guardrail)["PGSSLMODE"] == "verify-full"
        assert environment_of(run, guardrail)["PGSSLROOTCERT"] == "/opt/rds-ca/global-bundle.pem"
        assert inputs["vpcConfig"]["subnetIds"] == ["subnet-private-a", "subnet-private-b"]
    for guardrail in ("reaper", "deadline"):
        assert "PARKBRAKE_DATABASE_SECRET_ARN" not in environment_of(run, guardrail)
        assert "vpcConfig" not in run.named(FUNCTION, guardrail).inputs


def test_a_sweep_gets_lambdas_longest_run_and_one_that_runs_out_of_it_pages() -> None:
    """900 s, sized from the measured 10,000-host sweep; a timeout is a Lambda error, withholds the
    heartbeat, and after the retries lands in the dead-letter queue: three alarms, each paging."""
    run = configured()

    assert run.named(FUNCTION, "reaper").inputs["timeout"] == 900
    alarms = {alarm.inputs["name"] for alarm in run.of_type(ALARM)}
    assert {f"parkbrake-dev-reaper-{kind}" for kind in ("errors", "heartbeat", "dead-letters")} <= alarms


def test_database_layers_reach_only_the_database_functions() -> None:
    layer = f"arn:aws:lambda:us-east-1:{ACCOUNT}:layer:parkbrake-psycopg:3"
    run = build(database_layer_arns=[layer])

    assert {function.name for function in run.of_type(FUNCTION) if layer in function.inputs["layers"]} == {
        "launcher",
        "meter",
        "budget",
        "reconciler",
    }
    # every function has the dependency layer `parkbrake package` writes, first
    dependencies = run.named("aws:lambda/layerVersion:LayerVersion", "dependencies")
    assert dependencies.inputs["compatibleRuntimes"] == ["python3.12"]
    assert {function.inputs["layers"][0] for function in run.of_type(FUNCTION)} == {
        f"arn:aws:lambda:us-east-1:{ACCOUNT}:dependencies"
    }


# --- alarms and the topic -----------------------------------------------------------------------------------


def test_every_function_has_an_errors_alarm_that_pages_the_topic() -> None:
    run = configured()
    topic = "arn:aws:sns:us-east-1:123456789012:alarms"

    for function in run.of_type(FUNCTION):
        alarm = run.named(ALARM, f"{function.name}-errors").inputs
        assert (alarm["namespace"], alarm["metricName"], alarm["statistic"]) == (
            "AWS/Lambda",
            "Errors",
            "Sum",
        )
        assert alarm["dimensions"] == {"FunctionName": function.inputs["name"]}
        assert (alarm["comparisonOperator"], alarm["threshold"]) == ("GreaterThanThreshold", 0)
        assert (alarm["period"], alarm["evaluationPeriods"]) == (60, 1)
        assert alarm["alarmActions"] == [topic]


@pytest.mark.parametrize(("sweep_minutes", "periods"), [(1, 2), (5, 6), (15, 16), (60, 61)])
def test_heartbeat_alarm_treats_silence_as_breaching_within_one_sweep(
    sweep_minutes: int, periods: int
) -> None:
    run = build(sweep_every=timedelta(minutes=sweep_minutes))

    alarm = run.named(ALARM, "reaper-heartbeat").inputs
    assert alarm["namespace"] == names.heartbeat_namespace()
    assert alarm["metricName"] == names.HEARTBEAT_METRIC
    assert alarm["dimensions"] == {"Guardrail": "reaper", "Stack": "dev"}
    assert alarm["treatMissingData"] == "breaching"
    assert (alarm["comparisonOperator"], alarm["threshold"], alarm["statistic"]) == (
        "LessThanThreshold",
        1,
        "SampleCount",
    )
    # Every minute of one sweep interval and one more must be empty before it pages.
    assert alarm["period"] == 60
    assert alarm["evaluationPeriods"] == alarm["datapointsToAlarm"] == periods
    assert alarm["period"] * alarm["evaluationPeriods"] == (sweep_minutes + 1) * 60
    assert alarm["alarmActions"] == ["arn:aws:sns:us-east-1:123456789012:alarms"]


def test_budget_heartbeat_pages_after_two_silent_minutes() -> None:
    alarm = configured().named(ALARM, "budget-heartbeat").inputs

    assert alarm["dimensions"] == {"Guardrail": "budget", "Stack": "dev"}
    assert (alarm["evaluationPeriods"], alarm["treatMissingData"]) == (2, "breaching")


def test_an_adopted_topic_is_used_everywhere_and_none_is_created() -> None:
    adopted = f"arn:aws:sns:us-east-1:{ACCOUNT}:platform-oncall"
    run = build(alarm_topic_arn=adopted)

    assert run.of_type(TOPIC) == []
    assert all(alarm.inputs["alarmActions"] == [adopted] for alarm in run.of_type(ALARM))
    assert environment_of(run, "reaper")["PARKBRAKE_SNS_TOPIC_ARN"] == adopted
    assert by_sid(statements_of(run, "reaper"))["Notify"]["Resource"] == adopted
    (subscription,) = run.of_type(SUBSCRIPTION)
    assert subscription.inputs["topic"] == adopted


def test_email_subscription_only_when_an_address_is_configured() -> None:
    (subscription,) = configured().of_type(SUBSCRIPTION)
    assert (subscription.inputs["protocol"], subscription.inputs["endpoint"]) == (
        "email",
        "oncall@example.com",
    )
    assert build(alarm_email=None).of_type(SUBSCRIPTION) == []


def test_outputs_name_the_topic_the_reaper_and_every_function() -> None:
    outputs: dict[str, Any] = {}

    def program() -> None:
        guardrails = Guardrails("guardrails", arguments())
        pulumi.Output.all(
            topic=guardrails.topic_arn,
            reaper=guardrails.reaper_function_arn,
            functions=pulumi.Output.all(**guardrails.function_names),
        ).apply(outputs.update)

    run_offline(program, stack="dev", region="us-east-1")

    assert outputs["topic"] == "arn:aws:sns:us-east-1:123456789012:alarms"
    assert outputs["reaper"] == "arn:aws:lambda:us-east-1:123456789012:reaper"
    assert outputs["functions"] == {
        guardrail: names.function_name("dev", guardrail)
        for guardrail in ("reaper", "deadline", "launcher", "meter", "budget", "reconciler")
    }


def test_every_resource_is_a_child_of_the_component() -> None:
    run = configured()

    (component,) = run.of_type("parkbrake:aws:Guardrails")
    (alerting,) = run.of_type("parkbrake:aws:GuardrailAlerting")
    assert alerting.parent == component.urn
    children = [*run.children_of(component), *run.children_of(alerting)]
    assert len(children) == len(run.resources) - 1


# --- schedule expressions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "eventbridge"),
    [
        ("0 2 * * *", "cron(0 2 * * ? *)"),
        ("30 1 * * 1-5", "cron(30 1 ? * MON-FRI *)"),
        ("0 3 1 * *", "cron(0 3 1 * ? *)"),
        ("0 0 1-7 * *", "cron(0 0 1-7 * ? *)"),
        ("*/15 * * * *", "cron(0/15 * * * ? *)"),
        ("0 */6 * * *", "cron(0 0/6 * * ? *)"),
        ("0 0 */2 * *", "cron(0 0 1/2 * ? *)"),
        ("0 4 * 1,7 *", "cron(0 4 * 1,7 ? *)"),
        ("0 22 * * 0", "cron(0 22 ? * SUN *)"),
        ("0 22 * * 7", "cron(0 22 ? * SUN *)"),
        ("0 22 * * 5-7", "cron(0 22 ? * SUN,FRI-SAT *)"),
        ("0 8 * * sat,sun", "cron(0 8 ? * SUN,SAT *)"),
        ("0 8 * * MON-FRI", "cron(0 8 ? * MON-FRI *)"),
        ("0 0 * * */2", "cron(0 0 ? * SUN,TUE,THU,SAT *)"),
        ("0 0 * * 1-5/2", "cron(0 0 ? * MON,WED,FRI *)"),
        ("0 0 * * 0-6", "cron(0 0 ? * SUN-SAT *)"),
        ("0 9 * * 5#3", "cron(0 9 ? * 6#3 *)"),
        ("0 9 * * 5L", "cron(0 9 ? * 6L *)"),
    ],
)
def test_five_field_cron_becomes_eventbridge_six_field(cron: str, eventbridge: str) -> None:
    assert eventbridge_cron(cron) == eventbridge


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("0 2 1 * 1", "restricts both day of month and day of week"),
        ("0 2 * * 8", '"8" in "0 2 * * 8" is not a day of the week'),
        ("0 2 * * funday", "is not a day of the week"),
        ("0 2 * * 5-1", "runs backwards"),
        ("0 2 * *", "is not a five-field cron expression"),
    ],
)
def test_cron_that_eventbridge_cannot_express_is_refused_with_the_field_named(
    cron: str, message: str
) -> None:
    with pytest.raises(InputError, match=f"nightly.cron: .*{re.escape(message)}"):
        eventbridge_cron(cron)


@pytest.mark.parametrize(
    ("every", "expression"),
    [
        (timedelta(minutes=1), "rate(1 minute)"),
        (timedelta(minutes=5), "rate(5 minutes)"),
        (timedelta(hours=1), "rate(60 minutes)"),
    ],
)
def test_rate_expression(every: timedelta, expression: str) -> None:
    assert rate_expression(every) == expression


def test_rate_expression_refuses_part_minutes() -> None:
    with pytest.raises(InputError, match="not whole minutes"):
        rate_expression(timedelta(seconds=90))
