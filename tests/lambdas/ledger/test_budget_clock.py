"""The budget's one-minute clock leaves the database alone while no managed accelerator host runs."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from guardrail_fleet import REGION, client_factory, heartbeats, launch, managed_tags

from guardrails import names
from guardrails.runway import Budget
from lambdas import budget
from lambdas.aws.environment import container_settings
from lambdas.ledger.connections import LedgerUnavailable
from lambdas.ledger.store import LedgerStore, container_store

CLOCK_EVENT = {"version": "0", "id": "tick", "detail-type": "Scheduled Event", "source": "aws.events",
               "account": "123456789012", "time": "2026-11-30T21:00:00Z", "region": REGION,
               "resources": [], "detail": {}}  # fmt: skip
# Nothing listens there: a handler that opened the database would fail.
NO_DATABASE = "postgresql://parkbrake@127.0.0.1:9/nowhere?connect_timeout=2"


@pytest.fixture
def lambda_environment(aws: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PARKBRAKE_STACK", "dev")
    monkeypatch.setenv("PARKBRAKE_REGIONS", REGION)
    container_settings.cache_clear()
    container_store.cache_clear()
    yield
    container_store.cache_clear()
    container_settings.cache_clear()


def run_clock(monkeypatch: pytest.MonkeyPatch, database_url: str) -> dict[str, Any]:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", database_url)
    container_store.cache_clear()
    return budget.handler(CLOCK_EVENT, None)


@pytest.mark.usefixtures("lambda_environment")
def test_with_nothing_running_the_clock_does_not_open_the_database(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clients = client_factory(aws)
    # An unmanaged accelerator host and a managed CPU host do not wake the database either.
    launch(clients("ec2", REGION), "g5.xlarge", {"Name": "someone's"})
    launch(clients("ec2", REGION), "m5.large", managed_tags())

    result = run_clock(monkeypatch, NO_DATABASE)

    assert (result["idle"], result["checked"], result["errors"]) == (True, [], [])
    assert [metric["MetricName"] for metric in heartbeats(clients)] == [names.HEARTBEAT_METRIC]  # it ran


@pytest.mark.usefixtures("lambda_environment")
def test_a_running_managed_host_brings_the_check_back(
    aws: str, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clients = client_factory(aws)
    launch(clients("ec2", REGION), "g5.xlarge", managed_tags())
    with pytest.raises(LedgerUnavailable, match="nowhere"):  # it does reach for the database
        run_clock(monkeypatch, NO_DATABASE)

    setup = LedgerStore.connect(ledger_url)
    setup.set_budget(Budget("research", Decimal(100), "month"))
    setup.close()
    try:
        result = run_clock(monkeypatch, ledger_url)
        assert "idle" not in result
        assert result["checked"] == ["research"]
    finally:
        container_store().close()


@pytest.mark.usefixtures("lambda_environment")
def test_other_events_always_check_the_budgets(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    setup = LedgerStore.connect(ledger_url)
    setup.set_budget(Budget("research", Decimal(100), "month"))
    setup.close()
    try:
        monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
        assert budget.handler({"tenants": ["research"]}, None)["checked"] == ["research"]
    finally:
        container_store().close()
