"""What the launcher reports a start got, against moto over HTTP: hosts per instance type and zone,
the types and zones EC2 had no capacity for, and a group left short as a finding that reaches a person.

moto 5 launches a mixed-instances group's hosts with its launch template's type, in its first zone,
and records no scaling activities. AWS's group itself retries a launch EC2 refused with
``InsufficientInstanceCapacity`` on the next override and reports the refusal as a failed scaling
activity: the tests inject that activity (and, for a group that got nothing, an empty instance list)
by rewriting moto's answers in the fault proxy.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy
from guardrail_fleet import (
    REGION,
    STACK,
    client_factory,
    create_pool,
    guardrail_settings,
    heartbeats,
    managed_tags,
    metric_value,
)

from guardrails import names
from lambdas import launcher
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.environment import ClientFactory
from lambdas.engines import launching

NOW = datetime(2025, 3, 1, 1, 0, tzinfo=UTC)
GROUP = names.autoscaling_group(STACK, "training")
# EC2's own message, as the group's failed activity carries it.
NO_G5 = (
    "Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do not have "
    "sufficient g5.12xlarge capacity in the Availability Zone you requested (us-east-1a). Our system will "
    "be working on provisioning additional g5.12xlarge capacity. You can currently get g5.12xlarge "
    "capacity by not specifying an Availability Zone in your request or choosing us-east-1b. "
    "Launching EC2 instance failed."
)
NO_G6E = NO_G5.replace("g5.12xlarge", "g6e.12xlarge")


def fallback_pool(clients: ClientFactory, *, template_type: str) -> None:
    """The pool as components/gpu_pool.py makes it with fallbacks: prioritized overrides (the pool's
    type, then its fallback). moto launches ``template_type``: here, the type the group fell back to."""
    create_pool(
        clients("autoscaling", REGION),
        clients("ec2", REGION),
        pool="training",
        instance_type=template_type,
        overrides=["g5.12xlarge", "g6e.12xlarge"],
        max_size=3,
        group_tags=managed_tags(max_runtime="2h", tenant="research"),
    )
    clients("ssm", REGION).put_parameter(
        Name=names.park_parameter(STACK), Value="false", Type="String", Overwrite=True
    )


def failed_activities(*messages: str) -> Any:
    """DescribeScalingActivities answering with the group's failed launches, started as it is asked."""

    def change(body: bytes) -> bytes:
        started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        members = "".join(
            f"<member><ActivityId>ice-{index}</ActivityId><AutoScalingGroupName>{GROUP}</AutoScalingGroupName>"
            f"<Description>Launching a new EC2 instance. Status Reason: {message}</Description>"
            "<Cause>a user request update of AutoScalingGroup constraints</Cause>"
            f"<StartTime>{started}</StartTime><EndTime>{started}</EndTime><StatusCode>Failed</StatusCode>"
            f"<StatusMessage>{message}</StatusMessage><Progress>100</Progress></member>"
            for index, message in enumerate(messages)
        )
        return body.replace(b"<Activities/>", f"<Activities>{members}</Activities>".encode())

    return change


def without_instances(body: bytes) -> bytes:
    """The group launched nothing: EC2 refused every override."""
    return re.sub(rb"<Instances>.*?</Instances>", b"<Instances/>", body, flags=re.S)


def start(clients: ClientFactory, decisions: DecisionLog, **settings: Any) -> dict[str, Any]:
    return launcher.handle(
        {"pool": "training", "capacity": 2, "report_wait_s": 0},
        settings=guardrail_settings(**settings),
        clients=clients,
        gate=None,
        now=NOW,
        decisions=decisions,
    )


class Recorded:
    def __init__(self) -> None:
        self.appended: list[Any] = []

    def append(self, decisions: Any, *, origin: str) -> dict[str, str]:
        self.appended += decisions
        return {}


def decision_log() -> tuple[DecisionLog, Recorded]:
    recorded = Recorded()
    return DecisionLog(guardrail="launcher", origin="test", ledger=lambda: recorded), recorded


