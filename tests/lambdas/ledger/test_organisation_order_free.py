"""One ledger for the organisation stays a function of its events: the hosts of two accounts, their
events delivered late, twice and in any order through every path (a spoke's events reach the hub's
bus whenever EventBridge delivers them, at least once), derive the intervals, each with its host's
account, and the invoice per tenant and account that all the events derive at once
(guardrails.ledger's rules over each account's intervals)."""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_streams import T0_MS, end_of
from test_ledger_order_free import deliver, deliveries, host_history

from guardrails.ledger import Transition, from_ms, intervals_from, usage_by_key
from lambdas.ledger.store import LedgerStore

ACCOUNTS = ("111122223333", "444455556666")
EXAMPLES = 25  # each example appends a few dozen events through several paths into PostgreSQL


def organisation_events(rng: random.Random, prefix: str) -> list[Transition]:
    """A few hosts, each in one of the two accounts; a tenant's hosts may be in both."""
    events = []
    for index in range(rng.randint(2, 5)):
        account = rng.choice(ACCOUNTS)
        events += [
            replace(event, account=account) for event in host_history(rng, f"{prefix}i-{index}", prefix)
        ]
    return events


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rng=st.randoms(use_true_random=True))
def test_two_accounts_events_late_twice_or_out_of_order_derive_the_same_intervals_and_invoice(
    store: LedgerStore, rng: random.Random
) -> None:
    prefix = f"{uuid.uuid4().hex[:8]}-"  # each example's own hosts and tenants
    events = organisation_events(rng, prefix)
    for delivery in deliveries(rng, events):
        deliver(store, rng, delivery)

    expected = intervals_from(events)
    tenants = sorted({event.attribution.tenant for event in events})
    stored = [interval for tenant in tenants for interval in store.intervals(tenant=tenant)]
    assert sorted(stored, key=lambda i: i.opened_by) == sorted(expected, key=lambda i: i.opened_by)
    assert {i.account for i in stored} <= set(ACCOUNTS)

    now_ms = end_of(events) + rng.randint(0, 3_600_000)
    book = store.price_book()
    reference: dict[tuple[str, str], list[Decimal | int]] = defaultdict(lambda: [0, Decimal(0)])
    for account in ACCOUNTS:
        for (tenant, _, _), usage in usage_by_key(
            [i for i in expected if i.account == account], book, now_ms=now_ms
        ).items():
            reference[tenant, account][0] += usage.accelerator_ms
            reference[tenant, account][1] += usage.usd_hour_ms
    lines = store.invoice_lines(
        now=from_ms(now_ms), since=from_ms(T0_MS - 86_400_000), until=from_ms(now_ms) + timedelta(days=30),
        tenants=tenants,
    )  # fmt: skip
    invoiced: dict[tuple[str, str], list[Decimal | int]] = defaultdict(lambda: [0, Decimal(0)])
    for line in lines:
        invoiced[line.tenant, line.account][0] += line.accelerator_ms
        invoiced[line.tenant, line.account][1] += line.usd_hour_ms
    assert {key: value for key, value in invoiced.items() if value != [0, 0]} == {
        key: value for key, value in reference.items() if value != [0, 0]
    }
