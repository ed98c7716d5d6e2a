"""The budget guardrail: thresholds notified once per period, new work denied, hosts stopped at the
limit through the sweep's stop path (moto's server), every action on the ledger."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from guardrail_fleet import (
    REGION,
    client_factory,
    create_pool,
    group_instances,
    group_of,
    guardrail_settings,
    launch,
    managed_tags,
    state_change,
    states,
)
from ledger_streams import T0, at, ms, step, who

from guardrails import tags
from guardrails.launch import AdmissionRequest, PoolState, decide_launch
from guardrails.ledger import state_change_from_event, to_ms
from guardrails.runway import Budget, StopReport
from lambdas import budget
from lambdas.aws.environment import ClientFactory, container_settings
from lambdas.engines import budgeting, launching, metering
from lambdas.ledger.store import LedgerStore, container_store

ANA, BOB, CARL = "ana@example.com", "@bob", "carl@example.com"
P4D = Decimal("32.7726")  # prices.json's p4d.24xlarge, USD per hour
CAP = timedelta(minutes=90)


@dataclass
class CountingEnforcer:
    """An Enforcer that records what it was asked to do (for races and failures, not for AWS)."""

    notices: list[tuple[str, str]] = field(default_factory=list)
    denied: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def notify(self, tenant: str, subject: str, message: str) -> None:
        with self.lock:
            self.notices.append((tenant, subject))

    def deny(self, tenant: str, reason: str) -> None:
        with self.lock:
            self.denied.append(tenant)

    def stop(self, tenant: str, reason: str, *, dry_run: bool) -> StopReport:
        return StopReport()

    def arm_crossing(self, tenant: str, at: datetime | None) -> None:
        raise AssertionError("no budget here has the stop action")


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    return client_factory(aws)


@pytest.fixture
def topic(clients: ClientFactory) -> tuple[str, str]:
    """An SNS topic with an SQS queue subscribed, to read what was published."""
    sns, sqs = clients("sns", None), clients("sqs", None)
    topic_arn = sns.create_topic(Name="parkbrake-test-alerts")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="alerts")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn)
    return topic_arn, queue_url


def published(clients: ClientFactory, queue_url: str) -> list[str]:
    return [message["Subject"] for message in published_messages(clients, queue_url)]


def published_messages(clients: ClientFactory, queue_url: str) -> list[dict[str, Any]]:
    """SNS's envelopes as the subscribed queue received them: Subject, Message, MessageAttributes."""
    messages = clients("sqs", None).receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
    return [json.loads(message["Body"]) for message in messages.get("Messages", [])]


def owned(tenant: str, owner: str | None) -> dict[str, str]:
    return managed_tags(tenant=tenant) | ({tags.OWNER: owner} if owner else {})


def aws_enforcer(clients: ClientFactory, topic_arn: str | None) -> budgeting.AwsEnforcer:
    return budgeting.AwsEnforcer(
        clients=clients, regions=[REGION], topic_arn=topic_arn, spot_action="terminate"
    )


def run_budget(store: LedgerStore, enforcer: Any, now: datetime, **options: Any) -> budgeting.BudgetRun:
    return budgeting.enforce_budgets(store, enforcer, now=now, default_cap=CAP, **options)


def start_p4d(
    store: LedgerStore, instance_id: str, minute: float, cap_minutes: int, tenant: str = "research"
) -> None:
    store.append([step(f"run-{instance_id}", instance_id, "running", ms(minute),
                       who(tenant, "training", "p4d.24xlarge", cap_minutes))], source="meter", received_at=T0)  # fmt: skip


