"""The reconciling engine: make the ledger agree with what EC2 says of its accelerator hosts.

Events can be lost (the database down longer than EventBridge retries, a dead-letter queue nobody
replayed). The reconciler lists every accelerator host of the guarded regions, compares it with the
ledger's latest interval of each (guardrails.ledger.reconcile) and appends the repairs through the
metering engine, marked ``source=reconciler``. Then it prunes the decision log of decisions older than
``PARKBRAKE_DECISION_RETENTION`` (in bounded batches: lambdas.ledger.decisions), and records the spot
prices of the zones its spot hosts run in from EC2's ``DescribeSpotPriceHistory``
(guardrails.spot_prices: the changes since the ledger's latest of each key, at most 23 hours back).
With ``PARKBRAKE_CLOSE_GRACE`` set, it then closes each tenant's last month once the grace after it
is over (lambdas.ledger.closes; the decision's actor is ``reconciler``).
Its Lambda's run (:func:`reconcile_ledger`, every 15 minutes) records the heartbeat only after a run
without errors, so its alarm pages when it stops working.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from guardrails.instance_types import is_accelerator
from guardrails.ledger import SPOT, Ec2Host, PriceKey, from_ms, reconcile, to_ms, transition_ms
from guardrails.price_list import SPOT_LINUX_PRODUCTS
from guardrails.pricing import PriceTable, load_price_table
from guardrails.settings import Settings
from guardrails.spot_prices import SpotPrice, history_start_ms, spot_changes
from lambdas.aws import heartbeat
from lambdas.aws.assumed import AssumeFailed
from lambdas.aws.environment import ClientFactory
from lambdas.aws.errors import AWS_ERRORS, describe_error
from lambdas.aws.spoke_clients import (
    OWN_ACCOUNT,
    PlaceClients,
    account_of_arn,
    guarded_places,
    own_place_clients,
    place_clients_for,
)
from lambdas.aws.spoke_list import SpokeList, member_reach
from lambdas.engines import metering
from lambdas.ledger.attributions import waiting_stops, waiting_stops_line
from lambdas.ledger.closes import close_after_grace
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.stack_budgets import apply_declared_once
from lambdas.ledger.store import LedgerStore

log = logging.getLogger(__name__)
GUARDRAIL = "reconciler"
WATCHED_STATES = ["running", "stopping", "stopped", "shutting-down", "terminated"]


def accelerator_hosts(
    clients: ClientFactory, *, settings: Settings, prices: PriceTable, reach: Reach | None = None
) -> list[Ec2Host]:
    """Every accelerator host EC2 describes in the guarded places (terminated ones stay about an
    hour), attributed as the meter attributes it. Without ``reach``, the own account's regions; with
    it, each of its places through its clients, and a member account's place that cannot be listed
    (its spoke role missing or denied) is in ``reach.failed``, the others listed all the same."""
    reach = reach or Reach.own(settings, clients)
    hosts = []
    for account, region in reach.places:
        try:
            hosts += _hosts_in(reach.place_clients(account, region)("ec2", region), account, region,
                               settings=settings, prices=prices)  # fmt: skip
        except (AssumeFailed, *AWS_ERRORS) as error:
            if account in (OWN_ACCOUNT, reach.own_account):
                raise  # the hub's own EC2 failing fails the run, as it always has
            why = str(error) if isinstance(error, AssumeFailed) else describe_error(error)
            log.error("cannot list the hosts of %s/%s: %s", account, region, why)
            reach.failed[(account, region)] = why
    return hosts


def _hosts_in(
    ec2: Any, account: str, region: str, *, settings: Settings, prices: PriceTable
) -> list[Ec2Host]:
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": WATCHED_STATES}]
    )
    instances = [
        instance
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
        if is_accelerator(instance["InstanceType"])
    ]
    attributions = metering.attribute_instances(
        instances, region=region, prices=prices, settings=settings, ec2=ec2
    )
    return [
        Ec2Host(
            instance["InstanceId"],
            region,
            instance["State"]["Name"],
            to_ms(instance["LaunchTime"]),
            transition_ms(instance.get("StateTransitionReason", "")),
            attributions.get(instance["InstanceId"]),
            account,
        )
        for instance in instances
    ]


@dataclass
class Reach:
    """Where the reconciler lists hosts: every (account, region) it guards, the clients of each, and
    the places that could not be listed this run (place: why)."""

    settings: Settings
    places: list[tuple[str, str]]
    place_clients: PlaceClients
    own_account: str | None = None
    error: str | None = None  # the spokes list could not be read
    failed: dict[tuple[str, str], str] = field(default_factory=dict)

    @classmethod
    def own(cls, settings: Settings, clients: ClientFactory) -> Reach:
        return cls(
            settings, [(OWN_ACCOUNT, region) for region in settings.regions], own_place_clients(clients)
        )

    @classmethod
    def of(
        cls, settings: Settings, clients: ClientFactory, spokes: SpokeList, *, own_account: str | None
    ) -> Reach:
        """A hub's: its listed member accounts and its spokes (lambdas.aws.spoke_list), else its own."""
        members = member_reach(settings, clients, spokes)
        known = members.settings
        places = guarded_places(known, own_account=own_account, spoke_places=members.spoke_places)
        reach = place_clients_for(known, clients, own_account=own_account)
        return cls(known, places, reach, own_account, members.error)

    def errors(self) -> list[dict[str, str]]:
        listing = [{"action": "list-spokes", "error": self.error}] if self.error else []
        return listing + [
            {"action": "list", "place": f"{account}/{region}", "error": why}
            for (account, region), why in sorted(self.failed.items())
        ]


