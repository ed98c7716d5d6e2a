"""The owner's decisions in the ledger's decision log (real PostgreSQL, AWS in moto): ``parkbrake
extend`` appends who extended which host, when and why; the reaper's warning appends whom it told."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from guardrail_fleet import (
    ACCOUNT,
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
    sns_queue,
)

from cli.main import parkbrake
from guardrails import names, tags
from guardrails.rules.base import instant
from lambdas import reaper
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.environment import ClientFactory
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    made = client_factory(aws)
    made("ssm", REGION).put_parameter(Name=names.park_parameter(STACK), Value="false", Type="String")
    create_deadline_group(made)
    return made


def test_an_extension_and_the_warning_are_in_the_decision_log(
    clients: ClientFactory, ledger_url: str, store: LedgerStore
) -> None:
    [host] = launch(
        clients("ec2", REGION),
        "g5.xlarge",
        managed_tags(max_runtime="90m", **{tags.OWNER: "ana@example.com"}),
    )
    started = launch_time(clients("ec2", REGION), host)
    env = {"PARKBRAKE_STACK": STACK, "PARKBRAKE_REGIONS": REGION, "PARKBRAKE_DATABASE_URL": ledger_url}

    result = CliRunner().invoke(
        parkbrake,
        ["extend", host, "--by", "1h", "--reason", "eval finishing", "--yes", "--output", "json"],
        env=env,
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["errors"] == []

    warning = deadline_schedules(clients)[names.warning_schedule(host)]
    topic, _ = sns_queue(clients)
    warned = reaper.handle(
        json.loads(warning["Target"]["Input"]),
        settings=guardrail_settings(sns_topic_arn=topic),
        clients=clients,
        now=started + minutes(135),
        decisions=DecisionLog(guardrail="reaper", origin="req-1", ledger=lambda: DecisionLedger.of(store)),
    )
    assert warned["warned"] == [host]

    extension, told = (logged.decision for logged in DecisionLedger.of(store).read(instance_id=host))
    assert (extension.kind, extension.actor, extension.reason) == (
        "extend",
        f"arn:aws:sts::{ACCOUNT}:user/moto",
        "eval finishing",
    )
    assert extension.tenant == "research"
    assert extension.details == {
        "previous_deadline": instant(started + minutes(90)),
        "deadline": instant(started + minutes(150)),
        "by": "1h",
    }
    assert (told.kind, told.actor) == ("warn", "reaper")
    assert (
        told.reason
        == f"told ana@example.com that it stops at {instant(started + minutes(150))} unless extended"
    )
    assert told.details["owner"] == "ana@example.com"


def test_a_ledger_that_is_down_fails_the_command_but_the_extension_holds(clients: ClientFactory) -> None:
    [host] = launch(clients("ec2", REGION), "g5.xlarge", managed_tags(max_runtime="90m"))
    env = {
        "PARKBRAKE_STACK": STACK,
        "PARKBRAKE_REGIONS": REGION,
        "PARKBRAKE_DATABASE_URL": "postgresql://parkbrake@127.0.0.1:1/ledger?connect_timeout=1",
    }
    result = CliRunner().invoke(
        parkbrake,
        ["extend", host, "--by", "1h", "--reason", "eval", "--yes"],
        env=env,
        catch_exceptions=False,
    )
    assert result.exit_code == 1
    assert "the extension is recorded on the host, but: record-decisions:" in result.output
    described = clients("ec2", REGION).describe_instances(InstanceIds=[host])["Reservations"][0]["Instances"][
        0
    ]
    assert tags.EXEMPT_UNTIL in {tag["Key"] for tag in described["Tags"]}
