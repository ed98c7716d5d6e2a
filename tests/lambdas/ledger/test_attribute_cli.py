"""``parkbrake ledger attribute``: usage a report lists as unattributed, attributed by an operator,
the report after, the decision logged; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_ledger_cli
from guardrail_fleet import client_factory, launch, managed_tags, state_change
from ledger_streams import at
from test_ledger_cli import WINDOW, invoke, write_events

from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore

# The ledger CLI tests' fixtures: the database in the environment, ingests received after the clock.
ledger_env = test_ledger_cli.ledger_env
received_after_the_virtual_clock = test_ledger_cli.received_after_the_virtual_clock


@pytest.fixture
def untagged(aws: str, ledger_env: str, tmp_path: Path) -> str:
    """A GPU host with no parkbrake:tenant tag, its 90 minutes ingested: metered for no tenant."""
    ec2 = client_factory(aws)("ec2", None)
    (host,) = launch(ec2, "p4d.24xlarge", managed_tags(tenant="", pool="training"))
    path = write_events(tmp_path / "events.jsonl", [state_change(host, "running", at(0)),
                                                    state_change(host, "stopping", at(90))])  # fmt: skip
    result = invoke("ledger", "ingest", str(path), "--output", "json")
    assert result.exit_code == 0, result.output
    return host


def test_a_report_lists_unattributed_usage_with_the_fix_and_attribute_takes_it(
    untagged: str,
    ledger_env: str,
) -> None:
    before = invoke("ledger", "report", *WINDOW)
    assert before.exit_code == 0, before.output
    assert "unattributed" in before.stdout
    assert "12.000" in before.stdout
    assert (
        f"  parkbrake ledger attribute {untagged} --tenant TENANT --since 2036-05-05T10:00:00+00:00 "
        "--reason TEXT" in before.stdout.splitlines()
    )

    dry = invoke("ledger", "attribute", untagged, "--tenant", "research", "--since", "2036-05-05",
                 "--reason", "untagged by mistake; OPS-42", "--dry-run")  # fmt: skip
    assert dry.exit_code == 0, dry.output
    assert "1 interval, 43,200 accelerator-s" in dry.stdout
    assert "Dry run: nothing changed." in dry.stdout
    assert "unattributed" in invoke("ledger", "report", *WINDOW, "--output", "json").stdout

    done = invoke("ledger", "attribute", untagged, "--tenant", "research", "--since", "2036-05-05",
                  "--reason", "untagged by mistake; OPS-42", "--yes", "--output", "json")  # fmt: skip
    assert done.exit_code == 0, done.output
    (interval,) = json.loads(done.stdout)["intervals"]
    assert (interval["before"]["tenant"], interval["after"]) == (
        "unattributed",
        {"tenant": "research", "pool": "training"},
    )

    after = invoke("ledger", "report", *WINDOW, "--output", "json")
    tenants = {row["tenant"]: row for row in json.loads(after.stdout)["tenants"]}
    assert "unattributed" not in tenants
    assert tenants["research"]["accelerator_seconds"] == "43200.000"  # 8 GPUs × 90 minutes
    text = invoke("ledger", "report", *WINDOW).stdout
    assert "ledger attribute" not in text
    store = LedgerStore.connect(ledger_env)
    try:
        (logged,) = DecisionLedger.of(store).read(kinds=["attribute"])
    finally:
        store.close()
    assert logged.decision.actor.startswith("arn:aws:")
    assert logged.decision.reason == "untagged by mistake; OPS-42"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tenant", "unattributed"], "--tenant: unattributed is what the usage is now"),
        (["--tenant", "no such!"], "--tenant"),
        (["--tenant", "research", "--until", "2036-05-04"], "--until: must be after --since"),
        (["--tenant", "research", "--reason", " "], "--reason"),
    ],
    ids=["unattributed", "bad-name", "until-before-since", "blank-reason"],
)
def test_bad_input_is_one_line_naming_the_flag(
    aws: str,
    ledger_env: str,
    flags: list[str],
    message: str,
) -> None:
    args = ["ledger", "attribute", "i-0aaaaaaaaaaaaaaa1", "--since", "2036-05-05", "--reason", "why", *flags]
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
