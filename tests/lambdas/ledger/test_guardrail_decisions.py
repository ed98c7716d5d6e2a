"""The guardrails' decisions reach the decision log: a real sweep against moto, a real ledger; a
retried invocation logs nothing twice; a ledger that is down never holds a stop back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from guardrail_fleet import (
    REGION,
    STACK,
    client_factory,
    create_deadline_group,
    create_pool,
    emitted_metrics,
    guardrail_settings,
    heartbeats,
    latest_launch,
    launch,
    launch_time,
    managed_tags,
    minutes,
    published,
    sns_queue,
    state_change,
    states,
)

from cli.reap import run_reap
from components.guardrail_functions import RELAY_PATTERN
from guardrails import names, tags
from guardrails.decisions import RELAY_DETAIL_TYPE, RELAY_SOURCE, Decision
from lambdas import deadline, launcher, meter, reaper
from lambdas.aws.decision_log import RECORD_ERROR, DecisionLog, EventBusRelay
from lambdas.aws.environment import ClientFactory, container_settings
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore, container_store


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    return client_factory(aws)


def sink(store: LedgerStore, origin: str = "request-1", guardrail: str = "reaper") -> DecisionLog:
    return DecisionLog(guardrail=guardrail, origin=origin, ledger=lambda: DecisionLedger.of(store))


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


def test_the_deadline_logs_what_it_armed_once_per_event(clients: ClientFactory, store: LedgerStore) -> None:
    create_deadline_group(clients)
    ec2 = clients("ec2", REGION)
    host = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m", tenant="vision"))[0]
    started = launch_time(ec2, host)
    event = state_change(host, "running", started)

    def deliver(at_minute: float) -> None:
        origin = event["id"]  # EventBridge redelivers an event with its id
        deadline.handle(
            event, settings=guardrail_settings(), clients=clients, now=started + minutes(at_minute),
            decisions=sink(store, origin, "deadline"),
        )  # fmt: skip

    deliver(1)
    deliver(2)

    (armed,) = [entry.decision for entry in DecisionLedger.of(store).read(instance_id=host)]
    assert (armed.kind, armed.actor, armed.tenant) == ("deadline-armed", "deadline", "vision")
    assert "cap 1h30m, tag" in armed.reason


def test_a_host_already_due_is_stopped_by_the_deadline_and_logged(
    clients: ClientFactory, store: LedgerStore
) -> None:
    create_deadline_group(clients)
    ec2 = clients("ec2", REGION)
    host = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))[0]
    started = launch_time(ec2, host)

    deadline.handle(
        state_change(host, "running", started), settings=guardrail_settings(), clients=clients,
        now=started + minutes(95), decisions=sink(store, "event-1", "deadline"),
    )  # fmt: skip

    logged = {
        entry.decision.kind: entry.decision for entry in DecisionLedger.of(store).read(instance_id=host)
    }
    assert set(logged) == {"stop", "deadline-judged"}
    assert logged["stop"].actor == "deadline"
    assert "past its 1h30m cap" in logged["stop"].reason


def test_the_launcher_logs_its_start_and_its_refusal(clients: ClientFactory, store: LedgerStore) -> None:
    create_pool(
        clients("autoscaling", REGION), clients("ec2", REGION), pool="training", instance_type="g5.12xlarge",
        desired=0, max_size=2, group_tags=managed_tags(max_runtime="2h"),
    )  # fmt: skip
    ssm = clients("ssm", REGION)
    parameter = names.park_parameter(STACK)
    ssm.put_parameter(Name=parameter, Value="true", Type="String")
    now = datetime(2025, 3, 1, 1, 0, tzinfo=UTC)

    def start(origin: str) -> None:
        launcher.handle(
            {"pool": "training"}, settings=guardrail_settings(), clients=clients, gate=None, now=now,
            decisions=sink(store, origin, "launcher"),
        )  # fmt: skip

    start("night-1")
    ssm.put_parameter(Name=parameter, Value="false", Type="String", Overwrite=True)
    start("night-2")

    refused, started = [entry.decision for entry in DecisionLedger.of(store).read()]
    assert (refused.kind, refused.actor) == ("launch-refuse", "launcher")
    assert refused.details["refusal"] == "parked"
    assert "parked" in refused.reason
    assert started.kind == "launch-start"
    assert started.reason == (
        "raised pool training's desired capacity to 2 (+2, budget not checked); "
        "got 2 x g5.12xlarge in us-east-1a in service, 0 pending"
    )


@pytest.fixture
def meter_environment(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The environment the Guardrails component gives the meter, read once per (test) container."""
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    monkeypatch.setenv("PARKBRAKE_STACK", STACK)
    container_settings.cache_clear()
    container_store.cache_clear()
    yield
    if container_store.cache_info().currsize:
        container_store().close()
    container_settings.cache_clear()
    container_store.cache_clear()


