"""`parkbrake run --tenant` denies new work the tenant's budget cannot cover, through the ledger's gate."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from guardrails.runway import Budget
from lambdas.ledger.store import LedgerStore


def run_job(marker: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        parkbrake,
        ["run", "--on-exit", "none", "--max-runtime", "2h", *extra, "--", "touch", str(marker)],
    )
    return result.exit_code, result.output


@pytest.fixture
def ledger_env(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    monkeypatch.setenv("PARKBRAKE_IMDS_ENDPOINT", "http://127.0.0.1:9")  # not on EC2: nothing answers
    return ledger_url


def test_a_job_the_budget_cannot_cover_is_refused_before_it_starts(
    store: LedgerStore, ledger_env: str, tmp_path: Path
) -> None:
    store.set_budget(Budget("research", Decimal(50), "month"))  # 2 h of p4d.24xlarge costs $65.55
    marker = tmp_path / "started"
    status, output = run_job(marker, "--tenant", "research", "--instance-type", "p4d.24xlarge")
    assert status == 1
    assert "not starting the job: the monthly budget of tenant research is $50.00" in output
    assert "less than the $65.55 needed" in output
    assert not marker.exists()


def test_a_job_within_budget_runs(store: LedgerStore, ledger_env: str, tmp_path: Path) -> None:
    store.set_budget(Budget("research", Decimal(100), "month"))
    marker = tmp_path / "started"
    status, _ = run_job(marker, "--tenant", "research", "--instance-type", "p4d.24xlarge")
    assert status == 0
    assert marker.exists()


def test_the_budget_check_needs_the_instance_type(ledger_env: str, tmp_path: Path) -> None:
    status, output = run_job(tmp_path / "started", "--tenant", "research")
    assert status == 2
    assert "--instance-type (or PARKBRAKE_INSTANCE_TYPE) is needed" in output


def test_without_a_ledger_the_job_runs_unchecked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PARKBRAKE_DATABASE_URL", raising=False)
    monkeypatch.delenv("PARKBRAKE_DATABASE_SECRET_ARN", raising=False)
    marker = tmp_path / "started"
    status, _ = run_job(marker, "--tenant", "research", "--instance-type", "p4d.24xlarge")
    assert status == 0
    assert marker.exists()
