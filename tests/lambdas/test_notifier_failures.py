"""A notifier that fails (a malformed chat-webhook secret, a chat host that cannot be reached, an SNS
topic that is gone or misnamed) is an error in the sweep's result and a counted metric: the hosts are
still stopped, every decision is still logged, and no part of the webhook's secret appears in any log
line, metric, result or message (moto in server mode)."""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from guardrail_fleet import (
    REGION,
    STACK,
    client_factory,
    guardrail_settings,
    latest_launch,
    launch,
    managed_tags,
    metric_value,
    minutes,
    published,
    sns_queue,
    states,
)

from guardrails import names
from lambdas import reaper
from lambdas.aws.environment import ClientFactory

TOKEN = "xoxb-SECRET-4f9a1c7e2b"
MALFORMED_SECRETS = [
    f"https://hooks.example.invalid/services/T0/B0/{TOKEN}\n/x",  # a control character: InvalidURL
    f"https://hooks.example.invalid/services/{TOKEN} x",  # a space
    f'{{"url": "https://hooks.example.invalid/{TOKEN}"',  # JSON cut short: JSONDecodeError
    f'["https://hooks.example.invalid/{TOKEN}"]',  # JSON of the wrong type
    f'{{"url": ["https://hooks.example.invalid/{TOKEN}"]}}',
    f"https://hooks.example.invalid:99999/{TOKEN}",  # a port out of range
    f"https://[{TOKEN}/services",  # an unclosed IPv6 host
    f"https://127.0.0.1:9/{TOKEN}",  # nothing listens there
    f"ftp://hooks.example.invalid/{TOKEN}",
]


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    made = client_factory(aws)
    made("ssm", REGION).put_parameter(Name=names.park_parameter(STACK), Value="false", Type="String")
    return made


def due_host(clients: ClientFactory) -> tuple[str, object]:
    ec2 = clients("ec2", REGION)
    [host] = launch(ec2, "g5.xlarge", managed_tags(max_runtime="1h"))
    return host, latest_launch(ec2, [host]) + minutes(70)


@pytest.mark.parametrize("secret_value", MALFORMED_SECRETS)
def test_a_malformed_chat_secret_is_an_error_and_a_metric_and_never_leaks(
    clients: ClientFactory,
    secret_value: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic, queue_url = sns_queue(clients)
    secret = clients("secretsmanager", REGION).create_secret(
        Name=f"parkbrake/{STACK}/chat-{uuid.uuid4().hex[:8]}", SecretString=secret_value
    )["ARN"]
    host, now = due_host(clients)
    caplog.set_level(logging.INFO)  # as the Lambdas log (botocore at DEBUG prints responses whole)

    result = reaper.handle(
        {},
        settings=guardrail_settings(sns_topic_arn=topic, chat_webhook_secret_arn=secret),
        clients=clients,
        now=now,
    )

    assert states(clients("ec2", REGION), [host]) == {host: "stopped"}
    assert [error["action"] for error in result["errors"]] == ["chat"]
    assert any(f"decision stop {host}" in record.getMessage() for record in caplog.records)
    messages = published(clients, queue_url)
    assert len(messages) == 1  # the e-mail channel is unaffected
    printed = capsys.readouterr()
    assert (
        metric_value(printed.out, "GuardrailActions", Guardrail="reaper", Action="error", Reason="chat") == 1
    )
    everything = "\n".join(
        [caplog.text, printed.out, printed.err, json.dumps(result), json.dumps(messages)]
        + [f"{record.exc_info}" for record in caplog.records]
    )
    assert TOKEN not in everything


@pytest.mark.parametrize(
    "topic_arn", ["arn:aws:sns:us-east-1:123456789012:deleted-topic", "arn:aws:sns", "arn:"]
)
def test_a_failing_sns_topic_is_an_error_and_a_metric_and_the_decisions_are_logged(
    clients: ClientFactory,
    topic_arn: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    host, now = due_host(clients)
    caplog.set_level(logging.INFO)

    result = reaper.handle({}, settings=guardrail_settings(sns_topic_arn=topic_arn), clients=clients, now=now)

    assert result["stopped"] == [host]
    assert [error["action"] for error in result["errors"]] == ["notify"]
    assert any(f"decision stop {host}" in record.getMessage() for record in caplog.records)
    out = capsys.readouterr().out
    assert metric_value(out, "GuardrailActions", Guardrail="reaper", Action="error", Reason="notify") == 1


def test_the_meters_unpriced_alert_to_a_gone_topic_is_an_error_and_a_metric(
    clients: ClientFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    from lambdas.engines import metering

    unpriced = [
        {
            "instance_id": "i-0123456789abcdef0",
            "instance_type": "p5e.48xlarge",
            "region": REGION,
            "owner": "-",
        }
    ]
    settings = guardrail_settings(sns_topic_arn="arn:aws:sns:us-east-1:123456789012:deleted-topic")

    errors = metering.alert_unpriced(unpriced, settings=settings, clients=clients)

    assert [error["action"] for error in errors] == ["notify"]
    out = capsys.readouterr().out
    assert metric_value(out, "GuardrailActions", Guardrail="meter", Action="error", Reason="notify") == 1
