"""The reconciler: the ledger made to agree with EC2 after events were lost, against moto and a real
PostgreSQL; and its rules on a virtual clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from guardrail_fleet import (
    client_factory,
    guardrail_settings,
    launch,
    launch_time,
    managed_tags,
    state_change,
)
from ledger_streams import ms, who

from guardrails import tags
from guardrails.ledger import (
    SPOT,
    Ec2Host,
    Interval,
    PriceKey,
    reconcile,
    state_change_from_event,
    to_ms,
    transition_ms,
)
from lambdas.aws.environment import ClientFactory
from lambdas.engines import metering, reconciling
from lambdas.ledger.connections import LedgerUnavailable
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore


def test_the_rules_on_a_virtual_clock() -> None:
    known = who()
    latest = {
        "i-open-stopped": Interval("r1", "i-open-stopped", known, ms(0), None),
        "i-open-running": Interval("r2", "i-open-running", known, ms(0), None),
        "i-closed-restarted": Interval("r3", "i-closed-restarted", known, ms(0), ms(10), "s3"),
        "i-gone": Interval("r4", "i-gone", known, ms(0), None),
        "i-retagged": Interval("r5", "i-retagged", known, ms(0), None),
        "i-same-tags": Interval("r6", "i-same-tags", known, ms(0), None),
    }
    hosts = [
        Ec2Host("i-open-stopped", "us-east-1", "stopped", ms(0), ms(30)),
        Ec2Host("i-open-running", "us-east-1", "running", ms(0), None),
        Ec2Host("i-closed-restarted", "us-east-1", "running", ms(20), None),
        Ec2Host("i-unseen-whole", "us-east-1", "terminated", ms(40), ms(50)),
        Ec2Host("i-unseen-running", "us-east-1", "running", ms(45), None),
        Ec2Host("i-retagged", "us-east-1", "running", ms(0), None, who(pool="inference")),
        Ec2Host("i-same-tags", "us-east-1", "running", ms(0), None, known),
    ]
    repairs = reconcile(hosts, latest, now_ms=ms(60), home_region="us-east-1")
    assert [(change.instance_id, change.state, change.at_ms) for change in repairs] == [
        ("i-open-stopped", "stopped", ms(30)),
        ("i-closed-restarted", "running", ms(20)),
        ("i-unseen-whole", "running", ms(40)),
        ("i-unseen-whole", "stopped", ms(50)),
        ("i-unseen-running", "running", ms(45)),
        ("i-retagged", "running", ms(60)),
        ("i-gone", "terminated", ms(60)),
    ]
    assert all(change.event_id.startswith("reconciler:") for change in repairs)


def test_ec2_transition_reasons_give_their_time() -> None:
    assert transition_ms("User initiated (2036-05-05 10:00:00 GMT)") == ms(0)
    assert transition_ms("Server.SpotInstanceTermination") is None


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    return client_factory(aws)


def meter_events(events: list[dict[str, Any]], store: LedgerStore, clients: ClientFactory) -> None:
    changes = [state_change_from_event(event) for event in events]
    metering.meter(
        changes, store=store, clients=clients, settings=guardrail_settings(), received_at=datetime.now(UTC)
    )


def ended(ec2: Any, instance_id: str) -> int:
    description = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    found = transition_ms(description["StateTransitionReason"])
    assert found is not None
    return found


def test_after_an_hour_without_the_database_the_ledger_equals_the_exact_answer(
    store: LedgerStore, clients: ClientFactory
) -> None:
    ec2 = clients("ec2", None)
    (a,) = launch(ec2, "g5.xlarge", managed_tags(tenant="research"))
    (b,) = launch(ec2, "p4d.24xlarge", managed_tags(tenant="vision"))
    meter_events([state_change(a, "running", launch_time(ec2, a)), state_change(b, "running", launch_time(ec2, b))],
                 store, clients)  # fmt: skip
    # PostgreSQL goes away: every event of the next hour fails and, nobody replaying it, is lost.
    down = LedgerStore.connect("postgresql://parkbrake@127.0.0.1:9/ledger")
    ec2.stop_instances(InstanceIds=[a])
    (c,) = launch(ec2, "p5e.48xlarge", managed_tags(tenant="product"))  # not in the price table
    (d,) = launch(ec2, "g5.xlarge", managed_tags(tenant="product"))
    ec2.terminate_instances(InstanceIds=[d])
    ec2.terminate_instances(InstanceIds=[b])
    lost = [state_change(a, "stopped", datetime.now(UTC)), state_change(c, "running", launch_time(ec2, c))]
    with pytest.raises(LedgerUnavailable):
        meter_events(lost, down, clients)
    # It returns an hour later (virtual time); the reconciler runs.
    back = datetime.now(UTC) + timedelta(hours=1)
    outcome = reconciling.run_reconciler(
        store=store, clients=clients, settings=guardrail_settings(), now=back
    )
    assert outcome["inserted"] == 5
    truth = {
        a: (to_ms(launch_time(ec2, a)), ended(ec2, a)),
        b: (to_ms(launch_time(ec2, b)), ended(ec2, b)),
        c: (to_ms(launch_time(ec2, c)), None),
        d: (to_ms(launch_time(ec2, d)), ended(ec2, d)),
    }
    assert {i.instance_id: (i.started_ms, i.ended_ms) for i in store.intervals()} == truth
    again = reconciling.run_reconciler(store=store, clients=clients, settings=guardrail_settings(), now=back)
    assert (again["inserted"], again["repairs"]) == (0, [])  # nothing left to repair


def test_a_host_retagged_while_running_gets_a_new_interval_from_the_reconcilers_run(
    store: LedgerStore, clients: ClientFactory
) -> None:
    ec2 = clients("ec2", None)
    (host,) = launch(ec2, "g5.xlarge", managed_tags(pool="training"))
    started = launch_time(ec2, host)
    meter_events([state_change(host, "running", started)], store, clients)
    ec2.create_tags(Resources=[host], Tags=[{"Key": tags.POOL, "Value": "inference"}])
    later = datetime.now(UTC) + timedelta(minutes=15)
    outcome = reconciling.run_reconciler(
        store=store, clients=clients, settings=guardrail_settings(), now=later
    )
    assert outcome["repairs"] == [f"reconciler:{host}:running:{to_ms(later)}"]
    spans = [(i.attribution.pool, i.started_ms, i.ended_ms) for i in store.intervals()]
    assert spans == [("training", to_ms(started), to_ms(later)), ("inference", to_ms(later), None)]
    again = reconciling.run_reconciler(
        store=store, clients=clients, settings=guardrail_settings(), now=later + timedelta(minutes=15)
    )
    assert again["repairs"] == []


def test_each_run_prunes_the_decision_log_past_the_retention(
    store: LedgerStore, clients: ClientFactory
) -> None:
    old = datetime.now(UTC) - timedelta(days=420)
    with store.connections.connection() as owner, owner.transaction():
        owner.execute(
            "INSERT INTO decisions (decision_key, at, kind, actor, reason, recorded_at) "
            "VALUES ('old', %s, 'stop', 'reaper', 'past its cap', %s), "
            "('recent', now(), 'stop', 'reaper', 'past its cap', now())",
            (old, old),
        )
    settings = guardrail_settings(decision_retention=timedelta(days=400))
    outcome = reconciling.run_reconciler(
        store=store, clients=clients, settings=settings, now=datetime.now(UTC)
    )
    assert outcome["pruned_decisions"] == 1
    assert [logged.key for logged in DecisionLedger.of(store).read()] == ["recent"]
    longer = guardrail_settings(decision_retention=timedelta(days=3000))
    assert (
        reconciling.run_reconciler(store=store, clients=clients, settings=longer, now=datetime.now(UTC))[
            "pruned_decisions"
        ]
        == 0
    )


def test_the_reconciler_records_the_spot_price_of_each_spot_hosts_zone_once(
    store: LedgerStore, clients: ClientFactory
) -> None:
    ec2 = clients("ec2", None)
    (spot_host,) = launch(ec2, "g5.xlarge", managed_tags(tenant="vision"), spot=True)
    launch(ec2, "g5.xlarge", managed_tags(tenant="vision"))  # on demand: no spot price asked for
    started = launch_time(ec2, spot_host)
    meter_events([state_change(spot_host, "running", started)], store, clients)
    (interval,) = store.intervals(tenant="vision")
    key = PriceKey.of(interval.attribution)
    assert key.pricing_model == SPOT
    now = datetime.now(UTC)
    outcome = reconciling.run_reconciler(store=store, clients=clients, settings=guardrail_settings(), now=now)
    assert outcome["spot_prices"] == 1
    _, latest = store.latest_spot_prices([key])
    # moto answers one record per type and zone, dated 2006: the price in effect since the window's start.
    assert latest[key].usd_per_hour == Decimal("0.00001")
    window_start = to_ms(now - timedelta(hours=23))
    assert window_start - 60_000 <= latest[key].from_ms <= window_start + 60_000
    assert store.prices_at([key], now) == {key: Decimal("0.00001")}
    again = reconciling.run_reconciler(store=store, clients=clients, settings=guardrail_settings(), now=now)
    assert again["spot_prices"] == 0  # no change since: nothing recorded
    (line,) = [
        line
        for line in store.invoice_lines(
            now=now, since=started - timedelta(hours=1), until=now + timedelta(hours=1)
        )
        if line.pricing_model == SPOT
    ]
    assert (line.price_basis, line.price_source) == ("spot", "EC2 DescribeSpotPriceHistory")


def test_a_repair_from_the_future_is_refused_when_the_reconcilers_clock_is_behind_ec2s(
    store: LedgerStore, clients: ClientFactory
) -> None:
    ec2 = clients("ec2", None)
    (host,) = launch(ec2, "g5.xlarge", managed_tags())
    behind = datetime.now(UTC) - timedelta(days=1)  # a clock a day slow: EC2's launch is in its future
    outcome = reconciling.run_reconciler(
        store=store, clients=clients, settings=guardrail_settings(), now=behind
    )
    assert outcome["inserted"] == 0
    (refused,) = outcome["skipped"]
    assert refused["instance_id"] == host
    assert refused["reason"].startswith("from the future")
    assert store.intervals() == []
    on_time = reconciling.run_reconciler(store=store, clients=clients, settings=guardrail_settings(),
                                        now=datetime.now(UTC))  # fmt: skip
    assert on_time["inserted"] == 1
