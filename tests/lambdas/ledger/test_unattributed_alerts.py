"""Usage metered for tenant ``unattributed`` reaches a person like an unpriced host: a counted action
and an SNS message naming ``parkbrake ledger attribute``; a backfilled stop of an earlier launch
never passes the current launch's tenant to that launch."""

from __future__ import annotations

from datetime import timedelta

import pytest
from guardrail_fleet import (
    client_factory,
    guardrail_settings,
    launch,
    launch_time,
    managed_tags,
    published,
    sns_queue,
    state_change,
)

from guardrails.ledger import UNATTRIBUTED, state_change_from_event
from lambdas.aws.environment import ClientFactory
from lambdas.engines import metering
from lambdas.ledger.store import LedgerStore


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    return client_factory(aws)


def test_an_earlier_launch_metered_for_nobody_is_alerted_with_the_attribute_command(
    store: LedgerStore, clients: ClientFactory
) -> None:
    topic, queue = sns_queue(clients)
    (host,) = launch(clients("ec2", None), "p4d.24xlarge", managed_tags(tenant="vision"))
    launched = launch_time(clients("ec2", None), host)
    earlier = [state_change(host, "running", launched - timedelta(hours=5)),
               state_change(host, "stopped", launched - timedelta(hours=4))]  # fmt: skip
    result = metering.meter([state_change_from_event(event) for event in earlier], store=store, clients=clients,
                            settings=guardrail_settings(), received_at=launched, source="ingest")  # fmt: skip
    # The stop is the earlier launch's: it carries no tenant, so it says nothing of whose it was.
    (interval,) = store.intervals()
    assert interval.attribution.tenant == UNATTRIBUTED
    assert store.usage(now=launched, tenants=["vision"]) == {}

    errors = metering.alert_unattributed(
        result.metered_unattributed, settings=guardrail_settings(sns_topic_arn=topic), clients=clients
    )
    assert errors == []
    (message,) = published(clients, queue)
    since = (launched - timedelta(hours=5)).isoformat()
    assert message["Subject"] == "parkbrake: usage metered for no tenant"
    assert (
        f"1 start(s) of 1 host(s) metered for tenant unattributed: {host} (from {since})"
        in message["Message"]
    )
    assert (
        f"`parkbrake ledger attribute {host} --tenant TENANT --since {since} --reason TEXT`"
        in message["Message"]
    )


def test_nothing_metered_for_nobody_alerts_nobody(clients: ClientFactory) -> None:
    topic, queue = sns_queue(clients)
    assert (
        metering.alert_unattributed([], settings=guardrail_settings(sns_topic_arn=topic), clients=clients)
        == []
    )
    assert published(clients, queue) == []


def test_an_unreachable_notifier_is_an_error_in_the_result_not_a_raise(clients: ClientFactory) -> None:
    note = {
        "event_id": "e",
        "instance_id": "i-0aaaaaaaaaaaaaaa1",
        "reason": "r",
        "at": "2036-05-05T10:00:00+00:00",
    }
    settings = guardrail_settings(sns_topic_arn="arn:aws:sns:us-east-1:123456789012:no-such-topic")
    (error,) = metering.alert_unattributed([note], settings=settings, clients=clients)
    assert error["action"] == "notify"
    assert error["error"]
