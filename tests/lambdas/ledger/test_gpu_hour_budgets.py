"""Budgets beyond dollars (kueue #28: resource-hours per period): a tenant's budget may also limit
accelerator-hours per period; the ledger's admission (which the launcher, `ledger admit` and the
Kubernetes budget check call) refuses what would pass it, and `ledger runway` shows hours used and left."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from click.testing import CliRunner
from ledger_streams import T0, at, ms, step, who

from cli.main import parkbrake
from guardrails.launch import AdmissionRequest
from guardrails.runway import Budget
from lambdas.engines import budgeting
from lambdas.ledger.store import LedgerStore

CAP = timedelta(minutes=60)


def start_p4d(store: LedgerStore, instance_id: str, minute: float, cap_minutes: int) -> None:
    store.append(
        [step(f"run-{instance_id}", instance_id, "running", ms(minute), who("research", "training", "p4d.24xlarge", cap_minutes))],
        source="meter",
        received_at=T0,
    )  # fmt: skip


def test_admission_refuses_what_would_pass_the_gpu_hour_limit_and_runway_reports_the_hours(
    store: LedgerStore,
) -> None:
    store.set_budget(Budget("research", Decimal(100_000), gpu_hours=Decimal(20)))
    start_p4d(store, "i-1", 0, cap_minutes=60)  # 8 GPUs: at minute 30, 4 h used and 4 h committed
    (status,) = store.runways(now=at(30), default_cap=CAP, tenants=["research"])
    assert (status.gpu_hours_spent, status.gpu_hours_used, status.gpu_hours_remaining) == (
        Decimal(4),
        Decimal(8),
        Decimal(12),
    )
    gate = budgeting.LedgerBudgetGate(store, default_cap=CAP)
    p4d = AdmissionRequest("research", "p4d.24xlarge", 1, CAP)  # 8 GPU-hours to its cap
    first = gate.admit(p4d, at(30))
    assert first.granted
    assert first.reservation_id is not None
    second = gate.admit(p4d, at(30))
    assert not second.granted
    assert second.reason == (
        "the monthly GPU-hour budget of tenant research is 20.00 accelerator-hours: 16.00 used (spent, "
        "committed to running hosts' caps and reserved) leave 4.00, less than the 8.00 needed"
    )
    (status,) = store.runways(now=at(30), default_cap=CAP, tenants=["research"])
    shown = status.as_dict()
    hours = ("gpu_hours_limit", "gpu_hours_spent", "gpu_hours_reserved", "gpu_hours_remaining")
    assert all(isinstance(shown[key], str) for key in hours)  # amounts in JSON: exact decimal strings
    assert [Decimal(shown[key]) for key in hours] == [20, 4, 8, 4]
    gate.release(first.reservation_id, at(31))
    assert gate.admit(p4d, at(31)).granted  # released: the hours are back


def test_without_deny_or_without_an_hour_limit_the_hours_never_refuse(store: LedgerStore) -> None:
    store.set_budget(
        Budget("research", Decimal(100_000), gpu_hours=Decimal(1), actions=frozenset({"notify"}))
    )
    store.set_budget(Budget("product", Decimal(100_000)))
    gate = budgeting.LedgerBudgetGate(store, default_cap=CAP)
    assert gate.admit(AdmissionRequest("research", "p4d.24xlarge", 1, CAP), at(0)).granted
    assert gate.admit(AdmissionRequest("product", "p4d.24xlarge", 3, CAP), at(0)).granted
    (status,) = store.runways(now=at(0), default_cap=CAP, tenants=["product"])
    assert status.as_dict()["gpu_hours_limit"] is None


def test_the_cli_sets_gpu_hours_and_runway_shows_used_and_left(
    ledger_url: str, store: LedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(
        parkbrake, ["ledger", "budget", "research", "--limit-usd", "5000", "--gpu-hours", "400"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("research: 5,000.00 USD and 400 GPU-hours per month (UTC)")
    runway = CliRunner().invoke(parkbrake, ["ledger", "runway"])
    assert "0.0 / 400.0 of 400" in runway.stdout
    assert (
        json.loads(CliRunner().invoke(parkbrake, ["ledger", "runway", "-o", "json"]).stdout)[0][
            "gpu_hours_remaining"
        ]
        == "400.000000"  # an exact decimal string, as every amount in JSON (docs/ledger.md)
    )


@pytest.mark.parametrize("hours", ["abc", "0", "-3", "1.234"])
def test_a_bad_gpu_hours_names_the_flag(ledger_url: str, monkeypatch: pytest.MonkeyPatch, hours: str) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    result = CliRunner().invoke(
        parkbrake, ["ledger", "budget", "research", "--limit-usd", "5", "--gpu-hours", hours]
    )
    assert result.exit_code == 2
    assert "--gpu-hours:" in result.output
    assert "Traceback" not in result.output
