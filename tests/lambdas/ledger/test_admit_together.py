"""Admissions decided together (``LedgerStore.admit_together``, the Kubernetes budget check's batches)
give what each admission alone gives, in any state of the budgets; one request a tenant; two batches
taking the same tenants in different orders never deadlock."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_streams import T0, at, ms, step, who

from guardrails.launch import Admission, AdmissionRequest
from guardrails.runway import Budget
from lambdas.ledger.store import LedgerStore

CAP = timedelta(minutes=90)
LEASE = timedelta(minutes=30)
TENANTS = ("alpha", "beta", "gamma", "delta", "omega")
# p4d and g5 are priced; "x9.unpriced" is not (the admission is granted, nothing reserved).
TYPES = ("p4d.24xlarge", "g5.12xlarge", "x9.unpriced")
# The CI bound: each example is two transactions of a handful of statements each, rolled back.
EXAMPLES = 40


def seen(admission: Admission) -> tuple[object, ...]:
    """What an admission says, its reservation's id aside (a sequence's: it differs between runs)."""
    return (
        admission.granted,
        admission.needed_usd,
        admission.remaining_usd,
        admission.reason,
        admission.reservation_id is not None,
    )


asks = st.lists(
    st.tuples(
        st.sampled_from(TENANTS),
        st.sampled_from(TYPES),
        st.integers(0, 3),  # hosts
        st.integers(1, 240),  # cap, minutes
        st.one_of(st.none(), st.integers(1, 400)),  # the tenant's monthly limit (> 0), None: no budget
        st.integers(0, 2),  # hosts of the same type reserved for the tenant before
    ),
    min_size=1,
    max_size=len(TENANTS),
    unique_by=lambda ask: ask[0],
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(asked=asks)
def test_admissions_decided_together_are_what_each_alone_decides(
    store: LedgerStore, asked: list[tuple[str, str, int, int, int | None, int]]
) -> None:
    requests = [
        AdmissionRequest(tenant, kind, hosts, timedelta(minutes=minutes))
        for tenant, kind, hosts, minutes, _, _ in asked
    ]

    def decided(together: bool) -> list[tuple[object, ...]]:
        with store.connections.connection() as connection, connection.transaction():
            for tenant, kind, _, _, limit, before in asked:
                if limit is not None:
                    store.set_budget(Budget(tenant, Decimal(limit), "month"))
                if before:
                    store.admit(
                        AdmissionRequest(tenant, kind, before, CAP), now=at(0), default_cap=CAP, lease=LEASE
                    )
            if together:
                admissions = store.admit_together(requests, now=at(1), default_cap=CAP, lease=LEASE)
            else:
                admissions = [store.admit(r, now=at(1), default_cap=CAP, lease=LEASE) for r in requests]
            runways = store.runways(now=at(1), default_cap=CAP, tenants=[r.tenant for r in requests])
            result = [seen(admission) for admission in admissions]
            result += [(runway.tenant, runway.reserved_usd) for runway in runways]
            raise psycopg.Rollback()  # each example from the same empty ledger: this one undone
        return result

    assert decided(together=True) == decided(together=False)


def test_a_running_host_asking_for_itself_is_counted_once_together_as_alone(store: LedgerStore) -> None:
    store.set_budget(Budget("alpha", Decimal(100), "month"))
    store.append([step("run-i-1", "i-1", "running", ms(0), who("alpha", "training", "p4d.24xlarge", 90))],
                 source="meter", received_at=T0)  # fmt: skip
    itself = AdmissionRequest("alpha", "p4d.24xlarge", 1, CAP, instance_id="i-1")
    alone = store.admit(itself, now=at(1), default_cap=CAP, lease=LEASE)
    (together, other) = store.admit_together(
        [itself, AdmissionRequest("beta", "p4d.24xlarge", 1, CAP)], now=at(1), default_cap=CAP, lease=LEASE
    )
    assert seen(together) == seen(alone)
    assert (together.granted, together.reservation_id) == (True, None)  # already committed: no reservation
    assert other.reservation_id is not None


def test_two_requests_of_one_tenant_are_refused_naming_them(store: LedgerStore) -> None:
    two = [AdmissionRequest("alpha", "p4d.24xlarge", 1, CAP)] * 2
    with pytest.raises(ValueError, match=r"one request per tenant, got \['alpha', 'alpha'\]"):
        store.admit_together(two, now=at(0), default_cap=CAP, lease=LEASE)
    assert store.runways(now=at(0), default_cap=CAP, tenants=["alpha"]) == []  # nothing reserved


def test_batches_taking_the_same_tenants_in_opposite_orders_never_deadlock(
    ledger_url: str, store: LedgerStore
) -> None:
    covered = 6  # each tenant's budget covers six p4d hours and a half: 80 asks each (40 rounds of two threads), 6 granted
    for tenant in ("alpha", "beta"):
        store.set_budget(Budget(tenant, Decimal("49.1589") * covered + Decimal("0.01"), "month"))
    granted: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def ask(order: tuple[str, str]) -> None:
        mine = LedgerStore.connect(ledger_url)
        try:
            for _ in range(40):
                barrier.wait()
                admissions = mine.admit_together(
                    [AdmissionRequest(tenant, "p4d.24xlarge", 1, CAP) for tenant in order],
                    now=at(0), default_cap=CAP, lease=LEASE,
                )  # fmt: skip
                granted.extend(1 for admission in admissions if admission.granted)
        except BaseException as error:  # collected: the assertion below names it
            errors.append(error)
            barrier.abort()
        finally:
            mine.close()

    threads = [
        threading.Thread(target=ask, args=(order,)) for order in (("alpha", "beta"), ("beta", "alpha"))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(granted) == 2 * covered
    for runway in store.runways(now=at(0), default_cap=CAP, tenants=["alpha", "beta"]):
        assert runway.reserved_usd == Decimal("49.158900") * covered