def test_each_threshold_is_notified_once_per_period_and_again_in_the_next(
    store: LedgerStore, clients: ClientFactory, topic: tuple[str, str]
) -> None:
    topic_arn, queue_url = topic
    enforcer = aws_enforcer(clients, topic_arn)
    store.set_budget(Budget("research", Decimal(100), "month"))
    start_p4d(store, "i-1", 0, cap_minutes=90)  # commits 90 min of p4d: $49.16
    assert run_budget(store, enforcer, at(1)).notified == []
    start_p4d(store, "i-2", 5, cap_minutes=30)  # +$16.39: past 50%
    notified = [run_budget(store, enforcer, at(minute)).notified for minute in range(6, 10)]
    assert notified == [[{"tenant": "research", "threshold": "0.5"}], [], [], []]  # not every minute
    start_p4d(store, "i-3", 10, cap_minutes=60)  # +$32.77: past 80% and 90% at once
    assert run_budget(store, enforcer, at(11)).notified == [{"tenant": "research", "threshold": "0.9"}]
    assert run_budget(store, enforcer, at(12)).notified == []
    store.append([step(f"stop-{i}", i, "stopped", ms(40), who(instance_type="p4d.24xlarge"))
                  for i in ("i-1", "i-2", "i-3")], source="meter", received_at=T0)  # fmt: skip

    june = datetime(2036, 6, 2, 9, 0, tzinfo=T0.tzinfo)
    store.append([step("run-i-4", "i-4", "running", to_ms(june),
                       who("research", "training", "p4d.24xlarge", 120))], source="meter", received_at=june)  # fmt: skip
    assert run_budget(store, enforcer, june + timedelta(minutes=1)).notified == [
        {"tenant": "research", "threshold": "0.5"}
    ]
    subjects = published(clients, queue_url)
    assert subjects == ["parkbrake: research at 50% of budget", "parkbrake: research at 90% of budget",
                        "parkbrake: research at 50% of budget"]  # fmt: skip
    notices = [action for action in store.actions(tenant="research") if action["action"] == "notify"]
    assert [str(action["threshold"].normalize()) for action in notices] == ["0.5", "0.8", "0.9", "0.5"]
    assert all("reached" in action["reason"] for action in notices)


def test_a_threshold_notice_names_the_owners_of_the_tenants_running_hosts(
    store: LedgerStore, clients: ClientFactory, topic: tuple[str, str]
) -> None:
    ec2 = clients("ec2", None)
    hosts = [launch(ec2, "p4d.24xlarge", owned(tenant, owner))[0]
             for tenant, owner in (("research", ANA), ("research", BOB), ("research", None), ("product", CARL))]  # fmt: skip
    changes = [state_change_from_event(state_change(host, "running", at(0))) for host in hosts]
    metering.meter(changes, store=store, clients=clients, settings=guardrail_settings(), received_at=T0)
    store.set_budget(Budget("research", Decimal(200), "month"))  # 3 hosts' 90-minute caps: $147.47

    assert run_budget(store, aws_enforcer(clients, topic[0]), at(1)).notified == [
        {"tenant": "research", "threshold": "0.5"}
    ]
    (message,) = published_messages(clients, topic[1])
    attributes = message["MessageAttributes"]
    assert attributes["owner"]["Type"] == "String.Array"
    assert sorted(json.loads(attributes["owner"]["Value"])) == sorted([ANA, BOB])  # not product's CARL
    assert attributes["tenant"] == {"Type": "String", "Value": "research"}
    assert message["Message"].endswith(f"Owners: {ANA}, {BOB}.") or message["Message"].endswith(
        f"Owners: {BOB}, {ANA}."
    )


def test_a_failed_notice_is_not_recorded_and_is_sent_on_the_next_run(
    store: LedgerStore, clients: ClientFactory, topic: tuple[str, str]
) -> None:
    store.set_budget(Budget("research", Decimal(30), "month"))
    start_p4d(store, "i-1", 0, cap_minutes=60)  # $32.77 spent and committed: past the limit
    failed = run_budget(store, aws_enforcer(clients, None), at(1))
    assert [error["action"] for error in failed.errors] == ["notify"]
    assert "PARKBRAKE_SNS_TOPIC_ARN" in failed.errors[0]["error"]
    assert failed.denied == ["research"]  # the other action still happened
    assert [action["action"] for action in store.actions()] == ["deny"]
    retried = run_budget(store, aws_enforcer(clients, topic[0]), at(2))
    assert retried.notified == [{"tenant": "research", "threshold": "1"}]
    assert published(clients, topic[1]) == ["parkbrake: research at 100% of budget"]


