"""The meter against moto's server and a real ledger: native events in, attributed rows out."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy
from botocore.exceptions import ClientError
from guardrail_fleet import (
    STACK,
    client_factory,
    guardrail_settings,
    launch,
    launch_time,
    managed_tags,
    published,
    sns_queue,
    state_change,
)
from ledger_streams import T0, at, ms, step, who

from cli.usage.ingest import ingest_changes
from guardrails import names, tags
from guardrails.decisions import RELAY_DETAIL_TYPE, RELAY_SOURCE, Decision
from guardrails.ledger import UNATTRIBUTED, MalformedEvent, state_change_from_event, to_ms
from guardrails.pricing import load_price_table
from lambdas import meter
from lambdas.aws.environment import ClientFactory, container_settings
from lambdas.engines import metering, replaying
from lambdas.ledger.connections import LedgerUnavailable
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore, container_store


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    return client_factory(aws)


def metered(
    events: list[dict[str, Any]], *, store: LedgerStore, clients: ClientFactory
) -> metering.MeterResult:
    changes = [state_change_from_event(event) for event in events]
    # Received a day after the virtual clock starts: the tests' events are all in its past.
    return metering.meter(changes, store=store, clients=clients, settings=guardrail_settings(),
                       received_at=T0 + timedelta(days=1))  # fmt: skip


def test_a_gpu_host_is_attributed_from_its_tags_and_type(store: LedgerStore, clients: ClientFactory) -> None:
    (instance_id,) = launch(
        clients("ec2", None), "g5.12xlarge", managed_tags(tenant="vision", max_runtime="2h")
    )
    result = metered(
        [state_change(instance_id, "running", at(0)), state_change(instance_id, "stopped", at(30))],
        store=store,
        clients=clients,
    )
    assert (result.inserted, result.duplicates, result.tenants) == (2, 0, {"vision"})
    (interval,) = store.intervals()
    assert interval.attribution.accelerators == 4  # g5.12xlarge, from the price table
    assert interval.attribution.cap_ms == 2 * 3_600_000
    assert store.usage(now=at(60))[("vision", "training", "g5.12xlarge")].accelerator_ms == 4 * 30 * 60_000


def test_duplicates_are_ignored_and_hosts_without_accelerators_are_not_metered(
    store: LedgerStore, clients: ClientFactory
) -> None:
    ec2 = clients("ec2", None)
    (gpu,) = launch(ec2, "g5.xlarge", managed_tags())
    (cpu,) = launch(ec2, "m5.large", managed_tags())
    running = state_change(gpu, "running", at(0))
    result = metered([running, running, state_change(cpu, "running", at(0))], store=store, clients=clients)
    assert (result.inserted, result.duplicates) == (1, 1)
    assert [note["instance_id"] for note in result.skipped] == [cpu]
    assert metered([running], store=store, clients=clients).duplicates == 1


def test_an_untagged_gpu_host_is_still_metered_as_unattributed(
    store: LedgerStore, clients: ClientFactory
) -> None:
    (instance_id,) = launch(clients("ec2", None), "g5.xlarge", {})
    metered([state_change(instance_id, "running", at(0))], store=store, clients=clients)
    (interval,) = store.intervals()
    assert (interval.attribution.tenant, interval.attribution.pool) == (UNATTRIBUTED, UNATTRIBUTED)
    assert interval.attribution.cap_ms == 90 * 60_000  # the stack's default cap


def test_a_late_stop_for_a_host_ec2_has_forgotten_uses_what_the_ledger_knew(
    store: LedgerStore, clients: ClientFactory
) -> None:
    ec2 = clients("ec2", None)
    (instance_id,) = launch(ec2, "g5.xlarge", managed_tags(tenant="product"))
    metered([state_change(instance_id, "running", at(0))], store=store, clients=clients)
    forgotten = "i-0123456789abcdef0"  # EC2 no longer describes it; the ledger saw it run
    store.append([step("r-old", forgotten, "running", ms(0), who("product"))], source="meter", received_at=T0)
    result = metered(
        [
            state_change(forgotten, "terminated", at(20)),
            state_change("i-0fffffffffffffff0", "stopped", at(20)),
        ],
        store=store,
        clients=clients,
    )
    assert result.inserted == 1
    assert [note["instance_id"] for note in result.unattributed] == ["i-0fffffffffffffff0"]
    closed = [interval for interval in store.intervals() if interval.instance_id == forgotten]
    assert closed[0].attribution.tenant == "product"
    assert closed[0].ended_ms is not None


def test_throttled_describe_raises_so_eventbridge_retries_and_nothing_is_written(
    aws: str, store: LedgerStore
) -> None:
    (instance_id,) = launch(client_factory(aws)("ec2", None), "g5.xlarge", managed_tags())
    with FaultProxy(aws) as proxy:
        proxy.fail("DescribeInstances", "RequestLimitExceeded", "Request limit exceeded.", status=503)
        with pytest.raises(ClientError, match="RequestLimitExceeded"):
            metered([state_change(instance_id, "running", at(0))], store=store,
                    clients=client_factory(proxy.url, max_attempts=2))  # fmt: skip
        assert proxy.failed["DescribeInstances"] > 1  # botocore retried, then gave up
    assert store.intervals() == []


@pytest.fixture
def lambda_environment(aws: str, ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The environment the Guardrails component gives the meter, read once per (test) container."""
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    monkeypatch.setenv("PARKBRAKE_STACK", "test")
    container_settings.cache_clear()
    container_store.cache_clear()
    yield
    if container_store.cache_info().currsize:
        container_store().close()
    container_settings.cache_clear()
    container_store.cache_clear()


