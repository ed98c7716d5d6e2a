"""The hub's invoice with two accounts' usage (docs/ledger.md, *Accounts*): the hub's backfill reads
the member account's hosts through its spoke role (moto's ``sts:AssumeRole`` into another account
id acts in that account, moto/sts/models.py), every invoice line names its account, ``--account``
keeps one account's lines, and FOCUS's sub account is the account, named from c7n-org's list."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from guardrail_fleet import ACCOUNT, REGION, STACK, client_factory, launch, managed_tags, state_change
from ledger_streams import at

from cli.main import parkbrake
from guardrails import names
from lambdas.aws.assumed import AccountAccess, AccountSessions

HUB = ACCOUNT
MEMBER = "222233334444"
WINDOW = ["--since", "2036-05-05", "--until", "2036-05-06T00:00:00Z"]
ACCOUNTS_FILE = f"""accounts:
  - account_id: "{HUB}"
    name: hub
    role: arn:aws:iam::{HUB}:role/parkbrake-reader
  - account_id: "{MEMBER}"
    name: ml-prod
    role: arn:aws:iam::{MEMBER}:role/parkbrake-reader
"""


def invoke(*args: str) -> Result:
    return CliRunner().invoke(parkbrake, list(args))


@pytest.fixture
def organisation(
    aws: str, ledger_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> dict[str, str]:
    """research runs in both accounts, vision in the member only; their events ingested at the hub."""
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    monkeypatch.setenv("PARKBRAKE_STACK", STACK)
    monkeypatch.setenv("PARKBRAKE_MEMBER_ACCOUNTS", MEMBER)
    monkeypatch.setattr("cli.usage.ingest.received_now", lambda: at(24 * 60))
    spoke = AccountSessions().clients(AccountAccess(MEMBER, (names.spoke_role_arn(STACK, MEMBER, REGION),)))
    (ours,) = launch(client_factory(aws)("ec2", None), "p4d.24xlarge", managed_tags(tenant="research"))
    (theirs,) = launch(spoke("ec2", REGION), "g5.12xlarge", managed_tags(tenant="research"))
    (vision,) = launch(spoke("ec2", REGION), "g5.xlarge", managed_tags(tenant="vision", pool="inference"))
    events: list[dict[str, Any]] = [
        state_change(ours, "running", at(0), account=HUB),
        state_change(ours, "stopped", at(90), account=HUB),
        state_change(theirs, "running", at(30), account=MEMBER),
        state_change(theirs, "stopped", at(150), account=MEMBER),
        state_change(vision, "running", at(60), account=MEMBER),
        state_change(vision, "stopped", at(105), account=MEMBER),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(event) + "\n" for event in [*events, events[3]]))  # one twice
    result = invoke("ledger", "ingest", str(path), "--output", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["inserted"], summary["duplicates"], summary["skipped"]) == (6, 1, [])
    (tmp_path / "accounts.yml").write_text(ACCOUNTS_FILE)
    return {"ours": ours, "theirs": theirs, "accounts": str(tmp_path / "accounts.yml")}


def test_the_hubs_invoice_shows_each_accounts_usage(
    organisation: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = invoke("ledger", "report", *WINDOW)
    assert result.exit_code == 0, result.output
    print(result.stdout)  # the closing note's invoice: `pytest -s` shows it
    title, *table = result.stdout.splitlines()
    assert title.startswith("GPU usage 2036-05-05 00:00")  # the window's title, as for one account
    assert max(len(line.rstrip()) for line in table) <= 80
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith(("research", "vision"))]
    accounts = {(row[0], row[2]) for row in rows if row[1] != "total"}  # the account beside each line
    assert accounts == {("research", HUB), ("research", MEMBER), ("vision", MEMBER)}

    data = json.loads(invoke("ledger", "report", *WINDOW, "--output", "json").stdout)
    research = next(item["invoice"] for item in data["tenants"] if item["tenant"] == "research")
    by_account = {line["account"]: line["subtotal_usd"] for line in research["lines"]}
    # 90 min of p4d.24xlarge at $32.7726/h in the hub; 2 h of g5.12xlarge at $5.672/h in the member
    assert by_account == {HUB: "49.158900", MEMBER: "11.344000"}
    assert research["total_usd"] == "60.502900"  # one tenant, one invoice, across both accounts


def test_account_keeps_one_accounts_lines(organisation: dict[str, str]) -> None:
    data = json.loads(invoke("ledger", "report", *WINDOW, "--account", MEMBER, "--output", "json").stdout)
    lines = [
        (item["tenant"], line["account"]) for item in data["tenants"] for line in item["invoice"]["lines"]
    ]
    assert sorted(lines) == [("research", MEMBER), ("vision", MEMBER)]
    refused = invoke("ledger", "report", *WINDOW, "--account", "2222-3333")
    assert refused.exit_code == 2
    assert "--account: '2222-3333' is not an AWS account id; give its 12 digits" in refused.output


def test_focus_sub_accounts_are_the_accounts_named_from_the_organisations_list(
    organisation: dict[str, str],
) -> None:
    from guardrails.focus_spec import row_problems

    result = invoke("ledger", "report", *WINDOW, "--format", "focus", "--accounts", organisation["accounts"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    subs = {
        (
            row["BillingAccountId"],
            row["SubAccountId"],
            row["SubAccountName"],
            row["SubAccountType"],
            row["RegionId"],
        )
        for row in rows
    }
    assert subs == {
        ("research", HUB, "hub", "AWS Account", REGION),
        ("research", MEMBER, "ml-prod", "AWS Account", REGION),
        ("vision", MEMBER, "ml-prod", "AWS Account", REGION),
    }
    assert all(row_problems(row, "1.3") == [] for row in rows)
