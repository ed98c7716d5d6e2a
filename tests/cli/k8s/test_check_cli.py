"""``parkbrake k8s check``: one Workload decided from a file, JSON out, exit 0/1; bad input exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from lambdas.ledger.store import LedgerStore
from tests.cli.k8s.conftest import REPOSITORY, set_budget
from tests.cli.k8s.workloads import workload


def run(tmp_path: Path, document: object, *extra: str) -> tuple[int, str]:
    path = tmp_path / "workload.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    result = CliRunner().invoke(
        parkbrake,
        ["k8s", "check", "--stack", "eks", "--project-dir", str(REPOSITORY), "--workload", str(path), *extra],
    )
    return result.exit_code, result.output


@pytest.fixture
def ledger_env(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    return ledger_url


def test_ready_retry_rejected_from_one_ledger(ledger_env: str, store: LedgerStore, tmp_path: Path) -> None:
    set_budget(store, "research", "60")
    code, out = run(tmp_path, workload("train-a", pods=8, gpus_per_pod=4), "--output", "json")
    ready = json.loads(out)
    assert (code, ready["state"], ready["hosts"], ready["instance_type"]) == (0, "Ready", 8, "g5.12xlarge")
    assert isinstance(ready["reservation"], int)
    code, out = run(tmp_path, workload("train-b", pods=4, gpus_per_pod=4), "--output", "json")
    retry = json.loads(out)
    assert (code, retry["state"], retry["requeue_after_seconds"]) == (1, "Retry", 1800)
    code, out = run(tmp_path, workload("train-c", pods=4, gpus_per_pod=4, max_seconds=8 * 3600), "-o", "json")
    rejected = json.loads(out)
    assert (code, rejected["state"], rejected["reservation"]) == (1, "Rejected", None)
    code, out = run(tmp_path, workload("train-d", pods=1, gpus_per_pod=1, max_seconds=600))
    assert code == 0
    assert out.startswith("Ready: budget admits 1 x g5.12xlarge")


@pytest.mark.parametrize(
    ("document", "names"),
    [
        ("{not json", "--workload:"),
        ({"apiVersion": "v1", "kind": "Pod"}, "apiVersion/kind:"),
        (workload(queue="marketing"), "status.admission.clusterQueue:"),
    ],
)
def test_bad_input_is_one_line_naming_the_field_exit_2(
    ledger_env: str, tmp_path: Path, document: object, names: str
) -> None:
    code, out = run(tmp_path, document)
    assert code == 2
    assert names in out
    assert len(out.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flag", "value"), [("--resync-every", "soon"), ("--undecided-after", "0s"), ("--stop-every", "1x")]
)
def test_the_controllers_bad_periods_are_one_line_naming_the_flag(flag: str, value: str) -> None:
    result = CliRunner().invoke(
        parkbrake,
        ["k8s", "controller", "--stack", "eks", "--project-dir", str(REPOSITORY), "--server",
         "https://127.0.0.1:1", flag, value],
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: invalid value for {flag}: {value!r} ")
    assert " — use 90m, 2h, 1h30m or 5400s" in result.output
    assert result.output.count("\n") == 1
