"""``parkbrake log --org`` against moto's Organizations and a real ledger: the organisation's
accounts are read from Organizations as ``status --org`` reads them (cli/oncall/organisation.py,
``ListAccounts`` by the management account or a delegated administrator), and the hub's decision log
is shown for those accounts only, each named as Organizations names it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner, Result

from cli.main import parkbrake
from guardrails.decisions import Decision
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore

NOW = datetime.now(UTC).replace(microsecond=0)
STRANGER = "999988887777"  # an account outside the organisation (a stale decision of a departed one)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(parkbrake, ["log", *args])


def host(number: int) -> str:
    return f"i-{number:017x}"


@pytest.fixture
def organisation(
    aws: str, store: LedgerStore, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """moto's organisation (the caller its management account) with research and sandbox; the hub's
    central sweep stopped a host in each, one in an account outside it, and the hub decided one itself."""
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    organizations = boto3.client("organizations")
    organizations.create_organization(FeatureSet="ALL")
    accounts = {
        name: organizations.create_account(AccountName=name, Email=f"{name}@example.com")[
            "CreateAccountStatus"
        ]["AccountId"]
        for name in ("research", "sandbox")
    }
    decisions = [
        Decision("stop", "reaper", "past its 90m cap", NOW - timedelta(minutes=30 - n), host(n), "vision",
                 {"account_id": account})
        for n, account in enumerate([accounts["research"], accounts["sandbox"], STRANGER], start=1)
    ]  # fmt: skip
    decisions.append(Decision("skip", "deadline", "armed", NOW - timedelta(minutes=5), host(9), "vision"))
    DecisionLedger.of(store).append(decisions, origin="central")
    return accounts


def shown(result: Result) -> list[str]:
    assert result.exit_code == 0, result.output
    return [entry["instance_id"] for entry in json.loads(result.stdout)["decisions"]]


def test_log_org_shows_the_organisations_accounts_by_their_names(
    organisation: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = invoke("--org")
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    # Each header names the account as Organizations does, wrapped at 80 columns.
    assert f"{host(1)}  tenant=vision  account=research\n  #1\n" in result.output
    assert f"{host(2)}  tenant=vision  account=sandbox\n  #2\n" in result.output
    assert host(3) not in result.output  # outside the organisation
    assert host(9) not in result.output  # the hub's own guardrail names no account
    assert shown(invoke("--org", "--output", "json")) == [host(1), host(2)]


def test_the_organisations_accounts_are_selected_as_c7n_org_selects(organisation: dict[str, str]) -> None:
    assert shown(invoke("--org", "--not-account", "sandbox", "--output", "json")) == [host(1)]
    assert shown(invoke("--org", "-a", "sandbox", "--output", "json")) == [host(2)]
    assert shown(invoke("--org", "-a", organisation["research"], "--output", "json")) == [host(1)]
    unknown = invoke("--org", "-a", "nosuch")
    assert unknown.exit_code == 2
    assert "nosuch: no such account name or id in the account list" in unknown.output


@pytest.mark.usefixtures("organisation")
def test_flags_that_cannot_go_together_are_one_line_and_exit_2(tmp_path: Path) -> None:
    listed = tmp_path / "accounts.yml"
    listed.write_text("accounts:\n- account_id: '111111111111'\n  role: reader\n")
    both = invoke("--org", "--accounts", str(listed))
    assert both.exit_code == 2
    assert (
        both.output.strip()
        .splitlines()[-1]
        .endswith("--accounts and --org: give one (a c7n-org account list, or the organisation's)")
    )
    alone = invoke("--not-account", "sandbox")
    assert alone.exit_code == 2
    assert "--not-account leaves an account out of --accounts FILE or --org: add one" in alone.output


def test_an_organisation_that_cannot_be_listed_is_one_line_naming_the_fix(
    aws: str, store: LedgerStore, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)  # no organisation in this account
    result = invoke("--org")
    assert result.exit_code == 1
    (line,) = result.output.splitlines()  # moto lists no account where there is no organisation
    assert line.startswith("Error: --org: cannot list the organisation's accounts (")
    assert "management account or a delegated administrator" in result.output
    assert "Traceback" not in result.output
