"""No silent failure around the guardrail Lambdas: retries, dead-letter queues and the alarms on them,
the findings alarms, and the table that keeps a repeated finding to one notice a day.

EventBridge (rules and Scheduler) invokes a Lambda asynchronously. Two things can then go wrong,
and each has its own retry policy and ends in the function's dead-letter queue:
- delivery: the invocation itself fails (throttled, permission missing): the target's retry policy
  (maximum event age and attempts), then the target's dead-letter queue;
- the function: it raises (a deadline's stop that failed, an error): Lambda's asynchronous retries
  (``FunctionEventInvokeConfig``), then its on-failure destination, the same queue.
An alarm on each queue's depth pages on the first message. Errors alarms and heartbeat alarms stay
in the Guardrails component; the permissions to write to the queues and the table are in each
function's policy (``components/iam_policies.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pulumi
import pulumi_aws as aws

from components.common import child_of, named_child_of, type_token
from guardrails import names

RETRY_ATTEMPTS = 2  # Lambda's asynchronous maximum; EventBridge allows up to 185
MESSAGE_RETENTION_S = 14 * 24 * 3600  # SQS's maximum: a failed stop is kept for two weeks
# Findings the sweep counts every run (GuardrailFindings) that page a person when above zero.
ALARMED_FINDINGS = ("unmanaged", "orphaned")
FINDINGS_METRIC = "GuardrailFindings"  # lambdas.aws.heartbeat's name (components cannot import lambdas)
ACTIONS_METRIC = "GuardrailActions"  # lambdas.aws.heartbeat.count_action's
# Counted actions that page at their first count: (guardrail, action, reason) → what happened. The
# actions carry no stack dimension (lambdas.aws.heartbeat.count_action), so the alarm sees the region's.
ALARMED_ACTIONS = {
    ("meter", "refuse", "forged-decisions"): (
        "the meter refused relayed guardrail decisions that the reaper and the deadlines could not have sent "
        "(another account, another actor, malformed): someone put events on the decision bus; see the "
        "meter's SNS message and CloudTrail"
    ),
}


# How long a failed event stays worth retrying. The sweep's own schedule uses the sweep period (the
# next sweep supersedes it); the reaper's function keeps an hour, for the deadlines that invoke it.
EVENT_AGE = {"reaper": timedelta(hours=1), "deadline": timedelta(hours=1), "launcher": timedelta(hours=1),
             "meter": timedelta(hours=6), "budget": timedelta(minutes=1),
             "reconciler": timedelta(minutes=15)}  # fmt: skip


@dataclass
class GuardrailAlertingArgs:
    stack: str
    functions: Mapping[str, aws.lambda_.Function]  # by guardrail
    topic_arn: pulumi.Input[str]
    sweep_every: timedelta
    tags: Mapping[str, str]


class GuardrailAlerting(pulumi.ComponentResource):
    dead_letter_arns: dict[str, pulumi.Output[str]]
    notices_table_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: GuardrailAlertingArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(type_token("GuardrailAlerting"), name, None, opts)
        self._args = args
        self.dead_letter_arns = {}
        for guardrail, function in args.functions.items():
            self.dead_letter_arns[guardrail] = self._dead_letter_queue(guardrail, function)
        table = aws.dynamodb.Table(
            "notices",
            name=names.notices_table(args.stack),
            billing_mode="PAY_PER_REQUEST",
            hash_key="notice",
            attributes=[{"name": "notice", "type": "S"}],
            ttl={"attribute_name": "expires_at", "enabled": True},
            tags=dict(args.tags),
            opts=named_child_of(self),
        )
        self.notices_table_name = table.name
        for finding in ALARMED_FINDINGS:
            self._findings_alarm(finding)
        for (guardrail, action, reason), description in ALARMED_ACTIONS.items():
            if guardrail in args.functions:
                self._actions_alarm(guardrail, action, reason, description)
        self.register_outputs(
            {"dead_letter_arns": self.dead_letter_arns, "notices_table_name": self.notices_table_name}
        )

    def delivery(self, guardrail: str, max_event_age: timedelta | None = None) -> dict[str, Any]:
        """The retry policy and dead-letter queue of a target invoking ``guardrail``: merged into a
        Scheduler schedule's ``target``, or passed to an EventBridge rule's ``EventTarget``."""
        return {
            "retry_policy": {
                "maximum_event_age_in_seconds": _seconds(max_event_age or EVENT_AGE[guardrail]),
                "maximum_retry_attempts": RETRY_ATTEMPTS,
            },
            "dead_letter_config": {"arn": self.dead_letter_arns[guardrail]},
        }

    def _dead_letter_queue(self, guardrail: str, function: aws.lambda_.Function) -> pulumi.Output[str]:
        args = self._args
        queue = aws.sqs.Queue(
            f"{guardrail}-dlq",
            name=names.dead_letter_queue(args.stack, guardrail),
            message_retention_seconds=MESSAGE_RETENTION_S,
            sqs_managed_sse_enabled=True,
            tags=dict(args.tags),
            opts=named_child_of(self),
        )
        # EventBridge rules deliver to a dead-letter queue as the events service, for this account only.
        aws.sqs.QueuePolicy(
            f"{guardrail}-dlq",
            queue_url=queue.url,
            policy=pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "EventBridgeDeadLetters",
                            "Effect": "Allow",
                            "Principal": {"Service": "events.amazonaws.com"},
                            "Action": "sqs:SendMessage",
                            "Resource": queue.arn,
                            "Condition": {"ArnLike": {"aws:SourceArn": _rule_arns(queue.arn, args.stack)}},
                        }
                    ],
                }
            ),
            opts=child_of(self),
        )
        function_name = names.function_name(args.stack, guardrail)
        # Lambda's asynchronous retries, then the failed event (with the error) to the queue.
        aws.lambda_.FunctionEventInvokeConfig(
            guardrail,
            function_name=function.name,
            maximum_retry_attempts=RETRY_ATTEMPTS,
            maximum_event_age_in_seconds=_seconds(EVENT_AGE[guardrail]),
            destination_config={"on_failure": {"destination": queue.arn}},
            opts=child_of(self),
        )
        aws.cloudwatch.MetricAlarm(
            f"{guardrail}-dead-letters",
            name=f"{function_name}-dead-letters",
            alarm_description=(
                f"an event for the {guardrail} guardrail failed after its retries (a stop that did not "
                f"happen, a deadline not armed): read the message in {names.dead_letter_queue(args.stack, guardrail)}"
            ),
            namespace="AWS/SQS",
            metric_name="ApproximateNumberOfMessagesVisible",
            dimensions={"QueueName": queue.name},
            statistic="Maximum",
            period=60,
            evaluation_periods=1,
            comparison_operator="GreaterThanThreshold",
            threshold=0,
            treat_missing_data="notBreaching",  # SQS reports an idle queue; no data is no message
            alarm_actions=[args.topic_arn],
            ok_actions=[args.topic_arn],
            tags=dict(args.tags),
            opts=named_child_of(self),
        )
        return queue.arn

    def _findings_alarm(self, finding: str) -> None:
        args = self._args
        aws.cloudwatch.MetricAlarm(
            f"{finding}-hosts",
            name=f"{names.prefix(args.stack)}-{finding}-gpu-hosts",
            alarm_description=(
                f"the sweep found {finding} GPU hosts: running outside the guardrails' control "
                "(see the sweep's notice for each host, its owner and its cost)"
            ),
            namespace=names.heartbeat_namespace(),
            metric_name=FINDINGS_METRIC,
            dimensions={"Guardrail": "reaper", "Stack": args.stack, "Finding": finding},
            statistic="Maximum",
            period=max(60, _seconds(args.sweep_every)),
            evaluation_periods=1,
            comparison_operator="GreaterThanThreshold",
            threshold=0,
            treat_missing_data="notBreaching",  # a sweep that stops reporting is the heartbeat's alarm
            alarm_actions=[args.topic_arn],
            ok_actions=[args.topic_arn],
            tags=dict(args.tags),
            opts=named_child_of(self),
        )

    def _actions_alarm(self, guardrail: str, action: str, reason: str, description: str) -> None:
        args = self._args
        aws.cloudwatch.MetricAlarm(
            f"{reason}-actions",
            name=f"{names.prefix(args.stack)}-{reason}",
            alarm_description=description,
            namespace=names.heartbeat_namespace(),
            metric_name=ACTIONS_METRIC,
            dimensions={"Guardrail": guardrail, "Action": action, "Reason": reason},
            statistic="Sum",
            period=60,
            evaluation_periods=1,
            comparison_operator="GreaterThanThreshold",
            threshold=0,
            treat_missing_data="notBreaching",  # nothing refused: nothing counted
            alarm_actions=[args.topic_arn],
            ok_actions=[args.topic_arn],
            tags=dict(args.tags),
            opts=named_child_of(self),
        )


def _seconds(duration: timedelta) -> int:
    """Whole seconds, at least the 60 that Lambda and EventBridge accept as a maximum event age."""
    return max(60, int(duration.total_seconds()))


def _rule_arns(queue_arn: pulumi.Output[str], stack: str) -> pulumi.Output[str]:
    """The stack's EventBridge rules, in the queue's account and region: ``parkbrake-<stack>-*``."""
    return queue_arn.apply(
        lambda arn: "arn:{0}:events:{2}:{3}:rule/".format(*arn.split(":")[1:5]) + f"{names.prefix(stack)}-*"
    )