def load_spot_prices(store: LedgerStore, clients: ClientFactory, hosts: Sequence[Ec2Host]) -> int:
    """Record EC2's spot prices for the (type, region, zone) of every spot host EC2 describes (running,
    or stopped within about the hour EC2 keeps describing it): one DescribeSpotPriceHistory per zone.
    Returns how many prices were new."""
    keys = {
        PriceKey.of(host.attribution)
        for host in hosts
        if host.attribution is not None and host.attribution.pricing_model == SPOT and host.attribution.zone
    }
    if not keys:
        return 0
    now_ms, latest = store.latest_spot_prices(sorted(keys))
    by_zone: dict[tuple[str, str], list[PriceKey]] = defaultdict(list)
    for key in sorted(keys):
        by_zone[(key.region, str(key.zone))].append(key)
    history = []
    for (region, zone), zone_keys in by_zone.items():
        pages = (
            clients("ec2", region)
            .get_paginator("describe_spot_price_history")
            .paginate(
                InstanceTypes=[key.instance_type for key in zone_keys],
                ProductDescriptions=list(SPOT_LINUX_PRODUCTS),
                Filters=[{"Name": "availability-zone", "Values": [zone]}],
                StartTime=from_ms(min(history_start_ms(latest.get(key), now_ms) for key in zone_keys)),
                EndTime=from_ms(now_ms),
            )
        )
        history += [
            SpotPrice(
                PriceKey(record["InstanceType"], region, SPOT, record["AvailabilityZone"]),
                to_ms(record["Timestamp"]),
                Decimal(record["SpotPrice"]),
            )
            for page in pages
            for record in page["SpotPriceHistory"]
            if record.get("ProductDescription") in SPOT_LINUX_PRODUCTS
        ]
    return store.record_spot_prices(
        spot_changes([price for price in history if price.key in keys], latest, now_ms=now_ms)
    )


