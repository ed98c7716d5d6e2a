"""``parkbrake status`` names who the stack's alarms reach, and says when an e-mail subscription is
still pending confirmation (it receives nothing until then); moto's server over HTTP.

moto confirms every subscription at once; SNS's ``PendingConfirmation`` is injected by rewriting
moto's ``ListSubscriptionsByTopic`` answer in the fault proxy, as AWS answers before the address
follows its link.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy
from click.testing import CliRunner, Result

from cli.main import parkbrake
from cli.oncall.stack_file import set_config_value
from guardrails import names
from tests.cli.oncall.ops_fleet import REGION, STACK, aws_client, demo_fleet, project_copy, seed

ADDRESS = demo_fleet.ALARM_EMAIL
CONFIRMED_LINE = f"alarms {STACK} → {ADDRESS} confirmed"


@pytest.fixture
def fleet(aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(project_copy(tmp_path))
    return seed(aws)


def status(*arguments: str) -> Result:
    return CliRunner().invoke(parkbrake, ["status", "--stack", STACK, "--regions", REGION, *arguments])


def pending(*addresses: str) -> Callable[[bytes], bytes]:
    """moto's ListSubscriptionsByTopic answer as SNS gives it before ``addresses`` confirm."""

    def change(answer: bytes) -> bytes:
        def unconfirmed(member: re.Match[bytes]) -> bytes:
            if not any(f"<Endpoint>{address}</Endpoint>".encode() in member[0] for address in addresses):
                return member[0]
            return re.sub(
                rb"<SubscriptionArn>[^<]*</SubscriptionArn>",
                b"<SubscriptionArn>PendingConfirmation</SubscriptionArn>",
                member[0],
            )

        return re.sub(rb"<member>.*?</member>", unconfirmed, answer, flags=re.DOTALL)

    return change


def summary_of(output: str) -> str:
    """The summary above the hosts' table, as one line however it wrapped."""
    return " ".join(output.partition("GPU hosts (")[0].split())


def email_counts(document: dict[str, Any]) -> tuple[int, int]:
    """(confirmed, unconfirmed) alarm e-mail subscriptions, from the JSON summary."""
    summary = document["summary"]
    return summary["alarm_emails_confirmed"], summary["alarm_emails_unconfirmed"]


def test_a_confirmed_alarm_address_is_named_in_the_summary_and_in_json(aws: str, fleet: Any) -> None:
    text, document = status(), json.loads(status("-o", "json").stdout)

    assert text.exit_code == 0, text.output
    assert f"  {CONFIRMED_LINE}\n" in text.output.partition("GPU hosts (")[0]
    [stack] = document["stacks"]
    assert stack["alarms"] == {
        "topic_arn": fleet.alarm_topic,
        "subscriptions": [{"protocol": "email", "endpoint": ADDRESS, "state": "confirmed"}],
        "error": None,
    }
    assert email_counts(document) == (1, 0)