BUS = names.decision_bus(STACK)


def relayed_events(clients: ClientFactory) -> str:
    """The bus and the rule the Guardrails component declares for the relayed decisions, delivering to
    a queue here."""
    events, sqs = clients("events", REGION), clients("sqs", REGION)
    queue_url = sqs.create_queue(QueueName="meter")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.create_event_bus(Name=BUS)
    events.put_rule(Name="decisions", EventBusName=BUS, EventPattern=RELAY_PATTERN)
    events.put_targets(Rule="decisions", EventBusName=BUS, Targets=[{"Id": "meter", "Arn": queue_arn}])
    return queue_url


def delivered(clients: ClientFactory, queue_url: str) -> list[dict[str, object]]:
    messages = clients("sqs", REGION).receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
    return [json.loads(message["Body"]) for message in messages.get("Messages", [])]


@pytest.mark.usefixtures("meter_environment")
def test_the_reaper_relays_its_decisions_to_the_meter_over_eventbridge(
    clients: ClientFactory, store: LedgerStore
) -> None:
    queue_url = relayed_events(clients)
    ec2 = clients("ec2", REGION)
    due = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))[0]
    under = launch(ec2, "g5.xlarge", managed_tags(max_runtime="4h"))[0]
    now = latest_launch(ec2, [due, under]) + minutes(100)
    relay = DecisionLog(
        guardrail="reaper",
        origin="request-1",
        ledger=lambda: EventBusRelay(clients("events", REGION), BUS),
    )

    result = reaper.handle({}, settings=guardrail_settings(), clients=clients, now=now, decisions=relay)

    assert result["errors"] == []
    (event,) = delivered(clients, queue_url)
    assert meter.handler(event, None) == {
        "decisions": {"request-1:verdict:" + due: "appended", "request-1:verdict:" + under: "appended"}
    }
    assert set(meter.handler(event, None)["decisions"].values()) == {"duplicate"}  # delivered twice
    logged = {entry.decision.instance_id: entry.decision for entry in DecisionLedger.of(store).read()}
    assert (logged[due].kind, logged[under].kind) == ("stop", "skip")
    assert "past its 1h30m cap" in logged[due].reason


def test_a_forged_event_on_the_default_bus_never_reaches_the_meter(clients: ClientFactory) -> None:
    """The rule matches the stack's decision bus only, which its policy keeps to the writers' roles
    (tests/components/test_decision_bus.py evaluates that policy); the default bus is anybody's."""
    queue_url = relayed_events(clients)
    forged = Decision("stop", "reaper", "forged", datetime.now(UTC), "i-0123456789abcdef0")
    entry = {"Source": RELAY_SOURCE, "DetailType": RELAY_DETAIL_TYPE,
             "Detail": json.dumps({"origin": "o", "decisions": [forged.as_dict()]}, default=str)}  # fmt: skip
    clients("events", REGION).put_events(Entries=[entry | {"EventBusName": "default"}])
    assert delivered(clients, queue_url) == []
    clients("events", REGION).put_events(Entries=[entry | {"EventBusName": BUS}])
    assert len(delivered(clients, queue_url)) == 1


