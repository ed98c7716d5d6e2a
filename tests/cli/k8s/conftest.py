"""The budget check's fixtures: the eks stack, a real migrated ledger per test (the ledger tests' own
fixtures) with budgets, and BudgetChecks on it."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from cli.k8s.admission import BudgetCheck
from guardrails.pricing import PriceTable
from guardrails.runway import Budget
from lambdas.ledger.store import LedgerStore
from stacks.config import StackConfig, load_stack_config
from tests.lambdas.ledger.conftest import fixed_price_table, ledger_template, ledger_url

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