def test_a_subscription_pending_confirmation_is_shown_as_reaching_nobody(
    aws: str, fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FaultProxy(aws) as proxy:
        proxy.rewrite("ListSubscriptionsByTopic", pending(ADDRESS))
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        text, as_json = status(), status("-o", "json")

    assert text.exit_code == 0, text.output  # pending is a state to see, not a failed read
    assert (
        f"alarms {STACK} → {ADDRESS} pending confirmation: nobody is paged until an address confirms"
        in summary_of(text.output)
    )
    assert CONFIRMED_LINE not in text.output
    document = json.loads(as_json.stdout)
    [stack] = document["stacks"]
    assert stack["alarms"]["subscriptions"] == [
        {"protocol": "email", "endpoint": ADDRESS, "state": "pending confirmation"}
    ]
    assert email_counts(document) == (0, 1)


def test_beside_a_confirmed_address_an_unconfirmed_one_is_still_named(
    aws: str, fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    aws_client(aws, "sns").subscribe(
        TopicArn=fleet.alarm_topic, Protocol="email", Endpoint="lead@parkbrake.dev"
    )
    with FaultProxy(aws) as proxy:
        proxy.rewrite("ListSubscriptionsByTopic", pending("lead@parkbrake.dev"))
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        text, as_json = status(), status("-o", "json")

    assert (
        f"alarms {STACK} → {ADDRESS} confirmed, lead@parkbrake.dev pending confirmation: an unconfirmed "
        "address gets no alarm" in summary_of(text.output)
    )
    assert email_counts(json.loads(as_json.stdout)) == (1, 1)


def test_subscriptions_that_cannot_be_read_are_one_error_line_and_the_rest_is_shown(
    aws: str, fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FaultProxy(aws) as proxy:
        proxy.fail("ListSubscriptionsByTopic", "AuthorizationError", "not authorized", status=403)
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        text, as_json = status(), status("-o", "json")

    error = f"{REGION} stack {STACK}: alarm subscriptions unknown: AuthorizationError: not authorized"
    assert text.exit_code == 1
    assert f"alarms {STACK}: subscriptions unknown (see the error below)" in text.output
    assert [line for line in text.output.splitlines() if line.startswith("error:")] == [f"error: {error}"]
    assert text.output.splitlines()[-1] == f"error: {error}"  # the exit reason, on the last screen
    assert "GPU hosts (4), most urgent first" in text.output  # everything else is still shown
    document = json.loads(as_json.stdout)
    assert as_json.exit_code == 1
    assert document["errors"] == [error]
    [stack] = document["stacks"]
    assert stack["alarms"] == {
        "topic_arn": fleet.alarm_topic,
        "subscriptions": None,
        "error": "AuthorizationError: not authorized",
    }
    assert len(document["hosts"]) == 4


def test_topics_that_cannot_be_listed_leave_the_alarms_unknown(
    aws: str, fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FaultProxy(aws) as proxy:
        proxy.fail("ListTopics", "AuthorizationError", "not authorized", status=403)
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        document = json.loads(status("-o", "json").stdout)

    assert document["errors"] == [
        f"{REGION} stack {STACK}: alarm subscriptions unknown: AuthorizationError: not authorized"
    ]
    assert document["stacks"][0]["alarms"]["topic_arn"] is None


def test_a_stack_without_its_alarm_topic_says_its_alarms_may_reach_nobody(aws: str, fleet: Any) -> None:
    aws_client(aws, "sns").delete_topic(TopicArn=fleet.alarm_topic)

    text, document = status(), json.loads(status("-o", "json").stdout)

    assert text.exit_code == 0, text.output
    assert f"no topic {names.alarm_topic(STACK)}" in " ".join(text.output.split())
    assert document["stacks"][0]["alarms"] == {"topic_arn": None, "subscriptions": [], "error": None}


def test_the_topic_a_stack_file_adopts_is_read_when_the_stack_has_none_of_its_own(
    aws: str, fleet: Any
) -> None:
    sns = aws_client(aws, "sns")
    sns.delete_topic(TopicArn=fleet.alarm_topic)  # a stack that adopts a topic creates none
    adopted = sns.create_topic(Name="team-pager")["TopicArn"]
    sns.subscribe(TopicArn=adopted, Protocol="email", Endpoint="pager@corp.dev")
    sns.subscribe(TopicArn=adopted, Protocol="sqs", Endpoint=f"arn:aws:sqs:{REGION}:123456789012:audit")
    set_config_value(Path(f"Pulumi.{STACK}.yaml"), "parkbrake:guardrails.alarm_topic_arn", adopted)

    text, document = status(), json.loads(status("-o", "json").stdout)

    assert f"alarms {STACK} → pager@corp.dev confirmed" in text.output  # e-mail only: people
    assert ADDRESS not in text.output
    alarms = document["stacks"][0]["alarms"]
    assert alarms["topic_arn"] == adopted
    assert {item["protocol"] for item in alarms["subscriptions"]} == {"email", "sqs"}
