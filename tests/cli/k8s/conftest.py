"""The budget check's fixtures: the eks stack, a real migrated ledger per test (the ledger tests' own
fixtures) with budgets, and BudgetChecks on it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client

from cli.k8s.admission import BudgetCheck
from cli.k8s.controller import Controller
from cli.k8s.kube import client_from_options
from guardrails.pricing import PriceTable
from guardrails.runway import Budget
from lambdas.ledger.store import LedgerStore
from stacks.config import StackConfig, load_stack_config
from tests.cli.k8s.fake_api_server import FakeApiServer, fake_api_server
from tests.lambdas.ledger.conftest import fixed_price_table, ledger_template, ledger_url
from tests.lambdas.ledger.ledger_streams import T0

__all__ = ["ledger_template", "ledger_url"]  # the ledger's fixtures: a migrated database per test

REPOSITORY = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def eks() -> StackConfig:
    return load_stack_config("eks", REPOSITORY)


@pytest.fixture(scope="session")
def prices() -> PriceTable:
    return fixed_price_table()


@pytest.fixture
def store(ledger_url: str) -> Iterator[LedgerStore]:
    store = LedgerStore.connect(ledger_url)
    yield store
    store.close()


def set_budget(store: LedgerStore, tenant: str, limit: str, *actions: str) -> None:
    store.set_budget(Budget(tenant, Decimal(limit), "month", (), frozenset(actions or ("deny",)), "UTC"))


@pytest.fixture
def check(store: LedgerStore, eks: StackConfig) -> BudgetCheck:
    return BudgetCheck(store, default_cap=eks.guardrails.default_max_runtime, region=eks.region)


# --- the controller against the FAKE API server and the FAKE of Kueue --------------------------------

BUDGET_CHECK_NAME = "parkbrake-budget"


def admission_check(
    name: str = BUDGET_CHECK_NAME, controller: str = "parkbrake.dev/budget"
) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": name, "generation": 1},
        "spec": {"controllerName": controller},
    }


def cluster_queue(name: str, *checks: str, stop: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"admissionChecksStrategy": {"admissionChecks": [{"name": c} for c in checks]}}
    if stop:
        spec["stopPolicy"] = stop
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with fake_api_server() as server:
        yield server


@pytest.fixture
def client(fake: FakeApiServer) -> Client:
    return client_from_options(fake.url, fake.token_file, fake.ca_file)


@pytest.fixture
def clock() -> list[datetime]:
    return [T0]


@pytest.fixture
def controller(
    client: Client, eks: StackConfig, prices: PriceTable, ledger_url: str, clock: list[datetime]
) -> Iterator[Controller]:
    stores = [LedgerStore.connect(ledger_url) for _ in range(3)]
    checks = [BudgetCheck(s, default_cap=timedelta(minutes=90), region=eks.region) for s in stores]
    yield Controller(client, eks, prices, checks, clock=lambda: clock[0], max_backoff=0.2)
    for s in stores:
        s.close()


def wait_for(condition: Callable[[], Any], seconds: float = 30) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.02)
    raise AssertionError("timed out waiting")
