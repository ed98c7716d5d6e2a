"""``ledger ingest`` and ``ledger migrate`` answer first: counts per outcome and reason, then at most
20 lines (all with ``--verbose``); the prices recorded per region, not one name each."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from guardrail_fleet import client_factory, launch, managed_tags, state_change
from ledger_streams import at

from cli.main import parkbrake
from cli.usage.ingest_summary import LINES_SHOWN, ingest_summary, prices_summary


def invoke(*args: str) -> Result:
    return CliRunner().invoke(parkbrake, list(args))


@pytest.fixture
def many_duplicates(aws: str, ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One GPU host's start, a CPU host's, and 30 repeats of the GPU start: 30 + 1 lines not appended."""
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    # Received a day after the virtual clock's start (2036): the events are in its past, not from the
    # future; each ingest after the one before (an ingest's outcomes are told apart by when it ran).
    later = itertools.count()
    monkeypatch.setattr("cli.usage.ingest.received_now", lambda: at(24 * 60, seconds=next(later)))
    ec2 = client_factory(aws)("ec2", None)
    (gpu,) = launch(ec2, "g5.xlarge", managed_tags(tenant="product", pool="inference"))
    (cpu,) = launch(ec2, "m5.large", managed_tags())
    start = state_change(gpu, "running", at(0))
    events = [start, state_change(cpu, "running", at(0)), *[start] * 30]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    return path


def test_ingest_prints_the_counts_first_and_at_most_twenty_lines(many_duplicates: Path) -> None:
    result = invoke("ledger", "ingest", str(many_duplicates))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "read 32 events: 1 appended, 30 duplicate, 1 skipped"
    assert lines[1] == "  30 duplicate: repeats an earlier line of the file"
    assert lines[2] == "   1 skipped: not an accelerator instance type"
    listed = [line for line in lines if line.startswith("  line ")]
    assert len(listed) == LINES_SHOWN
    assert lines[-1] == f"  … {31 - LINES_SHOWN} more; --verbose lists all"


def test_ingest_verbose_lists_every_line_not_appended(many_duplicates: Path) -> None:
    invoke("ledger", "ingest", str(many_duplicates))
    result = invoke("ledger", "ingest", str(many_duplicates), "--verbose")
    assert result.exit_code == 0, result.output
    listed = [line for line in result.stdout.splitlines() if line.startswith("  line ")]
    assert [int(line.split()[1].rstrip(":")) for line in listed] == list(range(1, 33))  # all, appended none
    assert "   1 duplicate: already in the ledger" in result.stdout.splitlines()  # counts right-aligned
    assert "more; --verbose" not in result.stdout


def test_the_summary_of_a_clean_file_lists_no_lines() -> None:
    lines = [{"line": 1, "event_id": "e1", "instance_id": "i-1", "outcome": "appended", "reason": ""}]
    assert ingest_summary(lines, verbose=False) == ["read 1 event: 1 appended"]
    assert ingest_summary([], verbose=True) == ["read 0 events: nothing to append"]


def test_migrate_says_how_many_prices_per_region() -> None:
    recorded = ["g5.xlarge in us-east-1", "p4d.24xlarge in us-east-1", "g5.xlarge in eu-west-1"]
    assert prices_summary(recorded) == (
        "recorded 3 prices (instance type × region) in 2 regions: eu-west-1 1, us-east-1 2"
    )