def test_two_budget_runs_at_once_notify_once(ledger_url: str) -> None:
    setup = LedgerStore.connect(ledger_url)
    setup.set_budget(Budget("research", Decimal(100), "month"))
    start_p4d(setup, "i-1", 0, cap_minutes=120)
    setup.close()
    enforcer, barrier = CountingEnforcer(), threading.Barrier(4)

    def run() -> None:
        store = LedgerStore.connect(ledger_url)
        barrier.wait()
        run_budget(store, enforcer, at(1))
        store.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert enforcer.notices == [("research", "parkbrake: research at 50% of budget")]


def test_the_gate_reserves_what_it_grants_and_refuses_with_the_numbers(store: LedgerStore) -> None:
    store.set_budget(Budget("research", Decimal(100), "month"))
    store.set_budget(Budget("product", Decimal(10), "month", actions=frozenset({"notify"})))
    start_p4d(store, "i-1", 0, cap_minutes=90)  # $49.16 committed
    gate = budgeting.LedgerBudgetGate(store, default_cap=CAP)
    p4d = AdmissionRequest("research", "p4d.24xlarge", 1, CAP)
    first = gate.admit(p4d, at(1))
    assert (first.granted, first.needed_usd, first.remaining_usd) == (
        True,
        Decimal("49.158900"),
        Decimal("50.841100"),
    )
    assert first.reservation_id is not None
    second = gate.admit(p4d, at(1))
    assert not second.granted
    assert second.reason == (
        "the monthly budget of tenant research is $100.00: $0.55 spent and $48.61 committed to running "
        "hosts' caps, $49.16 reserved for hosts starting leave $1.68, less than the $49.16 needed"
    )
    gate.release(first.reservation_id, at(2))
    assert gate.admit(p4d, at(2)).granted  # released: the money is back
    assert gate.admit(
        AdmissionRequest("product", "p4d.24xlarge", 9, CAP), at(1)
    ).granted  # deny is not its action
    assert gate.admit(AdmissionRequest("nobody", "p4d.24xlarge", 9, CAP), at(1)).granted  # no budget


def test_a_reservation_becomes_the_hosts_commitment_when_it_starts_and_lapses_otherwise(
    store: LedgerStore,
) -> None:
    store.set_budget(Budget("research", Decimal(1000), "month"))
    granted = store.admit(AdmissionRequest("research", "p4d.24xlarge", 2, CAP), now=at(0), default_cap=CAP,
                          lease=timedelta(minutes=30))  # fmt: skip
    (before,) = store.runways(now=at(0), default_cap=CAP)
    assert before.reserved_usd == Decimal("98.317800")
    start_p4d(store, "i-1", 1, cap_minutes=90)  # one of the two hosts starts: it claims its share
    (one,) = store.runways(now=at(1), default_cap=CAP)
    assert one.reserved_usd == Decimal("49.158900")
    assert one.committed_usd + one.spent_usd == Decimal("49.158900")  # counted once, as the running host
    start_p4d(store, "i-1", 1, cap_minutes=90)  # redelivered: still once
    (lapsed,) = store.runways(now=at(31), default_cap=CAP)  # the other never started: the lease ran out
    assert lapsed.reserved_usd == 0
    assert granted.reservation_id is not None