@pytest.mark.usefixtures("lambda_environment")
def test_the_handler_meters_a_native_event_and_checks_the_tenants_budget(aws: str) -> None:
    ec2 = client_factory(aws)("ec2", None)
    (instance_id,) = launch(ec2, "g5.xlarge", managed_tags())
    event = state_change(instance_id, "running", launch_time(ec2, instance_id))  # the handler's clock is real
    outcome = meter.handler(event, None)
    assert (outcome["inserted"], outcome["tenants"]) == (1, ["research"])
    assert outcome["budget"]["checked"] == ["research"]
    assert meter.handler(event, None)["duplicates"] == 1  # EventBridge delivered it twice


@pytest.mark.usefixtures("lambda_environment")
def test_the_handler_raises_while_the_database_is_down_and_loses_nothing(
    aws: str, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ec2 = client_factory(aws)("ec2", None)
    (instance_id,) = launch(ec2, "g5.xlarge", managed_tags())
    event = state_change(instance_id, "running", launch_time(ec2, instance_id))
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", "postgresql://parkbrake@127.0.0.1:9/ledger")
    with pytest.raises(LedgerUnavailable, match="cannot use the ledger database"):
        meter.handler(event, None)
    container_store.cache_clear()
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    assert meter.handler(event, None)["inserted"] == 1  # EventBridge's retry lands


def test_a_malformed_event_is_refused_with_its_problems() -> None:
    with pytest.raises(MalformedEvent, match=r"detail\.instance-id: missing"):
        meter.handler({"id": "x", "detail-type": "EC2 Instance State-change Notification", "region": "us-east-1",
                       "time": "2036-05-05T10:00:00Z", "detail": {"state": "running"}}, None)  # fmt: skip


def test_usage_grows_with_the_virtual_clock_for_an_open_host(
    store: LedgerStore, clients: ClientFactory
) -> None:
    (instance_id,) = launch(clients("ec2", None), "g5.xlarge", managed_tags())
    metered([state_change(instance_id, "running", at(0))], store=store, clients=clients)
    key = ("research", "training", "g5.xlarge")
    assert store.usage(now=at(10))[key].accelerator_ms == 600_000
    assert store.usage(now=at(10) + timedelta(seconds=1))[key].accelerator_ms == 601_000


def test_a_type_missing_from_the_price_table_is_metered_in_seconds_and_repriced_later(
    store: LedgerStore, clients: ClientFactory
) -> None:
    ec2 = clients("ec2", None)
    (new,) = launch(ec2, "p5e.48xlarge", managed_tags(tenant="research"))
    (known,) = launch(ec2, "g5.xlarge", managed_tags(tenant="research"))
    result = metered(
        [state_change(new, "running", at(0)), state_change(known, "running", at(0)),
         state_change(new, "stopped", at(10)), state_change(known, "stopped", at(10))],
        store=store, clients=clients,
    )  # fmt: skip
    assert result.inserted == 4  # the rest of the batch is never lost
    assert [note["instance_id"] for note in result.unpriced] == [new]
    rows = {row.instance_type: row for row in store.usage_rows(now=at(60))}
    assert rows["p5e.48xlarge"].usage.accelerator_ms == 8 * 10 * 60_000  # 8 GPUs: counted, though unpriced
    assert (rows["p5e.48xlarge"].unpriced_ms, rows["p5e.48xlarge"].usage.usd_hour_ms) == (600_000, 0)
    assert rows["g5.xlarge"].unpriced_ms == 0
    store.add_price("p5e.48xlarge", Decimal("113.9328"), None, "test: first price")
    repriced = {row.instance_type: row for row in store.usage_rows(now=at(60))}["p5e.48xlarge"]
    assert (repriced.unpriced_ms, repriced.usage.cost_usd) == (0, Decimal("18.988800"))


def test_a_type_newer_than_the_price_tables_accelerator_counts_is_counted_from_ec2(
    store: LedgerStore, clients: ClientFactory
) -> None:
    table = load_price_table()
    older = replace(
        table, accelerator_counts={k: v for k, v in table.accelerator_counts.items() if k != "p5e.48xlarge"}
    )
    (new,) = launch(clients("ec2", None), "p5e.48xlarge", managed_tags(tenant="research"))
    changes = [state_change_from_event(state_change(new, "running", at(0)))]
    result = metering.meter(
        changes, store=store, clients=clients, settings=guardrail_settings(), received_at=T0, prices=older
    )
    assert result.inserted == 1
    (interval,) = store.intervals(tenant="research")
    assert interval.attribution.accelerators == 8  # DescribeInstanceTypes' GpuInfo


def test_an_unpriced_start_reaches_a_person_by_sns(store: LedgerStore, clients: ClientFactory) -> None:
    topic, queue = sns_queue(clients)
    (new,) = launch(clients("ec2", None), "p5e.48xlarge", managed_tags())
    result = metered([state_change(new, "running", at(0))], store=store, clients=clients)
    metering.alert_unpriced(
        result.unpriced, settings=guardrail_settings(sns_topic_arn=topic), clients=clients
    )
    (message,) = published(clients, queue)
    assert "p5e.48xlarge" in message["Message"]
    assert new in message["Message"]
    assert message["Message"].endswith(
        "Owners: nobody (no valid parkbrake:owner tag; the on-call subscribers get this)."
    )
    assert "owner" not in message.get("MessageAttributes", {})


def test_an_unpriced_notice_names_each_hosts_owner_and_carries_them_as_attributes(
    store: LedgerStore, clients: ClientFactory
) -> None:
    topic, queue = sns_queue(clients)
    ec2 = clients("ec2", None)
    hosts = [launch(ec2, "p5e.48xlarge", managed_tags() | {tags.OWNER: owner})[0]
             for owner in ("ana@example.com", "@bob", "not an owner")]  # fmt: skip
    result = metered([state_change(host, "running", at(0)) for host in hosts], store=store, clients=clients)
    metering.alert_unpriced(
        result.unpriced, settings=guardrail_settings(sns_topic_arn=topic), clients=clients
    )
    (message,) = published(clients, queue)
    assert f"{hosts[0]} (owner ana@example.com)" in message["Message"]
    assert f"{hosts[2]} (owner -)" in message["Message"]  # a malformed owner is never an address
    assert message["MessageAttributes"]["owner"]["Type"] == "String.Array"
    assert sorted(json.loads(message["MessageAttributes"]["owner"]["Value"])) == ["@bob", "ana@example.com"]


def test_a_backfill_meters_an_earlier_launch_it_cannot_attribute_for_nobody(
    store: LedgerStore, clients: ClientFactory
) -> None:
    # The host may have run earlier as another tenant: EC2 only describes what it is now. What was
    # paid for is still metered, as the host's current type, for tenant unattributed.
    (host,) = launch(clients("ec2", None), "p4d.24xlarge", managed_tags(tenant="vision"))
    launched = launch_time(clients("ec2", None), host)
    earlier = [state_change(host, "running", launched - timedelta(hours=5)),
               state_change(host, "stopped", launched - timedelta(hours=4)),
               state_change(host, "running", launched)]  # fmt: skip
    result = metering.meter([state_change_from_event(event) for event in earlier], store=store, clients=clients,
                         settings=guardrail_settings(), received_at=launched, source="ingest")  # fmt: skip
    assert result.skipped == []
    ((note, reason),) = [(n["event_id"], n["reason"]) for n in result.metered_unattributed]
    assert note == earlier[0]["id"]
    assert reason.startswith("before the host's current launch at ")
    assert reason.endswith("metered as its current type p4d.24xlarge for tenant unattributed")
    spans = [(i.attribution.tenant, i.attribution.pool, i.attribution.accelerators, i.started_ms, i.ended_ms)
             for i in store.intervals()]  # fmt: skip
    assert spans == [
        (
            UNATTRIBUTED,
            UNATTRIBUTED,
            8,
            to_ms(launched - timedelta(hours=5)),
            to_ms(launched - timedelta(hours=4)),
        ),
        ("vision", "training", 8, to_ms(launched), None),
    ]
    # Visible where spend is read: an hour of 8 accelerators, for nobody yet.
    usage = store.usage(now=launched, tenants=[UNATTRIBUTED])
    assert usage[(UNATTRIBUTED, UNATTRIBUTED, "p4d.24xlarge")].accelerator_ms == 8 * 3_600_000


def test_a_backfilled_stop_inside_a_closed_interval_closes_it_at_its_time(
    store: LedgerStore, clients: ClientFactory
) -> None:
    # The ledger is a function of its events: the stop EventBridge lost, backfilled later, is where
    # AWS stopped billing, whenever it arrives.
    (host,) = launch(clients("ec2", None), "g5.xlarge", managed_tags())
    launched = launch_time(clients("ec2", None), host)
    metered([state_change(host, "running", launched), state_change(host, "stopped", launched + timedelta(hours=1))],
            store=store, clients=clients)  # fmt: skip
    inside = state_change(host, "stopping", launched + timedelta(minutes=30))
    result = metering.meter([state_change_from_event(inside)], store=store, clients=clients,
                         settings=guardrail_settings(), received_at=launched + timedelta(hours=2), source="ingest")  # fmt: skip
    assert (result.skipped, result.outcomes) == ([], {inside["id"]: "appended"})
    (interval,) = store.intervals()
    assert (interval.started_ms, interval.ended_ms) == (
        to_ms(launched),
        to_ms(launched + timedelta(minutes=30)),
    )


def test_replaying_the_dead_letter_queue_records_both_kinds_of_dead_letter_and_keeps_the_bad(
    store: LedgerStore, clients: ClientFactory
) -> None:
    sqs = clients("sqs", None)
    queue_url = sqs.create_queue(QueueName=names.dead_letter_queue(STACK, "meter"))["QueueUrl"]
    ec2 = clients("ec2", None)
    (first,) = launch(ec2, "g5.xlarge", managed_tags())
    (second,) = launch(ec2, "g5.xlarge", managed_tags())
    # EventBridge's dead letter: the event itself (at real times: the replay receives them now)
    undelivered = state_change(first, "running", launch_time(ec2, first))
    failed = {"requestContext": {"condition": "RetriesExhausted"},  # Lambda's on-failure record
              "requestPayload": state_change(second, "running", launch_time(ec2, second))}  # fmt: skip
    for body in (json.dumps(undelivered), json.dumps(failed), "not json"):
        sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    result = replaying.replay_dead_letters(clients, queue_region=None, stack=STACK, store=store,
                                       settings=guardrail_settings(), max_messages=100)  # fmt: skip
    assert (result.read, result.deleted, result.meter.inserted) == (3, 2, 2)
    assert [problem["reason"] for problem in result.kept] == ["Expecting value: line 1 column 1 (char 0)"]
    assert {interval.instance_id for interval in store.intervals()} == {first, second}
    again = replaying.replay_dead_letters(clients, queue_region=None, stack=STACK, store=store,
                                      settings=guardrail_settings(), max_messages=100)  # fmt: skip
    assert again.read == 0  # the bad one is invisible for a while, the good ones are gone


def test_replaying_the_dead_letter_queue_appends_relayed_decisions(
    store: LedgerStore, clients: ClientFactory
) -> None:
    sqs = clients("sqs", None)
    queue_url = sqs.create_queue(QueueName=names.dead_letter_queue(STACK, "meter"))["QueueUrl"]
    stop = Decision("stop", "reaper", "past its 1h30m cap (tag)", at(0), "i-0123456789abcdef0", "research")
    relayed = {"id": "e-1", "source": RELAY_SOURCE, "detail-type": RELAY_DETAIL_TYPE,
               "detail": {"origin": "request-1", "decisions": [stop.as_dict()]}}  # fmt: skip
    forged = relayed | {"detail": {"origin": "o", "decisions": [{**stop.as_dict(), "actor": "mallory"}]}}
    for body in (json.dumps(relayed), json.dumps(forged)):
        sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    result = replaying.replay_dead_letters(clients, queue_region=None, stack=STACK, store=store,
                                       settings=guardrail_settings(), max_messages=100)  # fmt: skip
    assert (result.read, result.deleted, result.decisions) == (2, 1, 1)
    assert "decisions by mallory are not relayed" in result.kept[0]["reason"]
    assert [entry.decision for entry in DecisionLedger.of(store).read()] == [stop]


@pytest.mark.parametrize("ahead", [timedelta(minutes=6), timedelta(days=1)])
@pytest.mark.parametrize("source", ["meter", "ingest"])
def test_an_event_from_the_future_is_refused_with_the_reason(
    store: LedgerStore, clients: ClientFactory, source: str, ahead: timedelta
) -> None:
    (host,) = launch(clients("ec2", None), "g5.xlarge", managed_tags())
    launched = launch_time(clients("ec2", None), host)
    running, early = state_change(host, "running", launched), state_change(host, "stopped", launched + ahead)
    changes = [state_change_from_event(event) for event in (running, early)]
    if source == "ingest":
        result = ingest_changes(
            changes, store=store, clients=clients, settings=guardrail_settings(), batch_size=10
        )
    else:
        result = metering.meter(changes, store=store, clients=clients, settings=guardrail_settings(),
                             received_at=datetime.now(UTC))  # fmt: skip
    (refused,) = result.skipped
    assert (refused["event_id"], refused["instance_id"]) == (early["id"], host)
    assert refused["reason"].startswith("from the future: its time ")
    assert "more than 0:05:00 after the ledger received it" in refused["reason"]
    (interval,) = store.intervals()
    assert interval.is_open  # the stop from the future closed nothing


def test_an_event_within_the_clock_skew_is_metered(store: LedgerStore, clients: ClientFactory) -> None:
    (host,) = launch(clients("ec2", None), "g5.xlarge", managed_tags())
    launched = launch_time(clients("ec2", None), host)
    events = [
        state_change(host, "running", launched),
        state_change(host, "stopped", launched + timedelta(minutes=4)),
    ]
    result = metering.meter([state_change_from_event(event) for event in events], store=store, clients=clients,
                         settings=guardrail_settings(), received_at=launched)  # fmt: skip
    assert (result.inserted, result.skipped) == (2, [])


def test_replaying_the_dead_letter_queue_refuses_an_event_from_the_future(
    store: LedgerStore, clients: ClientFactory
) -> None:
    sqs = clients("sqs", None)
    queue_url = sqs.create_queue(QueueName=names.dead_letter_queue(STACK, "meter"))["QueueUrl"]
    (host,) = launch(clients("ec2", None), "g5.xlarge", managed_tags())
    future = state_change(host, "running", datetime.now(UTC) + timedelta(hours=2))
    sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(future))
    result = replaying.replay_dead_letters(clients, queue_region=None, stack=STACK, store=store,
                                       settings=guardrail_settings(), max_messages=10)  # fmt: skip
    # Refused where it is read (the one rule for event times): kept in the queue with the reason.
    assert (result.meter.inserted, result.deleted) == (0, 0)
    (kept,) = result.kept
    assert "time: " in kept["reason"]
    assert "is from the future: more than 0:05:00 after" in kept["reason"]
    assert store.intervals() == []
