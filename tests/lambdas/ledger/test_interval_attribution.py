"""Where and how a host is bought is captured when its interval opens (region, pricing model, a spot
host's zone), and a running of another attribution opens a new interval: through the meter against
moto's server, and through the ledger directly."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from guardrail_fleet import client_factory, guardrail_settings, launch, managed_tags, state_change
from ledger_streams import T0, at, ms, step, who

from guardrails import tags
from guardrails.ledger import ON_DEMAND, SPOT, state_change_from_event
from lambdas.engines import metering
from lambdas.ledger.store import LedgerStore

DAY = timedelta(days=1)  # the meter receives the virtual clock's events a day later: all in its past


def test_the_meter_records_a_hosts_region_pricing_model_and_spot_zone(store: LedgerStore, aws: str) -> None:
    clients = client_factory(aws)
    ec2 = clients("ec2", "eu-west-1")
    (spot_host,) = launch(ec2, "g5.xlarge", managed_tags(tenant="vision"), spot=True)
    (on_demand_host,) = launch(ec2, "g5.xlarge", managed_tags(tenant="vision"))
    zone = ec2.describe_instances(InstanceIds=[spot_host])["Reservations"][0]["Instances"][0]["Placement"][
        "AvailabilityZone"
    ]
    events = [
        state_change(host, "running", at(0), region="eu-west-1") for host in (spot_host, on_demand_host)
    ]
    metering.meter(
        [state_change_from_event(event) for event in events],
        store=store,
        clients=clients,
        settings=guardrail_settings(),
        received_at=T0 + DAY,
    )
    bought = {i.instance_id: i.attribution for i in store.intervals()}
    assert (bought[spot_host].region, bought[spot_host].pricing_model, bought[spot_host].zone) == (
        "eu-west-1",
        SPOT,
        zone,
    )
    assert zone.startswith("eu-west-1")
    assert (
        bought[on_demand_host].region,
        bought[on_demand_host].pricing_model,
        bought[on_demand_host].zone,
    ) == (
        "eu-west-1",
        ON_DEMAND,
        None,
    )


def test_a_retag_seen_while_running_opens_a_new_interval(store: LedgerStore, aws: str) -> None:
    clients = client_factory(aws)
    ec2 = clients("ec2", None)
    (host,) = launch(ec2, "g5.xlarge", managed_tags(pool="training"))

    def metered(state: str, minutes: int) -> None:
        change = state_change_from_event(state_change(host, state, at(minutes)))
        metering.meter(
            [change], store=store, clients=clients, settings=guardrail_settings(), received_at=T0 + DAY
        )

    metered("running", 0)
    ec2.create_tags(Resources=[host], Tags=[{"Key": tags.POOL, "Value": "inference"}])
    metered("running", 10)  # a running metered after the retag (redelivered, say) carries the new tags
    metered("stopped", 30)
    spans = [(i.attribution.pool, i.started_ms, i.ended_ms) for i in store.intervals()]
    assert spans == [("training", ms(0), ms(10)), ("inference", ms(10), ms(30))]
    usage = store.usage(now=at(60))
    assert usage[("research", "training", "g5.xlarge")].accelerator_ms == 10 * 60_000
    assert usage[("research", "inference", "g5.xlarge")].accelerator_ms == 20 * 60_000


def test_a_change_of_pricing_model_or_zone_opens_a_new_interval_and_the_same_attribution_does_not(
    store: LedgerStore,
) -> None:
    spot = who(pricing_model=SPOT, zone="us-east-1a")
    store.append(
        [
            step("r0", "i-1", "running", ms(0)),
            step("r1", "i-1", "running", ms(5)),  # the same attribution again: one interval goes on
            step("r2", "i-1", "running", ms(10), spot),
            step("r3", "i-1", "running", ms(20), replace(spot, zone="us-east-1b")),
            step("s0", "i-1", "stopped", ms(30)),
        ],
        source="meter",
        received_at=T0,
    )
    spans = [
        (i.attribution.pricing_model, i.attribution.zone, i.started_ms, i.ended_ms) for i in store.intervals()
    ]
    assert spans == [
        (ON_DEMAND, None, ms(0), ms(10)),
        (SPOT, "us-east-1a", ms(10), ms(20)),
        (SPOT, "us-east-1b", ms(20), ms(30)),
    ]


def test_a_late_retag_is_placed_by_its_time_from_a_backfill_as_from_the_meter(
    store: LedgerStore,
) -> None:
    store.append(
        [step("r0", "i-1", "running", ms(0)), step("s0", "i-1", "stopped", ms(30))],
        source="meter",
        received_at=T0,
    )
    # A backfilled running inside the closed interval splits it at its time, as if it had come first.
    late = step("r1", "i-1", "running", ms(10), who(pool="inference"))
    outcome = store.append([late], source="ingest", received_at=T0)
    assert outcome.outcomes == {"r1": "appended"}
    store.append([step("r2", "i-1", "running", ms(40)), step("s2", "i-1", "stopped", ms(60))], source="meter",
                 received_at=T0)  # fmt: skip
    # The meter's late running is placed by its time too: the host's history is derived again from
    # before it, and the later interval read from its own running.
    store.append([replace(late, event_id="r3", at_ms=ms(45))], source="meter", received_at=T0)
    spans = [(i.attribution.pool, i.started_ms, i.ended_ms) for i in store.intervals()]
    assert spans == [("training", ms(0), ms(10)), ("inference", ms(10), ms(30)), ("training", ms(40), ms(45)),
                     ("inference", ms(45), ms(60))]  # fmt: skip
    # Derived again from the interval that a running closed: that running still opens the next one.
    store.append([replace(late, event_id="r4", at_ms=ms(50))], source="meter", received_at=T0)
    assert [(i.attribution.pool, i.started_ms, i.ended_ms) for i in store.intervals()] == spans


def test_the_invoice_has_a_line_per_region_and_pricing_model(store: LedgerStore) -> None:
    store.append(
        [
            step("r0", "i-1", "running", ms(0)),
            step("r1", "i-1", "running", ms(10), who(pricing_model=SPOT, zone="us-east-1a")),
            step("s1", "i-1", "stopped", ms(30)),
            step("r2", "i-2", "running", ms(0), who(region="eu-west-1")),
            step("s2", "i-2", "stopped", ms(60)),
        ],
        source="meter",
        received_at=T0,
    )
    lines = store.invoice_lines(now=at(90), since=at(0), until=at(90))
    assert [(line.region, line.pricing_model, line.billed_ms) for line in lines] == [
        ("eu-west-1", ON_DEMAND, 60 * 60_000),
        ("us-east-1", ON_DEMAND, 10 * 60_000),
        ("us-east-1", SPOT, 20 * 60_000),
    ]
