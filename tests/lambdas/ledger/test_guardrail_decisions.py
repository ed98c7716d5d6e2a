"""The guardrails' decisions reach the decision log: a real sweep against moto, a real ledger; a
retried invocation logs nothing twice; a ledger that is down never holds a stop back."""

from __future__ import annotations

import pytest
from guardrail_fleet import (
    REGION,
    client_factory,
    guardrail_settings,
    heartbeats,
    latest_launch,
    launch,
    managed_tags,
    minutes,
    sns_queue,
    states,
)

from guardrails import tags
from lambdas import reaper
from lambdas.aws.decision_log import RECORD_ERROR, DecisionLog
from lambdas.aws.environment import ClientFactory
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    return client_factory(aws)


def sink(store: LedgerStore, origin: str = "request-1") -> DecisionLog:
    return DecisionLog(guardrail="reaper", origin=origin, ledger=lambda: DecisionLedger.of(store))


def test_a_sweep_logs_the_stop_and_the_skip_with_their_reasons(
    clients: ClientFactory, store: LedgerStore
) -> None:
    ec2 = clients("ec2", REGION)
    due = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m", tenant="research"))[0]
    under = launch(ec2, "g5.xlarge", managed_tags(max_runtime="4h", tenant="vision"))[0]
    topic, _ = sns_queue(clients)
    now = latest_launch(ec2, [due, under]) + minutes(100)

    reaper.handle(
        {}, settings=guardrail_settings(sns_topic_arn=topic), clients=clients, now=now, decisions=sink(store)
    )

    log = DecisionLedger.of(store)
    (stopped,) = [entry.decision for entry in log.read(instance_id=due)]
    assert (stopped.kind, stopped.actor, stopped.tenant) == ("stop", "reaper", "research")
    assert "past its 1h30m cap" in stopped.reason
    assert stopped.details["action"] == "stop"
    assert stopped.details["rule"] == "past-deadline"
    (skipped,) = [entry.decision for entry in log.read(instance_id=under)]
    assert (skipped.kind, skipped.tenant) == ("skip", "vision")
    assert "within its 4h cap (tag)" in skipped.reason
    (notified,) = [entry.decision for entry in log.read(kinds=["notify"])]
    assert notified.details["hosts"] == [due]
    assert states(ec2, [due])[due] == "stopped"


def test_exemptions_clamps_and_unmanaged_hosts_are_logged(clients: ClientFactory, store: LedgerStore) -> None:
    ec2 = clients("ec2", REGION)
    started = latest_launch(ec2, [launch(ec2, "g5.xlarge", managed_tags())[0]])
    now = started + minutes(100)
    until = (now + minutes(60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    too_far = (now + minutes(60 * 48)).strftime("%Y-%m-%dT%H:%M:%SZ")
    exempt = launch(ec2, "g5.xlarge", managed_tags(**{tags.EXEMPT_UNTIL: until}))[0]
    refused = launch(ec2, "g5.xlarge", managed_tags(**{tags.EXEMPT_UNTIL: too_far}))[0]
    clamped = launch(ec2, "g5.xlarge", managed_tags(max_runtime="30d"))[0]
    unmanaged = launch(ec2, "p3.2xlarge", {"Name": "someones-notebook"})[0]
    now = latest_launch(ec2, [exempt, refused, clamped, unmanaged]) + minutes(95)

    reaper.handle({}, settings=guardrail_settings(), clients=clients, now=now, decisions=sink(store))

    def kinds(instance_id: str) -> dict[str, str]:
        return {
            entry.decision.kind: entry.decision.reason
            for entry in DecisionLedger.of(store).read(instance_id=instance_id)
        }

    assert set(kinds(exempt)) == {"exemption-honoured", "skip"}
    assert kinds(exempt)["exemption-honoured"].startswith(f"exempt until {until}")
    assert set(kinds(refused)) == {"exemption-refused", "stop"}
    assert "beyond the policy's limit" in kinds(refused)["exemption-refused"]
    assert set(kinds(clamped)) == {"clamp", "skip"}
    assert set(kinds(unmanaged)) == {"finding", "skip"}
    assert "untagged accelerator host" in kinds(unmanaged)["finding"]


def test_adopting_an_unmanaged_host_to_stop_it_is_logged(clients: ClientFactory, store: LedgerStore) -> None:
    ec2 = clients("ec2", REGION)
    notebook = launch(ec2, "p3.2xlarge", {"Name": "someones-notebook"})[0]
    now = latest_launch(ec2, [notebook]) + minutes(60 * 30)

    reaper.handle(
        {}, settings=guardrail_settings(reap_untagged=True), clients=clients, now=now, decisions=sink(store)
    )

    logged = [entry.decision.kind for entry in DecisionLedger.of(store).read(instance_id=notebook)]
    assert logged == ["adopt", "stop"]


def test_a_retried_invocation_logs_nothing_twice(clients: ClientFactory, store: LedgerStore) -> None:
    ec2 = clients("ec2", REGION)
    due = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))[0]
    under = launch(ec2, "g5.xlarge", managed_tags(max_runtime="4h"))[0]
    now = latest_launch(ec2, [due, under]) + minutes(100)
    settings = guardrail_settings()

    reaper.handle({}, settings=settings, clients=clients, now=now, decisions=sink(store, "request-1"))
    first = DecisionLedger.of(store).read()
    # Lambda retries an invocation with its request id; the retry judges the fleet a minute later.
    reaper.handle(
        {}, settings=settings, clients=clients, now=now + minutes(1), decisions=sink(store, "request-1")
    )

    assert DecisionLedger.of(store).read() == first
    assert sorted(entry.decision.kind for entry in first) == ["skip", "stop"]
    # The next scheduled sweep is a decision of its own.
    reaper.handle(
        {}, settings=settings, clients=clients, now=now + minutes(5), decisions=sink(store, "request-2")
    )
    assert [entry.decision.kind for entry in DecisionLedger.of(store).read(instance_id=under)] == [
        "skip",
        "skip",
    ]


def test_a_ledger_that_is_down_never_holds_a_stop_back(clients: ClientFactory) -> None:
    ec2 = clients("ec2", REGION)
    due = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))[0]
    now = latest_launch(ec2, [due]) + minutes(100)
    down = LedgerStore.connect("postgresql://parkbrake@127.0.0.1:1/ledger?connect_timeout=1")

    result = reaper.handle({}, settings=guardrail_settings(), clients=clients, now=now, decisions=sink(down))

    assert result["stopped"] == [due]
    assert states(ec2, [due])[due] == "stopped"
    (error,) = result["errors"]
    assert error["action"] == RECORD_ERROR
    assert "cannot use the ledger database" in error["error"]
    assert heartbeats(clients) == []  # no heartbeat: the alarm pages
