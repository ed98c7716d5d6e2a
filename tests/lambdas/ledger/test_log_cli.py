"""``parkbrake log`` end to end against a real ledger: why a host was stopped and who extended it,
filtered by host, tenant, time and kind, as text that fits 80 columns and as JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.main import parkbrake
from cli.options import parse_when
from guardrails.decisions import Decision
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore

HOST = "i-0123456789abcdef0"
OTHER = "i-0fedcba9876543210"
PERSON = "arn:aws:sts::123456789012:assumed-role/research-engineers/ada.lovelace@example.com"
NOW = datetime.now(UTC).replace(microsecond=0)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(parkbrake, ["log", *args])


@pytest.fixture
def logged(store: LedgerStore, ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host extended by a person, then stopped by the reaper; another tenant's host skipped."""
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    days_ago = lambda n: NOW - timedelta(days=n)  # noqa: E731
    DecisionLedger.of(store).append(
        [
            Decision("extend", PERSON, "training run needs 2 more hours to checkpoint", days_ago(3), HOST,
                     "research", {"by": "2h", "exempt_until": "2036-05-05T14:00:00Z"}),
            Decision("skip", "reaper", "exempt until 2036-05-05T14:00:00Z (its 8h cap (pool) ended at "
                     "2036-05-05T12:00:00Z)", days_ago(2), OTHER, "vision"),
            Decision("stop", "reaper", "past its 8h cap (pool) and its exemption: launched "
                     "2036-05-05T04:00:00Z, due at 2036-05-05T14:00:00Z, 5m over", days_ago(1), HOST,
                     "research", {"action": "stop", "rule": "past-deadline"}),
        ],
        origin="test",
    )  # fmt: skip


@pytest.mark.usefixtures("logged")
def test_why_was_this_host_stopped_and_who_extended_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # a pane 80 columns wide (piped output is 240: cli/console.py)
    result = invoke("--instance", HOST)

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # 80 columns, except an ARN longer than a line, which gets a line of its own, whole.
    assert [line for line in lines if len(line) > 80] == [PERSON]
    text = result.output
    assert text.index("extend") < text.index("stop")
    assert f"  extend  {HOST}  tenant=research" in text
    assert lines[lines.index(PERSON) - 1] == "  by"
    assert "training run needs 2 more hours" in text
    assert "past its 8h cap (pool)" in text
    assert "  by reaper" in lines
    assert OTHER not in text


@pytest.mark.usefixtures("logged")
def test_json_filters_by_tenant_since_and_kind() -> None:
    def ids(*args: str) -> list[tuple[str, str]]:
        result = invoke("--output", "json", *args)
        assert result.exit_code == 0, result.output
        return [(entry["kind"], entry["instance_id"]) for entry in json.loads(result.stdout)["decisions"]]

    assert ids("--tenant", "vision") == [("skip", OTHER)]
    assert ids("--since", "36h") == [("stop", HOST)]
    assert ids("--since", (NOW - timedelta(days=2, minutes=1)).isoformat()) == [
        ("skip", OTHER),
        ("stop", HOST),
    ]
    assert ids("--kind", "extend", "--kind", "stop") == [("extend", HOST), ("stop", HOST)]
    assert ids("--limit", "1") == [("stop", HOST)]
    (extension,) = json.loads(invoke("--output", "json", "--kind", "extend").stdout)["decisions"]
    assert extension["actor"] == PERSON
    assert extension["details"] == {"by": "2h", "exempt_until": "2036-05-05T14:00:00Z"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--instance", "web-1"], "--instance: 'web-1' is not an EC2 instance id"),
        (
            ["--since", "last tuesday"],
            "Error: invalid value for --since: 'last tuesday' is not a time — use a duration back from now",
        ),
        (["--kind", "stopped"], "--kind: 'stopped' unknown; the kinds are stop, stop-failed"),
    ],
)
def test_bad_input_names_the_flag_and_the_fix(args: list[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_ledger_without_the_decision_log_says_to_migrate(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", empty_database_url)
    result = invoke()
    assert result.exit_code == 1
    assert "no decision log yet; run `parkbrake ledger migrate`" in result.output


def test_a_database_that_is_down_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "PARKBRAKE_DATABASE_URL", "postgresql://parkbrake@127.0.0.1:1/ledger?connect_timeout=1"
    )
    result = invoke("--instance", HOST)
    assert result.exit_code == 1
    assert "cannot use the ledger database" in result.output
    assert "Traceback" not in result.output


def test_since_reads_durations_dates_and_times() -> None:
    assert parse_when("7d", NOW) == NOW - timedelta(days=7)
    assert parse_when("2036-05-05", NOW) == datetime(2036, 5, 5, tzinfo=UTC)
    assert parse_when("2036-05-05T12:00+02:00", NOW) == datetime(2036, 5, 5, 10, tzinfo=UTC)


MEMBER, OTHER_MEMBER = "111111111111", "222222222222"


@pytest.fixture
def swept_centrally(store: LedgerStore, ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub's central sweep stopped a host in each of two member accounts (the account in the details,
    as lambdas/engines/org_sweeping.py writes it); the hub's own deadline decided about a third."""
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    ago = lambda minutes: NOW - timedelta(minutes=minutes)  # noqa: E731
    DecisionLedger.of(store).append(
        [
            Decision("stop", "reaper", "past its 90m cap", ago(30), HOST, "research", {"account_id": MEMBER}),
            Decision("stop", "reaper", "past its 90m cap", ago(20), OTHER, "vision", {"account_id": OTHER_MEMBER}),
            Decision("skip", "deadline", "armed", ago(10), "i-0aaaaaaaaaaaaaaaa", "vision"),
        ],
        origin="central",
    )  # fmt: skip


@pytest.mark.usefixtures("swept_centrally")
def test_the_organisations_log_by_account_with_the_lists_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    one = invoke("--account", OTHER_MEMBER, "--output", "json")
    assert one.exit_code == 0, one.output
    assert [entry["instance_id"] for entry in json.loads(one.stdout)["decisions"]] == [OTHER]

    listed = tmp_path / "accounts.yml"
    listed.write_text(f"accounts:\n- account_id: '{MEMBER}'\n  name: ml-prod\n  role: reader\n")
    named = invoke("--accounts", str(listed))
    assert named.exit_code == 0, named.output
    # The header wraps at 80 columns; the account is named as the list names it.
    assert f"  stop  {HOST}  tenant=research\n  account=ml-prod  #1\n" in named.output
    assert OTHER not in named.output
    assert "i-0aaaaaaaaaaaaaaaa" not in named.output

    everything = invoke("--output", "json")
    assert len(json.loads(everything.stdout)["decisions"]) == 3


@pytest.mark.usefixtures("swept_centrally")
def test_a_bad_account_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = invoke("--account", "12345")
    assert result.exit_code == 2
    assert "'12345' is not an AWS account id; give its 12 digits" in result.output
    broken = tmp_path / "accounts.yml"
    broken.write_text("accounts:\n- account_id: '12345'\n  role: reader\n")
    listed = invoke("--accounts", str(broken))
    assert listed.exit_code == 2
    assert "accounts[0].account_id" in listed.output
