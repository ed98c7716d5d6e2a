"""Owners against moto: the warning before a deadline (its schedule's time, the handler invoked with the
exact payload Scheduler sends, the message read through SQS), the ``owner`` message attribute a
subscription filters on, the chat webhook on a real local HTTP server, and a malformed owner reported."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from guardrail_fleet import (
    REGION,
    STACK,
    client_factory,
    create_deadline_group,
    deadline_schedules,
    guardrail_settings,
    launch,
    launch_time,
    managed_tags,
    minutes,
    published,
    sns_queue,
    state_change,
)

from guardrails import names, tags
from guardrails.rules.base import instant
from lambdas import deadline, reaper
from lambdas.aws.deadline_schedules import schedule_expression
from lambdas.aws.environment import ClientFactory
from lambdas.engines import owner_warnings

ANA, BOB = "ana@example.com", "@bob"


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    made = client_factory(aws)
    made("ssm", REGION).put_parameter(Name=names.park_parameter(STACK), Value="false", Type="String")
    create_deadline_group(made)
    return made


class Webhook:
    """A Slack-compatible incoming webhook on 127.0.0.1: records each JSON body, answers ``status``."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.status = 200
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                hook.received.append(json.loads(self.rfile.read(length)))
                self.send_response(hook.status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T000/B000/XXXX"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    hook.thread.start()
    yield hook
    hook.server.shutdown()
    hook.server.server_close()


def owner_queue(clients: ClientFactory, topic: str, owner: str) -> str:
    """An owner's own subscription: the topic's messages whose ``owner`` attribute names them."""
    sqs = clients("sqs", REGION)
    queue_url = sqs.create_queue(QueueName=f"owner-{abs(hash(owner))}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    clients("sns", REGION).subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=queue_arn,
        Attributes={"FilterPolicy": json.dumps({"owner": [owner]})},
    )
    return queue_url


def armed_host(clients: ClientFactory, **extra: str) -> tuple[str, datetime, dict[str, Any]]:
    """A host started with a 90m cap, its running event handled: the host, its start, its warning schedule."""
    [host] = launch(
        clients("ec2", REGION), "g5.xlarge", managed_tags(max_runtime="90m", Name="llm-eval", **extra)
    )
    started = launch_time(clients("ec2", REGION), host)
    deadline.handle(
        state_change(host, "running", started), settings=guardrail_settings(), clients=clients, now=started
    )
    return host, started, deadline_schedules(clients)[names.warning_schedule(host)]


def fire(schedule: dict[str, Any], clients: ClientFactory, now: datetime, **settings: Any) -> dict[str, Any]:
    """What Scheduler does at the schedule's time: invoke its target with its Input, verbatim."""
    event = json.loads(schedule["Target"]["Input"])
    return reaper.handle(event, settings=guardrail_settings(**settings), clients=clients, now=now)


def test_the_owner_is_warned_before_the_deadline(clients: ClientFactory) -> None:
    topic, on_call = sns_queue(clients)
    anas = owner_queue(clients, topic, ANA)
    bobs = owner_queue(clients, topic, BOB)
    host, started, schedule = armed_host(clients, **{tags.OWNER: ANA})
    warn_at = started + minutes(75)

    assert schedule["ScheduleExpression"] == schedule_expression(warn_at)
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert json.loads(schedule["Target"]["Input"]) == {"warn": [host]}
    result = fire(schedule, clients, warn_at, sns_topic_arn=topic)

    assert result["warned"] == [host]
    assert result["errors"] == []
    [message] = published(clients, on_call)
    assert (
        message["Subject"]
        == f"parkbrake {STACK}: {host} (llm-eval) stops at {instant(started + minutes(90))} unless extended"
    )
    body = message["Message"]
    assert f"will be stopped in 15m, at {instant(started + minutes(90))}" in body
    assert f"host      {host} ({REGION}) Name=llm-eval" in body
    assert "tenant    research  pool=training  type=g5.xlarge" in body
    assert f"owner     {ANA}" in body
    assert f"running   1h15m since {instant(started)}" in body
    assert "cost      $1.26 so far" in body  # g5.xlarge at $1.006/h for 75 minutes
    assert f'parkbrake extend {host} --stack {STACK} --region {REGION} --by 1h --reason "' in body
    assert message["MessageAttributes"]["owner"] == {"Type": "String", "Value": ANA}
    # Ana's filtered subscription gets it; Bob's does not.
    assert [m["Subject"] for m in published(clients, anas)] == [message["Subject"]]
    assert published(clients, bobs) == []


def test_an_extended_deadline_moves_the_warning_and_sends_nothing(clients: ClientFactory) -> None:
    topic, on_call = sns_queue(clients)
    host, started, schedule = armed_host(clients, **{tags.OWNER: ANA})
    later = started + minutes(150)
    clients("ec2", REGION).create_tags(
        Resources=[host], Tags=[{"Key": tags.EXEMPT_UNTIL, "Value": instant(later)}]
    )

    result = fire(schedule, clients, started + minutes(75), sns_topic_arn=topic)

    assert (result["warned"], result["moved"]) == ([], [host])
    assert published(clients, on_call) == []
    moved = deadline_schedules(clients)
    assert moved[names.warning_schedule(host)]["ScheduleExpression"] == schedule_expression(
        later - minutes(15)
    )
    assert moved[names.deadline_schedule(host)]["ScheduleExpression"] == schedule_expression(later)


def test_a_host_already_stopped_gets_no_warning(clients: ClientFactory) -> None:
    topic, on_call = sns_queue(clients)
    host, started, schedule = armed_host(clients, **{tags.OWNER: ANA})
    clients("ec2", REGION).stop_instances(InstanceIds=[host])
    result = fire(schedule, clients, started + minutes(75), sns_topic_arn=topic)
    assert result["warned"] == []
    assert [entry["instance_id"] for entry in result["skipped"]] == [host]
    assert published(clients, on_call) == []


def test_a_warning_that_cannot_be_published_raises_for_a_retry(clients: ClientFactory) -> None:
    host, started, schedule = armed_host(clients, **{tags.OWNER: ANA})
    missing = f"arn:aws:sns:{REGION}:123456789012:no-such-topic"
    with pytest.raises(owner_warnings.WarningFailed, match=host):
        fire(schedule, clients, started + minutes(75), sns_topic_arn=missing)


def test_no_short_cap_is_warned_after_the_fact(clients: ClientFactory) -> None:
    """A cap shorter than the warning leaves no warning schedule behind (its time has passed)."""
    [host] = launch(clients("ec2", REGION), "g5.xlarge", managed_tags(max_runtime="10m"))
    started = launch_time(clients("ec2", REGION), host)
    deadline.handle(
        state_change(host, "running", started), settings=guardrail_settings(), clients=clients, now=started
    )
    assert list(deadline_schedules(clients)) == [names.deadline_schedule(host)]


def test_a_sweep_message_carries_every_owner_it_names(clients: ClientFactory) -> None:
    topic, on_call = sns_queue(clients)
    anas, bobs = owner_queue(clients, topic, ANA), owner_queue(clients, topic, BOB)
    ec2 = clients("ec2", REGION)
    ana = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m", **{tags.OWNER: ANA}))[0]
    bob = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m", **{tags.OWNER: BOB}))[0]
    started = max(launch_time(ec2, ana), launch_time(ec2, bob))

    result = reaper.handle(
        {}, settings=guardrail_settings(sns_topic_arn=topic), clients=clients, now=started + minutes(91)
    )

    assert sorted(result["stopped"]) == sorted([ana, bob])
    [message] = published(clients, on_call)
    assert sorted(json.loads(message["MessageAttributes"]["owner"]["Value"])) == sorted([ANA, BOB])
    assert message["MessageAttributes"]["owner"]["Type"] == "String.Array"
    assert f"owner={ANA}" in message["Message"]
    assert f"owner={BOB}" in message["Message"]
    # Each owner's filtered subscription receives the summary that names their host.
    assert len(published(clients, anas)) == 1
    assert len(published(clients, bobs)) == 1


def test_a_malformed_owner_is_reported_and_never_addressed(clients: ClientFactory) -> None:
    topic, on_call = sns_queue(clients)
    [host] = launch(clients("ec2", REGION), "g5.xlarge", managed_tags(**{tags.OWNER: "ana at example"}))
    started = launch_time(clients("ec2", REGION), host)

    result = reaper.handle(
        {}, settings=guardrail_settings(sns_topic_arn=topic), clients=clients, now=started + minutes(5)
    )

    [row] = result["hosts"]
    assert [report["rule"] for report in row["reports"]] == ["malformed-tags"]
    assert (
        "parkbrake:owner: 'ana at example' is neither an e-mail address nor a chat handle"
        in row["reports"][0]["reason"]
    )
    [message] = published(clients, on_call)
    assert "owner=-" in message["Message"]
    assert "owner" not in message.get("MessageAttributes", {})


def chat_secret(clients: ClientFactory, url: str) -> str:
    arn: str = clients("secretsmanager", REGION).create_secret(
        Name=f"parkbrake/{STACK}/chat-webhook", SecretString=url
    )["ARN"]
    return arn


def test_the_warning_reaches_the_chat_webhook(clients: ClientFactory, webhook: Webhook) -> None:
    topic, on_call = sns_queue(clients)
    secret = chat_secret(clients, webhook.url)
    host, started, schedule = armed_host(clients, **{tags.OWNER: BOB})

    result = fire(
        schedule, clients, started + minutes(75), sns_topic_arn=topic, chat_webhook_secret_arn=secret
    )

    assert result["errors"] == []
    [posted] = webhook.received
    assert posted["text"].startswith(f"*parkbrake {STACK}: {host} (llm-eval) stops at")
    assert f"owner     {BOB}" in posted["text"]
    assert f"parkbrake extend {host}" in posted["text"]
    assert len(published(clients, on_call)) == 1
    # The URL is read once per container: with the secret gone, the next notice still reaches the channel.
    clients("secretsmanager", REGION).delete_secret(SecretId=secret, ForceDeleteWithoutRecovery=True)
    reaper.handle(
        {"instance_ids": [host]},
        settings=guardrail_settings(sns_topic_arn=topic, chat_webhook_secret_arn=secret),
        clients=clients,
        now=started + minutes(90),
    )
    assert len(webhook.received) == 2
    assert "1 stopped" in webhook.received[1]["text"]


def test_a_failing_webhook_is_reported_and_blocks_nothing(
    clients: ClientFactory, webhook: Webhook, caplog: pytest.LogCaptureFixture
) -> None:
    topic, on_call = sns_queue(clients)
    webhook.status = 500
    secret = chat_secret(clients, webhook.url)
    host, started, schedule = armed_host(clients, **{tags.OWNER: BOB})

    warned = fire(
        schedule, clients, started + minutes(75), sns_topic_arn=topic, chat_webhook_secret_arn=secret
    )
    # The deadline's own stop goes on too, and its notice is published.
    stopped = reaper.handle(
        {"instance_ids": [host]},
        settings=guardrail_settings(sns_topic_arn=topic, chat_webhook_secret_arn=secret),
        clients=clients,
        now=started + minutes(90),
    )

    assert warned["warned"] == [host]
    assert warned["errors"] == [
        {"instance_id": host, "action": "chat", "error": "the chat webhook answered HTTP 500"}
    ]
    assert stopped["stopped"] == [host]
    assert {"action": "chat", "error": "the chat webhook answered HTTP 500"} in stopped["errors"]
    subjects = [m["Subject"] for m in published(clients, on_call)]
    assert subjects[0].startswith(f"parkbrake {STACK}: {host} (llm-eval) stops at")
    assert subjects[1] == f"parkbrake {STACK} sweep: 1 stopped, 0 error(s), 0 finding(s)"
    assert [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR] == [
        "could not post to the chat channel: the chat webhook answered HTTP 500"
    ] * 2
    assert len(webhook.received) == 2
