"""No way out by tag, and no silent failure: the sweep against moto over HTTP, its one SNS message read
through an SQS queue subscribed to the topic, and the once-a-day record of findings in DynamoDB."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from guardrail_fleet import (
    REGION,
    STACK,
    client_factory,
    guardrail_settings,
    heartbeats,
    latest_launch,
    launch,
    launch_time,
    managed_tags,
    published,
    sns_queue,
    states,
)

from guardrails import names, tags
from guardrails.durations import format_duration
from guardrails.pricing import cost_since_start, load_price_table
from lambdas import reaper
from lambdas.aws.environment import ClientFactory
from lambdas.aws.notices import EXPIRES_AT, KEY

NOTICES_TABLE = "parkbrake-test-notices"


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    made = client_factory(aws)
    made("ssm", REGION).put_parameter(Name=names.park_parameter(STACK), Value="false", Type="String")
    return made


def notices_table(clients: ClientFactory) -> str:
    """The table the Guardrails component declares: one key, expiring items."""
    dynamodb = clients("dynamodb", REGION)
    dynamodb.create_table(
        TableName=NOTICES_TABLE,
        KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.update_time_to_live(
        TableName=NOTICES_TABLE, TimeToLiveSpecification={"Enabled": True, "AttributeName": EXPIRES_AT}
    )
    return NOTICES_TABLE


class Escapes:
    """Each way a tag used to take a host out of the guardrails, launched together."""

    def __init__(self, clients: ClientFactory) -> None:
        ec2 = clients("ec2", REGION)
        self.typo = launch(
            ec2, "p5.48xlarge", {**managed_tags(max_runtime="3h"), tags.STACK: "tset", "Name": "llm-pretrain"}
        )[0]
        self.managed_false = launch(
            ec2, "g5.xlarge", {**managed_tags(tenant="vision"), tags.MANAGED: "false", "Name": "notebook-ana"}
        )[0]
        self.no_managed_tag = launch(ec2, "g5.xlarge", {"Name": "scratch"})[0]
        self.month_cap = launch(ec2, "g5.xlarge", {**managed_tags(max_runtime="31d"), "Name": "long-eval"})[0]
        self.started = latest_launch(
            ec2, [self.typo, self.managed_false, self.no_managed_tag, self.month_cap]
        )


def sweep(clients: ClientFactory, now: datetime, **settings: object) -> dict[str, object]:
    return reaper.handle({}, settings=guardrail_settings(**settings), clients=clients, now=now)


def test_no_tag_takes_a_host_out_of_the_sweep(clients: ClientFactory) -> None:
    hosts = Escapes(clients)
    topic, queue_url = sns_queue(clients)
    two_hours = hosts.started + timedelta(hours=2)

    result = sweep(clients, two_hours, sns_topic_arn=topic)

    # The typo'd stack is judged under this stack's 90m default, not the 3h its tag asks for, but not
    # stopped: IAM cannot tell 'tset' from a live stack, and this stack's roles stop only its own hosts.
    assert result["stopped"] == []
    assert states(clients("ec2", REGION), [hosts.typo]) == {hosts.typo: "running"}
    reports = {row["instance_id"]: [r["rule"] for r in row["reports"]] for row in result["hosts"]}
    assert reports[hosts.typo] == ["orphaned"]
    assert reports[hosts.managed_false] == ["untagged-accelerator"]
    assert reports[hosts.no_managed_tag] == ["untagged-accelerator"]
    assert reports[hosts.month_cap] == ["cap-above-ceiling"]

    [message] = published(clients, queue_url)
    assert message["Subject"] == f"parkbrake {STACK} sweep: 0 stopped, 0 error(s), 4 finding(s)"
    body = message["Message"]
    assert "Findings (4):" in body
    assert (
        f"- {hosts.typo} ({REGION}) Name=llm-pretrain tenant=research pool=training type=p5.48xlarge" in body
    )
    ran = two_hours - launch_time(clients("ec2", REGION), hosts.typo)
    p5_cost = cost_since_start(load_price_table().instance("p5.48xlarge").usd_per_hour, ran)
    assert f"running {format_duration(ran)}, cost so far ${p5_cost:,.2f}" in body
    assert "parkbrake:stack 'tset' names no stack in us-east-1" in body
    assert "stopped only once retagged parkbrake:stack=test or by hand" in body
    assert (
        f"- {hosts.managed_false} ({REGION}) Name=notebook-ana tenant=vision pool=training type=g5.xlarge"
        in body
    )
    assert "action: reported (unmanaged)" in body
    assert "parkbrake:managed is 'false', not 'true'" in body
    assert f"- {hosts.no_managed_tag} ({REGION}) Name=scratch tenant=- pool=- type=g5.xlarge" in body
    assert "action: reported (clamped)" in body
    assert "parkbrake:max-runtime '31d' (31d) is above the ceiling; clamped to 1d" in body
    # Findings are not errors: the sweep completed, and its heartbeat is written.
    assert result["errors"] == []
    assert len(heartbeats(clients)) == 1

    # The month-long cap holds only to the ceiling.
    next_day = sweep(clients, hosts.started + timedelta(hours=24), sns_topic_arn=topic)
    assert next_day["stopped"] == [hosts.month_cap]
    [stopped] = published(clients, queue_url)
    assert "past its 1d cap (ceiling)" in stopped["Message"]


def test_unmanaged_hosts_are_stopped_and_said_so_when_configured(clients: ClientFactory) -> None:
    hosts = Escapes(clients)
    topic, queue_url = sns_queue(clients)
    result = sweep(clients, hosts.started + timedelta(minutes=5), sns_topic_arn=topic, reap_untagged=True)
    assert set(result["stopped"]) == {hosts.managed_false, hosts.no_managed_tag}
    # Tagged first: the guardrails' IAM may stop only hosts tagged parkbrake:managed=true.
    described = clients("ec2", REGION).describe_instances(
        InstanceIds=[hosts.managed_false, hosts.no_managed_tag]
    )
    for instance in (i for r in described["Reservations"] for i in r["Instances"]):
        instance_tags = {tag["Key"]: tag["Value"] for tag in instance["Tags"]}
        assert (instance_tags[tags.MANAGED], instance_tags[tags.STACK]) == ("true", STACK)
        assert instance["State"]["Name"] == "stopped"
    [message] = published(clients, queue_url)
    assert message["Subject"] == f"parkbrake {STACK} sweep: 2 stopped, 0 error(s), 2 finding(s)"
    assert "PARKBRAKE_REAP_UNTAGGED is on" in message["Message"]


def test_a_managed_host_of_no_stack_is_adopted_as_this_stacks_then_stopped(clients: ClientFactory) -> None:
    ec2 = clients("ec2", REGION)
    values = {key: value for key, value in managed_tags().items() if key != tags.STACK}
    (orphan,) = launch(ec2, "g5.xlarge", values)

    result = sweep(clients, latest_launch(ec2, [orphan]) + timedelta(hours=2))

    assert result["stopped"] == [orphan]
    assert states(ec2, [orphan]) == {orphan: "stopped"}
    (instance,) = ec2.describe_instances(InstanceIds=[orphan])["Reservations"][0]["Instances"]
    adopted = {tag["Key"]: tag["Value"] for tag in instance["Tags"]}
    assert adopted[tags.STACK] == STACK  # what IAM lets it stop


def test_a_repeated_finding_reaches_people_at_most_once_a_day(clients: ClientFactory) -> None:
    hosts = Escapes(clients)
    topic, queue_url = sns_queue(clients)
    table = notices_table(clients)
    settings = {"sns_topic_arn": topic, "notices_table": table}
    start = hosts.started + timedelta(hours=2)

    sweep(clients, start, **settings)
    [first] = published(clients, queue_url)
    assert first["Subject"].endswith("0 stopped, 0 error(s), 4 finding(s)")

    for minutes in (5, 60, 21 * 60):  # the same findings, every sweep of the day: nothing new to say
        assert sweep(clients, start + timedelta(minutes=minutes), **settings)["notified"] is None
    assert published(clients, queue_url) == []

    # A new finding is sent at once, alone; the repeated ones are counted, not repeated.
    late = launch(clients("ec2", REGION), "g5.xlarge", {"Name": "late"})[0]
    sweep(clients, start + timedelta(hours=21, minutes=5), **settings)
    [new] = published(clients, queue_url)
    assert new["Subject"].endswith("0 stopped, 0 error(s), 1 finding(s)")
    assert late in new["Message"]
    assert "4 finding(s) already sent within the last 1d are not repeated." in new["Message"]

    # A day after they were sent, the findings still standing are sent again.
    after_a_day = start + timedelta(days=1, minutes=5)
    result = sweep(clients, after_a_day, **settings)
    [again] = published(clients, queue_url)
    assert result["stopped"] == [hosts.month_cap]  # past its clamped 1d cap by now
    assert hosts.managed_false in again["Message"]
    assert hosts.no_managed_tag in again["Message"]
    assert late not in again["Message"]  # sent 3h ago


def test_a_publish_that_fails_is_an_error_and_is_sent_again_next_sweep(clients: ClientFactory) -> None:
    hosts = Escapes(clients)
    topic, queue_url = sns_queue(clients)
    table = notices_table(clients)
    missing_topic = topic.replace("parkbrake-alerts", "deleted-topic")
    now = hosts.started + timedelta(minutes=30)

    failed = sweep(clients, now, sns_topic_arn=missing_topic, notices_table=table)

    assert [error["action"] for error in failed["errors"]] == ["notify"]
    assert heartbeats(clients) == []  # an unsent notice withholds the heartbeat: the alarm pages
    sweep(clients, now + timedelta(minutes=5), sns_topic_arn=topic, notices_table=table)
    [message] = published(clients, queue_url)
    assert message["Subject"].endswith("0 stopped, 0 error(s), 4 finding(s)")


def test_an_unreadable_stack_list_adopts_no_typo_and_is_an_error(aws: str) -> None:
    """Without the list of stacks, a host naming another stack cannot be told from an orphan: it is
    left alone this sweep, the error is reported and the heartbeat withheld."""
    from aws_fault_proxy import FaultProxy

    with FaultProxy(aws) as proxy:
        clients = client_factory(proxy.url)
        hosts = Escapes(clients)
        proxy.fail("GetParametersByPath", "AccessDeniedException", "not authorized", status=400)
        result = sweep(clients, hosts.started + timedelta(hours=2))
        assert result["stopped"] == []
        assert [(e["region"], e["action"]) for e in result["errors"]] == [(REGION, "list-stacks")]
        assert heartbeats(clients) == []


def test_cost_so_far_is_billed_per_second_with_a_minute_minimum() -> None:
    price = Decimal("3.6")
    assert cost_since_start(price, timedelta(seconds=10)) == Decimal("0.06")
    assert cost_since_start(price, timedelta(seconds=90)) == Decimal("0.09")