def test_reports_the_type_and_zone_the_group_started(aws: str) -> None:
    clients = client_factory(aws)
    fallback_pool(clients, template_type="g6e.12xlarge")
    log, recorded = decision_log()

    result = start(clients, log)

    assert result["got"] == {
        "wanted": 2,
        "started": [{"instance_type": "g6e.12xlarge", "zone": f"{REGION}a", "hosts": 2}],
        "pending": 0,
        "short": 0,
        "insufficient_capacity": [],
    }
    [decision] = recorded.appended
    assert (decision.kind, decision.tenant) == ("launch-start", "research")
    assert decision.details["got"] == result["got"]
    assert "got 2 x g6e.12xlarge in us-east-1a in service" in decision.reason


def test_insufficient_capacity_on_the_pools_type_is_reported_with_the_fallback_that_started(
    aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    clients = client_factory(aws)
    fallback_pool(clients, template_type="g6e.12xlarge")
    log, recorded = decision_log()
    with FaultProxy(aws) as proxy:
        proxy.rewrite("DescribeScalingActivities", failed_activities(NO_G5))

        result = start(client_factory(proxy.url), log)

    assert result["got"]["started"] == [{"instance_type": "g6e.12xlarge", "zone": f"{REGION}a", "hosts": 2}]
    assert result["got"]["insufficient_capacity"] == [{"instance_type": "g5.12xlarge", "zone": f"{REGION}a"}]
    assert result["got"]["short"] == 0
    assert "errors" not in result
    assert "g5.12xlarge in us-east-1a: insufficient capacity" in recorded.appended[0].reason
    # Not short: the fallback did its job, so nobody is paged.
    assert (
        metric_value(
            capsys.readouterr().out,
            "GuardrailActions",
            Guardrail="launcher",
            Action="short",
            Reason="insufficient-capacity",
        )
        is None
    )


def test_a_group_short_because_every_type_lacked_capacity_reaches_a_person(
    aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    clients = client_factory(aws)
    fallback_pool(clients, template_type="g5.12xlarge")
    topic = clients("sns", REGION).create_topic(Name="alarms")["TopicArn"]
    sqs = clients("sqs", REGION)
    queue = sqs.create_queue(QueueName="alarms")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    clients("sns", REGION).subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    log, recorded = decision_log()
    with FaultProxy(aws) as proxy:
        proxy.rewrite("DescribeScalingActivities", failed_activities(NO_G5, NO_G6E))
        proxy.rewrite("DescribeAutoScalingGroups", without_instances)

        result = start(client_factory(proxy.url), log, sns_topic_arn=topic)

    assert (result["got"]["started"], result["got"]["short"]) == ([], 2)
    assert result["got"]["insufficient_capacity"] == [
        {"instance_type": "g5.12xlarge", "zone": f"{REGION}a"},
        {"instance_type": "g6e.12xlarge", "zone": f"{REGION}a"},
    ]
    [message] = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    notice = json.loads(message["Body"])
    assert notice["Subject"] == "parkbrake: pool training short of 2 host(s): insufficient capacity"
    assert "tenant research" in notice["Message"]
    assert "g6e.12xlarge in us-east-1a: insufficient capacity" in notice["Message"]
    out = capsys.readouterr().out
    assert (
        metric_value(
            out, "GuardrailActions", Guardrail="launcher", Action="short", Reason="insufficient-capacity"
        )
        == 2
    )
    assert recorded.appended[0].details["got"]["short"] == 2


def test_report_wait_must_stay_inside_the_functions_timeout() -> None:
    with pytest.raises(ValueError, match="report_wait_s must be seconds from 0 to 40"):
        launching.parse_event({"pool": "training", "report_wait_s": 90})


def test_a_short_notice_that_cannot_be_published_withholds_the_heartbeat(aws: str) -> None:
    clients = client_factory(aws)
    fallback_pool(clients, template_type="g5.12xlarge")
    topic = clients("sns", REGION).create_topic(Name="alarms")["TopicArn"]
    log, _recorded = decision_log()
    with FaultProxy(aws) as proxy:
        proxy.rewrite("DescribeScalingActivities", failed_activities(NO_G5, NO_G6E))
        proxy.rewrite("DescribeAutoScalingGroups", without_instances)
        proxy.fail("Publish", "AuthorizationError", "not allowed", status=403)

        result = start(client_factory(proxy.url, max_attempts=1), log, sns_topic_arn=topic)

    assert result["errors"] == [{"action": "notify", "error": "AuthorizationError: not allowed"}]
    assert heartbeats(clients) == []