class LambdaContext:
    invoked_function_arn = (
        f"arn:aws:lambda:{REGION}:123456789012:function:{names.function_name(STACK, 'meter')}"
    )


@pytest.mark.usefixtures("meter_environment")
def test_the_meter_refuses_and_alerts_relayed_decisions_it_must_not_take(
    clients: ClientFactory,
    store: LedgerStore,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic, queue_url = sns_queue(clients)
    monkeypatch.setenv("PARKBRAKE_SNS_TOPIC_ARN", topic)
    container_settings.cache_clear()
    forged = Decision("extend", "arn:aws:iam::123456789012:user/mallory", "for free", datetime.now(UTC))
    honest = Decision("stop", "reaper", "past its cap", datetime.now(UTC), "i-0123456789abcdef0")
    event = {
        "id": "e-1",
        "account": "123456789012",
        "source": RELAY_SOURCE,
        "detail-type": RELAY_DETAIL_TYPE,
        "detail": {"origin": "o", "decisions": [forged.as_dict()]},
    }
    refusals = {
        "decisions by arn:aws:iam::123456789012:user/mallory are not relayed": event,
        "reason: must be a non-empty string": event
        | {"detail": {"origin": "o", "decisions": [{"kind": "stop", "actor": "reaper", "at": "yesterday"}]}},
        "from account '210987654321', not this stack's 123456789012": event
        | {"account": "210987654321", "detail": {"origin": "o", "decisions": [honest.as_dict()]}},
    }
    capsys.readouterr()
    for reason, sent in refusals.items():
        answer = meter.handler(sent, LambdaContext())  # refused, not raised: a forgery is not retried
        assert reason in answer["refused"]
    assert DecisionLedger.of(store).read() == []
    messages = published(clients, queue_url)
    assert len(messages) == 3
    assert {message["Subject"] for message in messages} == {"parkbrake: forged guardrail decisions refused"}
    counted = [m for m in emitted_metrics(capsys.readouterr().out) if m["name"] == "GuardrailActions"]
    assert [m["dimensions"] for m in counted] == [
        {"Guardrail": "meter", "Action": "refuse", "Reason": "forged-decisions"}
    ] * 3
    # The writer's own event from this account is still taken.
    assert meter.handler(
        event | {"detail": {"origin": "o", "decisions": [honest.as_dict()]}}, LambdaContext()
    ) == {"decisions": {honest.key("o"): "appended"}}


def test_an_event_bus_that_refuses_is_reported_and_the_stop_still_happens(clients: ClientFactory) -> None:
    ec2 = clients("ec2", REGION)
    due = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))[0]
    now = latest_launch(ec2, [due]) + minutes(100)
    relay = DecisionLog(
        guardrail="reaper", origin="r", ledger=lambda: EventBusRelay(clients("events", REGION), "no-such-bus")
    )

    result = reaper.handle({}, settings=guardrail_settings(), clients=clients, now=now, decisions=relay)

    assert states(ec2, [due])[due] == "stopped"
    (error,) = result["errors"]
    assert error["action"] == RECORD_ERROR
    assert "no-such-bus" in error["error"]


def test_a_sweep_run_by_a_person_is_logged_with_their_arn(
    clients: ClientFactory, store: LedgerStore, ledger_url: str
) -> None:
    ec2 = clients("ec2", REGION)
    due = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))[0]
    now = latest_launch(ec2, [due]) + minutes(100)
    environ = {"PARKBRAKE_STACK": STACK, "PARKBRAKE_REGIONS": REGION, "PARKBRAKE_DATABASE_URL": ledger_url}

    report = run_reap(
        environ=environ, clients=clients, now=now, dry_run=False, assume_yes=True, output="json"
    )

    assert report.errors == []
    (stopped,) = [entry.decision for entry in DecisionLedger.of(store).read(instance_id=due)]
    assert stopped.kind == "stop"
    assert stopped.actor == clients("sts", None).get_caller_identity()["Arn"]  # moto's caller
    assert stopped.actor.startswith("arn:aws:")
