"""No silent failure, declared: every trigger of every guardrail retries and dead-letters, every dead-letter
queue and unmanaged-host count has an alarm, and the roles may write exactly what they need."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from components.guardrail_alerting import RETRY_ATTEMPTS
from guardrails import names
from guardrails.settings import settings_from_environment
from tests.components.guardrails_build import (
    ALARM,
    EVENT_TARGET,
    FUNCTION,
    ROLE_POLICY,
    SCHEDULE,
    build,
    by_sid,
    configured,
    environment_of,
)

QUEUE = "aws:sqs/queue:Queue"
QUEUE_POLICY = "aws:sqs/queuePolicy:QueuePolicy"
INVOKE_CONFIG = "aws:lambda/functionEventInvokeConfig:FunctionEventInvokeConfig"
TABLE = "aws:dynamodb/table:Table"
GUARDRAILS = ("reaper", "deadline", "launcher", "meter", "budget", "reconciler")


def queue_arn(guardrail: str) -> str:
    """The mock engine's ARN of a guardrail's dead-letter queue (built from the resource's name)."""
    return f"arn:aws:sqs:us-east-1:123456789012:{guardrail}-dlq"


def policy(run: Any, name: str) -> dict[str, dict[str, Any]]:
    return by_sid(json.loads(run.named(ROLE_POLICY, name).inputs["policy"])["Statement"])


def test_every_guardrail_has_a_dead_letter_queue_kept_two_weeks() -> None:
    run = configured()
    queues = {queue.name: queue.inputs for queue in run.of_type(QUEUE)}
    assert set(queues) == {f"{guardrail}-dlq" for guardrail in GUARDRAILS}
    for guardrail in GUARDRAILS:
        queue = queues[f"{guardrail}-dlq"]
        assert queue["name"] == f"{names.function_name('dev', guardrail)}-dlq"
        assert queue["messageRetentionSeconds"] == 14 * 24 * 3600
        assert queue["sqsManagedSseEnabled"] is True


def test_every_scheduler_target_retries_and_dead_letters() -> None:
    run = configured()
    targets = {schedule.name: schedule.inputs["target"] for schedule in run.of_type(SCHEDULE)}
    assert set(targets) == {"reaper", "nightly-training"}
    assert targets["reaper"]["retryPolicy"] == {
        "maximumEventAgeInSeconds": 300,
        "maximumRetryAttempts": RETRY_ATTEMPTS,
    }
    assert targets["reaper"]["deadLetterConfig"] == {"arn": queue_arn("reaper")}
    assert targets["nightly-training"]["retryPolicy"]["maximumEventAgeInSeconds"] == 3600
    assert targets["nightly-training"]["deadLetterConfig"] == {"arn": queue_arn("launcher")}


def test_every_eventbridge_rule_target_retries_and_dead_letters() -> None:
    run = configured()
    targets = {target.name: target.inputs for target in run.of_type(EVENT_TARGET)}
    assert set(targets) == {
        "deadline-from-state-change",
        "deadline-from-tag-change",
        "meter-from-state-change",
        "budget-from-clock",
        "reconciler-from-clock",
        "meter-from-decisions",  # the reaper's and the deadlines' decisions, relayed onto the ledger
    }
    for name, target in targets.items():
        guardrail = name.split("-from-")[0]
        assert target["retryPolicy"]["maximumRetryAttempts"] == RETRY_ATTEMPTS
        assert target["retryPolicy"]["maximumEventAgeInSeconds"] >= 60
        assert target["deadLetterConfig"] == {"arn": queue_arn(guardrail)}
    # EventBridge writes to the queue as the events service, for the stack's own rules only.
    [statement] = json.loads(run.named(QUEUE_POLICY, "meter-dlq").inputs["policy"])["Statement"]
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert statement["Condition"] == {
        "ArnLike": {"aws:SourceArn": "arn:aws:events:us-east-1:123456789012:rule/parkbrake-dev-*"}
    }


def test_a_function_that_raises_is_retried_then_dead_lettered() -> None:
    run = configured()
    configs = {config.name: config.inputs for config in run.of_type(INVOKE_CONFIG)}
    assert set(configs) == set(GUARDRAILS)
    for guardrail, config in configs.items():
        assert config["maximumRetryAttempts"] == RETRY_ATTEMPTS
        assert config["destinationConfig"] == {"onFailure": {"destination": queue_arn(guardrail)}}
        grant = policy(run, guardrail)["DeadLetters"]
        assert (grant["Action"], grant["Resource"]) == (
            ["sqs:SendMessage"],
            f"arn:aws:sqs:us-east-1:123456789012:{names.dead_letter_queue('dev', guardrail)}",
        )
    # A deadline's failed stop is retried for an hour; a minute-by-minute budget check only for a minute.
    assert configs["reaper"]["maximumEventAgeInSeconds"] == 3600
    assert configs["budget"]["maximumEventAgeInSeconds"] == 60


def test_every_dead_letter_queue_pages_on_its_first_message() -> None:
    run = configured()
    for guardrail in GUARDRAILS:
        alarm = run.named(ALARM, f"{guardrail}-dead-letters").inputs
        assert alarm["namespace"] == "AWS/SQS"
        assert alarm["metricName"] == "ApproximateNumberOfMessagesVisible"
        assert (alarm["comparisonOperator"], alarm["threshold"]) == ("GreaterThanThreshold", 0)
        assert alarm["alarmActions"] == ["arn:aws:sns:us-east-1:123456789012:alarms"]


def test_scheduler_may_dead_letter_to_the_queues_of_what_it_invokes() -> None:
    grant = policy(configured(), "scheduler")["DeadLetters"]
    assert grant["Action"] == ["sqs:SendMessage"]
    assert grant["Resource"] == [
        f"arn:aws:sqs:us-east-1:123456789012:{names.dead_letter_queue('dev', guardrail)}"
        for guardrail in ("reaper", "launcher", "budget")  # the budget: its crossing checks
    ]


def test_unmanaged_and_orphaned_hosts_page() -> None:
    run = build(sweep_every=timedelta(minutes=10))
    for finding in ("unmanaged", "orphaned"):
        alarm = run.named(ALARM, f"{finding}-hosts").inputs
        assert alarm["name"] == f"parkbrake-dev-{finding}-gpu-hosts"
        assert (alarm["namespace"], alarm["metricName"]) == ("Parkbrake/Guardrails", "GuardrailFindings")
        assert alarm["dimensions"] == {"Guardrail": "reaper", "Stack": "dev", "Finding": finding}
        assert (alarm["statistic"], alarm["period"], alarm["threshold"]) == ("Maximum", 600, 0)


def test_the_notices_table_expires_its_items_and_only_the_sweep_writes_it() -> None:
    run = configured()
    table = run.named(TABLE, "notices").inputs
    assert table["name"] == names.notices_table("dev")
    assert (table["hashKey"], table["billingMode"]) == ("notice", "PAY_PER_REQUEST")
    assert table["ttl"] == {"attributeName": "expires_at", "enabled": True}
    for guardrail in GUARDRAILS:
        grants = policy(run, guardrail)
        sweeps = guardrail in ("reaper", "deadline")
        assert ("RememberNotices" in grants, "ListStacks" in grants) == (sweeps, sweeps)
        assert "AdoptUnmanagedHosts" not in grants  # reap_untagged is off: no tagging
    remember = policy(run, "reaper")["RememberNotices"]
    assert remember["Action"] == ["dynamodb:PutItem", "dynamodb:DeleteItem"]
    assert remember["Resource"] == "arn:aws:dynamodb:us-east-1:123456789012:table/parkbrake-dev-notices"


def test_with_reap_untagged_the_sweep_may_tag_hosts_as_managed_and_nothing_else() -> None:
    grant = policy(build(reap_untagged=True), "reaper")["AdoptHostsOfNoStack"]
    assert grant["Action"] == ["ec2:CreateTags"]
    # Only these two tags, with this stack's values, on a GPU host of no other stack (tag-on-adopt).
    assert grant["Condition"] == {
        "StringEquals": {"aws:RequestTag/parkbrake:managed": "true", "aws:RequestTag/parkbrake:stack": "dev"},
        "StringEqualsIfExists": {"aws:ResourceTag/parkbrake:stack": "dev"},
        "ForAllValues:StringEquals": {"aws:TagKeys": ["parkbrake:managed", "parkbrake:stack"]},
        "StringLike": {"ec2:InstanceType": ["dl*", "f*", "g*", "gr*", "inf*", "p*", "trn*", "vt*"]},
    }


def test_the_functions_know_the_ceiling_the_notices_table_and_the_deadline_dead_letters() -> None:
    run = build(max_runtime_ceiling=timedelta(hours=36))
    settings = settings_from_environment(environment_of(run, "reaper"))
    assert settings.max_runtime_ceiling == timedelta(hours=36)
    assert settings.notices_table == "parkbrake-dev-notices"
    assert settings.deadline_dead_letter_arn == "arn:aws:sqs:us-east-1:123456789012:parkbrake-dev-reaper-dlq"
    assert {function.name for function in run.of_type(FUNCTION)} == set(GUARDRAILS)
