"""For any tag values on one host, the meter, the reconciler and the budget guardrail return, account for
every other host, and take the hostile host's cap as the default (moto in server mode, a real ledger).

Each example launches two fresh hosts in the same emulated account and ledger; examples are few.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from guardrail_fleet import (
    client_factory,
    guardrail_settings,
    launch,
    launch_time,
    managed_tags,
    state_change,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_budget_guardrail import CountingEnforcer

from guardrails import tags
from guardrails.durations import DurationError, parse_duration
from guardrails.ledger import state_change_from_event
from guardrails.runway import Budget
from lambdas.engines import budgeting, metering, reconciling
from lambdas.ledger.store import LedgerStore

FEW = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
DEFAULT_CAP = timedelta(minutes=90)
tag_text = st.text(st.characters(exclude_categories=("Cs", "Cc")), max_size=60) | st.sampled_from(
    ["9999999999d", "1" * 200 + "h", "٣h", "-1h", " ", "0s"]
)


def unusable_cap(text: str) -> bool:
    try:
        parse_duration(text)
    except DurationError:
        return True
    return False


hostile_tags = st.fixed_dictionaries(
    {
        tags.MAX_RUNTIME: tag_text.filter(unusable_cap),
        tags.POOL: tag_text,
        tags.TENANT: tag_text,
        tags.OWNER: tag_text,
    }
)


@FEW
@given(hostile=hostile_tags)
def test_the_meter_and_the_budget_account_for_every_host_and_cap_the_hostile_one_at_the_default(
    aws: str, store: LedgerStore, hostile: dict[str, str]
) -> None:
    clients = client_factory(aws)
    ec2 = clients("ec2", None)
    (bad,) = launch(ec2, "g5.xlarge", managed_tags(max_runtime=None) | hostile)
    (good,) = launch(ec2, "g5.xlarge", managed_tags(tenant="research", max_runtime="2h"))
    store.set_budget(Budget("research", Decimal(100), "month"))
    events = [state_change(host, "running", launch_time(ec2, host)) for host in (bad, good)]

    result = metering.meter(
        [state_change_from_event(event) for event in events],
        store=store,
        clients=clients,
        settings=guardrail_settings(),
        received_at=datetime.now(UTC),
    )

    assert result.inserted == 2
    caps = {interval.instance_id: interval.attribution.cap_ms for interval in store.intervals()}
    assert caps[bad] == DEFAULT_CAP // timedelta(milliseconds=1)
    assert caps[good] == 2 * 3_600_000
    run = budgeting.enforce_budgets(
        store,
        CountingEnforcer(),
        now=datetime.now(UTC),
        default_cap=DEFAULT_CAP,
        tenants=sorted(result.tenants),
    )
    assert "research" in run.checked
    assert not run.errors


@FEW
@given(hostile=hostile_tags)
def test_the_reconciler_repairs_every_host_whatever_one_hosts_tags(
    aws: str, store: LedgerStore, hostile: dict[str, str]
) -> None:
    clients = client_factory(aws)
    ec2 = clients("ec2", None)
    (bad,) = launch(ec2, "g5.xlarge", managed_tags(max_runtime=None) | hostile)
    (good,) = launch(ec2, "g5.xlarge", managed_tags(max_runtime="2h"))

    outcome = reconciling.run_reconciler(
        store=store,
        clients=clients,
        settings=guardrail_settings(),
        now=datetime.now(UTC) + timedelta(minutes=5),
    )

    repaired = {interval.instance_id: interval.attribution.cap_ms for interval in store.intervals()}
    assert {bad, good} <= set(repaired), outcome
    assert repaired[bad] == DEFAULT_CAP // timedelta(milliseconds=1)