def run_reconciler(
    *,
    store: LedgerStore,
    clients: ClientFactory,
    settings: Settings,
    now: datetime,
    reach: Reach | None = None,
) -> dict[str, Any]:
    prices = load_price_table()
    reach = reach or Reach.own(settings, clients)
    hosts = accelerator_hosts(clients, settings=settings, prices=prices, reach=reach)
    latest = store.latest_intervals([host.instance_id for host in hosts])
    repairs = reconcile(
        hosts, latest, now_ms=to_ms(now), home_region=settings.regions[0], unlisted=reach.failed
    )
    result = metering.meter(repairs, store=store, clients=clients, settings=settings, received_at=now,
                         source=GUARDRAIL, prices=prices, place_clients=reach.place_clients)  # fmt: skip
    for note in result.unattributed + result.skipped:
        log.warning("reconciler could not repair: %s", note)
    heartbeat.count_action(GUARDRAIL, "repair", "missing-event", result.inserted)
    # After the repairs are in: a pruning that fails raises (no heartbeat) but holds no repair back.
    pruned = DecisionLedger.of(store).prune(settings.decision_retention)
    heartbeat.count_action(GUARDRAIL, "prune", "decision-retention", pruned)
    spot_prices = load_spot_prices(store, clients, hosts)
    heartbeat.count_action(GUARDRAIL, "price", "spot", spot_prices)
    # Last month, once the grace after it is over (lambdas.ledger.closes): after the repairs, so that
    # what the reconciler found missing is in the month it closes.
    closed = [
        o for o in close_after_grace(store, now=now, grace=settings.close_grace) if o.outcome == "closed"
    ]
    heartbeat.count_action(GUARDRAIL, "close", "period", len(closed))
    return {
        "hosts": len(hosts),
        "repairs": [change.event_id for change in repairs],
        "pruned_decisions": pruned,
        "spot_prices": spot_prices,
        "closed_periods": [f"{o.close.tenant} {o.close.period}" for o in closed],
    } | result.as_dict()


def stack_budgets_step(
    store: LedgerStore, *, stack: str, now: datetime
) -> tuple[list[dict[str, Any]], list[str]]:
    """The stack's budgets (``PARKBRAKE_STACK_BUDGETS``) applied once per container: a deploy that
    changes them starts new containers. A failure is the run's error, never the end of the run."""
    try:
        return apply_declared_once(store, os.environ, stack=stack, now=now), []
    except Exception as error:  # reported with the run's other errors; the next container tries again
        log.exception("applying the stack's budgets failed")
        return [], [f"applying the stack's budgets failed: {error}"]


def reconcile_ledger(
    *,
    store: LedgerStore,
    clients: ClientFactory,
    settings: Settings,
    now: datetime,
    invoked_function_arn: str | None = None,
    spokes: SpokeList | None = None,
) -> dict[str, Any]:
    """The reconciler Lambda's run: :func:`run_reconciler`, then alerts about hosts that started with
    no price and about usage metered for no tenant, then the heartbeat (a failure before it raises,
    and the heartbeat's alarm pages). A hub's reconciler lists its member accounts' hosts too, the
    accounts learned as the meter learns them (``spokes``: the container's list); a list it cannot
    read, or a member account it cannot list, is an error of the run and withholds the heartbeat."""
    reach = Reach.of(
        settings, clients, spokes or SpokeList(), own_account=account_of_arn(invoked_function_arn)
    )
    settings = reach.settings
    outcome = run_reconciler(store=store, clients=clients, settings=settings, now=now, reach=reach)
    outcome["stack_budgets"], budget_errors = stack_budgets_step(store, stack=settings.stack or "", now=now)
    outcome["errors"] = [
        *outcome.get("errors", []),
        *budget_errors,
        *metering.alert_unpriced(outcome["unpriced"], settings=settings, clients=clients),
        *metering.alert_unattributed(outcome["metered_unattributed"], settings=settings, clients=clients),
        *metering.alert_unknown_tenants(outcome["unknown_tenants"], settings=settings, clients=clients),
    ]
    stops = waiting_stops(store, now=now)
    outcome["waiting_stops"] = [stop.as_dict() for stop in stops]
    if stops:
        heartbeat.count_action(GUARDRAIL, "waiting", "stop-without-start", len(stops))
        outcome["errors"] += metering.alert(
            "stops waiting for their start", waiting_stops_line(stops), settings=settings, clients=clients
        )
    outcome["errors"] += reach.errors()
    if reach.error is None and not reach.failed:
        heartbeat.record_success(
            GUARDRAIL, stack=settings.stack, cloudwatch=clients("cloudwatch", None), now=now
        )
    return outcome