def test_twenty_concurrent_admissions_grant_exactly_what_the_budget_covers(
    ledger_url: str, store: LedgerStore
) -> None:
    covered = 7
    store.set_budget(Budget("research", Decimal("49.1589") * covered + Decimal("0.01"), "month"))
    barrier = threading.Barrier(20)
    results: list[bool] = []
    errors: list[BaseException] = []

    def admit() -> None:
        mine = LedgerStore.connect(ledger_url)
        try:
            barrier.wait()
            admission = mine.admit(AdmissionRequest("research", "p4d.24xlarge", 1, CAP), now=at(0),
                                   default_cap=CAP, lease=timedelta(minutes=30))  # fmt: skip
            results.append(admission.granted)
        except BaseException as error:  # collected: the assertion below names it
            errors.append(error)
        finally:
            mine.close()

    threads = [threading.Thread(target=admit) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert (results.count(True), results.count(False)) == (covered, 20 - covered)
    (status,) = store.runways(now=at(0), default_cap=CAP)
    assert status.reserved_usd == Decimal("49.158900") * covered


def test_the_nightly_launcher_refuses_a_tenant_whose_runway_cannot_cover_the_cap(store: LedgerStore) -> None:
    store.set_budget(Budget("research", Decimal(100), "month"))
    start_p4d(store, "i-1", 0, cap_minutes=90)
    pool = PoolState("training", "parkbrake-test-training", desired=0, max_size=4,
                     instance_type="p4d.24xlarge", tenant="research", cap=CAP)  # fmt: skip
    gate = budgeting.LedgerBudgetGate(store, default_cap=CAP)
    one = decide_launch(pool, parked=False, target=1, usd_per_hour=P4D, gate=gate, now=at(1))
    two = decide_launch(pool, parked=False, target=2, usd_per_hour=P4D, gate=gate, now=at(1))
    assert (one.start, one.refusal) == (1, None)
    assert two.start == 0
    assert two.refusal is not None
    assert two.refusal.kind == "budget"
    assert "less than the $98.32 needed" in two.refusal.reason


def test_at_the_hard_limit_the_tenants_hosts_are_stopped_through_the_stop_path(
    store: LedgerStore, clients: ClientFactory, topic: tuple[str, str]
) -> None:
    ec2, autoscaling = clients("ec2", None), clients("autoscaling", None)
    (alone,) = launch(ec2, "p4d.24xlarge", managed_tags())
    (other_tenant,) = launch(ec2, "p4d.24xlarge", managed_tags(tenant="product"))
    group = create_pool(autoscaling, ec2, pool="training", instance_type="p4d.24xlarge", desired=1)
    (in_group,) = group_instances(autoscaling, group)
    changes = [
        state_change_from_event(state_change(i, "running", at(0))) for i in (alone, other_tenant, in_group)
    ]
    metering.meter(changes, store=store, clients=clients, settings=guardrail_settings(), received_at=T0)
    store.set_budget(Budget("research", Decimal(50), "month", actions=frozenset({"notify", "deny", "stop"})))
    enforcer = aws_enforcer(clients, topic[0])

    assert run_budget(store, enforcer, at(30)).stopped == []  # $32.77 spent: committed only, nothing stopped
    preview = run_budget(store, enforcer, at(50), dry_run=True)  # $54.63 spent
    assert [sorted(w["instance_ids"]) for w in preview.would if w["action"] == "stop"] == [
        sorted([alone, in_group])
    ]
    assert states(ec2, [alone])[alone] == "running"

    run = run_budget(store, enforcer, at(50))
    assert sorted(run.stopped) == sorted([alone, in_group])
    assert states(ec2, [alone, other_tenant]) == {alone: "stopped", other_tenant: "running"}
    assert group_of(autoscaling, group)["DesiredCapacity"] == 0  # no replacement is launched
    (stop_action,) = [action for action in store.actions() if action["action"] == "stop"]
    assert sorted(stop_action["instance_ids"]) == sorted([alone, in_group])
    assert "spent its budget" in stop_action["reason"]
    assert run_budget(store, enforcer, at(51)).stopped == []  # nothing of theirs runs any more
    assert len([action for action in store.actions() if action["action"] == "stop"]) == 1
    (stopped_notice,) = [m for m in published_messages(clients, topic[1]) if "stopped" in m["Subject"]]
    assert stopped_notice["Subject"] == "parkbrake: stopped 2 host(s) of tenant research at its budget"
    assert alone in stopped_notice["Message"]
    assert in_group in stopped_notice["Message"]
    assert other_tenant not in stopped_notice["Message"]
    assert stopped_notice["MessageAttributes"]["tenant"]["Value"] == "research"


def test_at_the_hard_limit_a_stand_alone_spot_host_is_terminated(
    store: LedgerStore, clients: ClientFactory, topic: tuple[str, str]
) -> None:
    """The stop path's one use of TerminateInstances, which the budget's (and the meter's) IAM grants on
    the stack's managed spot hosts only (components/iam_policies.py): a one-time spot request cannot stop."""
    ec2 = clients("ec2", None)
    (spot,) = launch(ec2, "p4d.24xlarge", managed_tags(), spot=True)
    metering.meter([state_change_from_event(state_change(spot, "running", at(0)))], store=store,
                   clients=clients, settings=guardrail_settings(), received_at=T0)  # fmt: skip
    store.set_budget(Budget("research", Decimal(1), "month", actions=frozenset({"notify", "deny", "stop"})))

    run = run_budget(store, aws_enforcer(clients, topic[0]), at(50))

    assert run.stopped == [spot]
    assert states(ec2, [spot])[spot] in {"shutting-down", "terminated"}


def test_a_budget_stop_tells_the_stopped_hosts_owners_and_a_failed_notice_is_an_error(
    store: LedgerStore, clients: ClientFactory, topic: tuple[str, str]
) -> None:
    ec2 = clients("ec2", None)
    (anas,) = launch(ec2, "p4d.24xlarge", owned("research", ANA))
    (carls,) = launch(ec2, "p4d.24xlarge", owned("product", CARL))
    changes = [state_change_from_event(state_change(host, "running", at(0))) for host in (anas, carls)]
    metering.meter(changes, store=store, clients=clients, settings=guardrail_settings(), received_at=T0)
    for tenant in ("research", "product"):
        store.set_budget(Budget(tenant, Decimal(10), "month", actions=frozenset({"stop"})))

    run = run_budget(store, aws_enforcer(clients, topic[0]), at(30), tenants=["research"])
    assert run.stopped == [anas]
    assert run.errors == []
    (message,) = published_messages(clients, topic[1])
    assert message["MessageAttributes"]["owner"] == {"Type": "String", "Value": ANA}
    assert f"{anas} p4d.24xlarge owner={ANA}" in message["Message"]
    assert message["Message"].endswith(f"Owners: {ANA}.")

    without_topic = run_budget(store, aws_enforcer(clients, None), at(30), tenants=["product"])
    assert without_topic.stopped == [carls]  # the stop never waits for the notice
    assert [
        (error["action"], "PARKBRAKE_SNS_TOPIC_ARN" in error["error"]) for error in without_topic.errors
    ] == [("notify", True)]
    (recorded,) = [action for action in store.actions(tenant="product") if action["action"] == "stop"]
    assert recorded["instance_ids"] == [carls]


@pytest.mark.usefixtures("aws")
def test_the_handler_checks_every_tenant_from_the_lambda_environment(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    container_settings.cache_clear()
    container_store.cache_clear()
    setup = LedgerStore.connect(ledger_url)
    setup.set_budget(Budget("research", Decimal(100), "month", actions=frozenset({"deny"})))
    setup.set_budget(Budget("product", Decimal(100), "month"))
    setup.close()
    try:
        result = budget.handler({"dry_run": True}, None)
        assert (result["checked"], result["dry_run"], result["errors"]) == (["product", "research"], True, [])
        assert budget.handler({"tenants": ["product"]}, None)["checked"] == ["product"]
    finally:
        container_store().close()
        container_store.cache_clear()
        container_settings.cache_clear()


def test_the_launcher_gets_a_gate_only_when_a_ledger_is_configured(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PARKBRAKE_DATABASE_URL", raising=False)
    monkeypatch.delenv("PARKBRAKE_DATABASE_SECRET_ARN", raising=False)
    assert budgeting.gate_from_environment(guardrail_settings()) is None
    assert launching.budget_gate() is None
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    container_store.cache_clear()
    try:
        gate = budgeting.gate_from_environment(guardrail_settings())
        assert gate is not None
        assert gate.admit(AdmissionRequest("research", "g5.xlarge", 1, CAP), at(0)).granted
        # The nightly Lambda's own entry point picks the same gate up from its environment.
        monkeypatch.setenv("PARKBRAKE_STACK", "dev")
        monkeypatch.setenv("PARKBRAKE_REGIONS", "us-east-1")
        container_settings.cache_clear()
        assert isinstance(launching.budget_gate(), budgeting.LedgerBudgetGate)
    finally:
        container_store().close()
        container_store.cache_clear()
        container_settings.cache_clear()
