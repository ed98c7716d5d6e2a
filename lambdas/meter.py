"""The meter: every ``EC2 Instance State-change Notification`` of an accelerator host, onto the ledger.

EventBridge delivers the native event (at least once, in any order). The meter looks the host up
with ``DescribeInstances`` (tags and type; what the ledger last knew when EC2 no longer describes
it), takes its accelerator count from the price table, and appends. A database or AWS error
raises, so EventBridge delivers again; a duplicate is then ignored. After a new event the tenant's
budget is checked at once (lambdas.budget), so a crossed limit does not wait for the next minute.

``parkbrake ledger ingest`` feeds files of the same events through :func:`meter` in batches.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from guardrails.ledger import Attribution, StateChange, Transition, attribution_for, state_change_from_event
from guardrails.pricing import PriceTable, load_price_table
from guardrails.settings import Settings
from lambdas import budget
from lambdas.aws import heartbeat
from lambdas.aws.environment import ClientFactory, container_settings, default_clients, utc_now
from lambdas.ledger.store import LedgerStore, container_store

log = logging.getLogger(__name__)
GUARDRAIL = "meter"
FILTER_VALUES_LIMIT = 200  # ids per DescribeInstances filter


@dataclass
class MeterResult:
    inserted: int = 0
    duplicates: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)  # not accelerator hosts: not metered
    unattributed: list[dict[str, str]] = field(default_factory=list)  # unknown to EC2 and the ledger
    tenants: set[str] = field(default_factory=set)  # whose usage changed

    def add(self, other: MeterResult) -> None:
        self.inserted += other.inserted
        self.duplicates += other.duplicates
        self.skipped += other.skipped
        self.unattributed += other.unattributed
        self.tenants |= other.tenants

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"tenants": sorted(self.tenants)}


def describe_attributions(
    changes: Sequence[StateChange], *, clients: ClientFactory, prices: PriceTable, settings: Settings
) -> dict[str, Attribution | None]:
    """Attribution of each host EC2 still describes; None for a host without accelerators."""
    by_region: dict[str, set[str]] = defaultdict(set)
    for change in changes:
        by_region[change.region].add(change.instance_id)
    found: dict[str, Attribution | None] = {}
    for region, instance_ids in sorted(by_region.items()):
        ordered = sorted(instance_ids)
        paginator = clients("ec2", region).get_paginator("describe_instances")
        for start in range(0, len(ordered), FILTER_VALUES_LIMIT):
            chunk = ordered[start : start + FILTER_VALUES_LIMIT]
            # A filter, not InstanceIds: an id EC2 has forgotten is absent, not an error for all.
            pages = paginator.paginate(Filters=[{"Name": "instance-id", "Values": chunk}])
            for page in pages:
                for reservation in page["Reservations"]:
                    for instance in reservation["Instances"]:
                        host_tags = {tag["Key"]: tag["Value"] for tag in instance.get("Tags", [])}
                        found[instance["InstanceId"]] = attribution_for(
                            instance["InstanceType"],
                            host_tags,
                            prices,
                            pool_caps=settings.pool_max_runtimes,
                            default_cap=settings.default_max_runtime,
                        )
    return found


def meter(
    changes: Sequence[StateChange],
    *,
    store: LedgerStore,
    clients: ClientFactory,
    settings: Settings,
    received_at: datetime,
    source: str = GUARDRAIL,
    prices: PriceTable | None = None,
) -> MeterResult:
    """Attribute and append ``changes``; raises on AWS or database errors (nothing is half-written)."""
    table = prices or load_price_table()
    described = describe_attributions(changes, clients=clients, prices=table, settings=settings)
    forgotten = sorted({change.instance_id for change in changes} - described.keys())
    remembered = store.last_attributions(forgotten) if forgotten else {}
    result = MeterResult()
    transitions = []
    for change in changes:
        note = {"event_id": change.event_id, "instance_id": change.instance_id}
        if change.instance_id in described:
            attribution = described[change.instance_id]
            if attribution is None:
                result.skipped.append(note | {"reason": "not an accelerator instance type"})
                continue
        elif change.instance_id in remembered:
            attribution = remembered[change.instance_id]
        else:
            result.unattributed.append(note | {"reason": "unknown to EC2 and to the ledger"})
            continue
        transitions.append(
            Transition(
                change.event_id, change.instance_id, change.state, change.at_ms, attribution, change.region
            )
        )
    appended = store.append(transitions, source=source, received_at=received_at, prices=table)
    result.inserted, result.duplicates = appended.inserted, appended.duplicates
    result.tenants = set(appended.tenants)
    return result


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    change = state_change_from_event(event)
    now = utc_now()
    settings = container_settings()
    store = container_store()
    result = meter([change], store=store, clients=default_clients, settings=settings, received_at=now)
    for note in result.unattributed:
        log.warning("not metered: %s", note)
    outcome: dict[str, Any] = result.as_dict()
    if result.tenants:
        run = budget.enforce_budgets(
            store,
            budget.AwsEnforcer.from_settings(settings, default_clients),
            now=now,
            default_cap=settings.default_max_runtime,
            tenants=sorted(result.tenants),
        )
        outcome["budget"] = run.as_dict()
    heartbeat.record_success(
        GUARDRAIL, stack=settings.stack, cloudwatch=default_clients("cloudwatch", None), now=now
    )
    return outcome
