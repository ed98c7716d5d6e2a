"""``parkbrake ledger`` end to end: migrate, ingest a file of native events, report csv/json/text,
budgets and runway, and clear errors for bad input and a database that is down."""

from __future__ import annotations

import csv
import io
import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from guardrail_fleet import (
    ACCOUNT,
    STACK,
    client_factory,
    create_deadline_group,
    deadline_schedules,
    launch,
    managed_tags,
    state_change,
)
from ledger_streams import at

from cli.main import parkbrake
from cli.usage.ingest import host_groups
from guardrails import names
from guardrails.ledger import StateChange
from lambdas.ledger.schema import function_files, migrations

WINDOW = ["--since", "2036-05-05", "--until", "2036-05-06T00:00:00Z"]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(parkbrake, list(args))


@pytest.fixture
def ledger_env(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    return ledger_url


def write_events(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    return path


@pytest.fixture(autouse=True)
def received_after_the_virtual_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ledger ingest`` receives the files a day after the tests' virtual clock starts (2036): their
    events are in its past, not from the future."""
    later = itertools.count()  # each ingest received after the one before (its outcomes are its own)
    monkeypatch.setattr("cli.usage.ingest.received_now", lambda: at(24 * 60, seconds=next(later)))


@pytest.fixture
def seeded(aws: str, ledger_env: str, tmp_path: Path) -> dict[str, str]:
    """Two tenants' GPU hosts and a CPU host in moto, their events ingested from a file."""
    ec2 = client_factory(aws)("ec2", None)
    (research,) = launch(ec2, "p4d.24xlarge", managed_tags(tenant="research", pool="training"))
    (product,) = launch(ec2, "g5.xlarge", managed_tags(tenant="product", pool="inference"))
    (cpu,) = launch(ec2, "m5.large", managed_tags())
    events = [
        state_change(research, "running", at(0)),
        state_change(research, "stopping", at(90)),  # 90 min × 8 GPUs
        state_change(product, "running", at(10)),
        state_change(product, "stopped", at(10, seconds=30)),  # 30 s, billed 60 s
        state_change(cpu, "running", at(0)),
    ]
    path = write_events(tmp_path / "events.jsonl", [*events, events[1]])  # one delivered twice
    result = invoke("ledger", "ingest", str(path), "--output", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    counts = (summary["read"], summary["inserted"], summary["duplicates"], len(summary["skipped"]))
    assert counts == (6, 4, 1, 1)
    outcomes = [(line["line"], line["outcome"], line["reason"]) for line in summary["lines"]]
    assert outcomes == [(1, "appended", ""), (2, "appended", ""), (3, "appended", ""), (4, "appended", ""),
                        (5, "skipped", "not an accelerator instance type"),
                        (6, "duplicate", "repeats line 2")]  # fmt: skip
    return {"research": research, "product": product, "file": str(path)}


def test_migrate_applies_then_reports_up_to_date(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", empty_database_url)
    first = invoke("ledger", "migrate")
    numbered = [f"{migration.version:04d}_{migration.name}" for migration in migrations()]
    applied = ", ".join(numbered + [f"functions/{function_file.name}" for function_file in function_files()])
    assert applied.startswith("0001_ledger")
    assert first.exit_code == 0
    applied_line, recorded = first.stdout.strip().splitlines()
    assert applied_line == f"applied {applied}"
    # One line for hundreds of prices: how many, per region (the JSON lists each).
    assert recorded.startswith("recorded ")
    assert "us-east-1 " in recorded
    again_json = invoke("ledger", "migrate", "--output", "json")
    assert json.loads(again_json.stdout)["prices_recorded"] == []
    again = invoke("ledger", "migrate", "--output", "json")
    assert json.loads(again.stdout) == {"applied": [], "prices_recorded": []}


def test_ingesting_a_file_again_appends_nothing(seeded: dict[str, str]) -> None:
    again = invoke("ledger", "ingest", seeded["file"], "--output", "json")
    assert (json.loads(again.stdout)["inserted"], json.loads(again.stdout)["duplicates"]) == (0, 5)
    text = invoke("ledger", "ingest", seeded["file"])
    assert "line 1: " in text.stdout
    assert "duplicate: already in the ledger" in text.stdout


def test_a_files_own_events_never_refuse_each_other_whatever_its_batches(
    aws: str, ledger_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ec2 = client_factory(aws)("ec2", None)
    (host,) = launch(ec2, "g5.xlarge", managed_tags(tenant="product", pool="inference"))
    (other,) = launch(ec2, "g5.xlarge", managed_tags(tenant="product", pool="inference"))
    # The last line is late: inside the interval the first two close. One settle per host.
    events = [state_change(host, "running", at(0)), state_change(other, "running", at(0)),
              state_change(host, "stopped", at(30)), state_change(other, "stopped", at(20)),
              state_change(host, "stopped", at(10))]  # fmt: skip
    monkeypatch.setattr("cli.usage.ingest.SETTLE_EVERY", 1)
    path = write_events(tmp_path / "events.jsonl", events)
    result = invoke("ledger", "ingest", str(path), "--batch-size", "1", "--output", "json")
    assert result.exit_code == 0, result.output
    assert [line["outcome"] for line in json.loads(result.stdout)["lines"]] == ["appended"] * 5
    report = json.loads(invoke("ledger", "report", *WINDOW, "--output", "json").stdout)
    assert report["tenants"][0]["accelerator_seconds"] == "1800.000"  # 10 minutes and 20, not 30 and 20


def test_a_backfill_is_settled_in_groups_of_whole_hosts() -> None:
    changes = [StateChange(f"e-{n}", host, "running", n, "us-east-1") for n, host in enumerate("aabacccbd")]
    groups = host_groups(changes, 3)
    assert [[change.instance_id for change in group] for group in groups] == [
        ["a", "a", "a"], ["b", "b", "c", "c", "c"], ["d"]
    ]  # fmt: skip
    assert sorted(change.event_id for group in groups for change in group) == sorted(
        c.event_id for c in changes
    )


def test_report_json_per_tenant_with_pool_and_instance_type(seeded: dict[str, str]) -> None:
    result = invoke("ledger", "report", *WINDOW, "--output", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    tenants = {entry["tenant"]: entry for entry in report["tenants"]}
    assert sorted(tenants) == ["product", "research"]
    research = tenants["research"]
    assert research["accelerator_seconds"] == "43200.000"  # 90 min × 8 GPUs; amounts are exact strings
    assert research["cost_usd"] == "49.158900"  # p4d.24xlarge at $32.7726/h for 90 minutes
    assert research["by_pool"] == [
        {"pool": "training", "accelerator_seconds": "43200.000", "cost_usd": "49.158900"}
    ]
    assert research["by_instance_type"][0]["instance_type"] == "p4d.24xlarge"
    product = tenants["product"]
    assert (product["accelerator_seconds"], product["cost_usd"]) == ("30.000", "0.016767")  # 60 s of $1.006/h
    assert product["breakdown"] == [
        {
            "pool": "inference",
            "instance_type": "g5.xlarge",
            "accelerator_seconds": "30.000",
            "cost_usd": "0.016767",
        }
    ]
    assert (product["status"], product["invoice"]["status"], product["invoice"]["invoice_id"]) == (
        "draft", "draft", "product-2036-05"
    )  # fmt: skip


def test_report_csv_is_an_invoice_for_one_tenant(seeded: dict[str, str]) -> None:
    result = invoke("ledger", "report", "--tenant", "product", *WINDOW, "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows == [{
        "invoice_id": "product-2036-05", "status": "draft", "timezone": "UTC", "tenant": "product", "period_start": "2036-05-05T00:00:00+00:00", "period_end": "2036-05-06T00:00:00+00:00",
        "pool": "inference", "instance_type": "g5.xlarge", "account": ACCOUNT, "region": "us-east-1",
        "pricing_model": "on-demand", "instance_hours": "0.016667", "accelerator_seconds": "30.000", "unit_price_usd_per_hour": "1.006000",
        "price_source": "prices.json", "price_valid_from": "", "price_basis": "on-demand", "currency": "USD",
        "subtotal_usd": "0.016767", "late": "false", "service_period": "",  # a window, not a month
    }]  # fmt: skip


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["report", "--tenant", "nobody"], "known tenants: product, research"),
        (["report", "--tenant", "product", "--tenant", "reserch"], "did you mean 'research'?"),
        (["runway", "--tenant", "prodcut"], "did you mean 'product'?"),
        (["close", "--period", "2036-05", "--tenant", "nobody", "--yes"], "known tenants: product, research"),
        (
            ["admit", "--tenant", "nobody", "--instance-type", "g5.xlarge", "--max-runtime", "1h"],
            "no tenant 'nobody'",
        ),
    ],
)
def test_an_unknown_tenant_is_one_line_naming_the_known_ones_and_exit_2(
    seeded: dict[str, str], command: list[str], said: str
) -> None:
    result = invoke("ledger", *command)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: --tenant: no tenant") or "--tenant: no tenant" in line
    assert said in line


def test_report_markdown_and_json_invoices_of_a_month_in_a_time_zone(seeded: dict[str, str]) -> None:
    markdown = invoke(
        "ledger", "report", "--month", "2036-05", "--timezone", "Europe/Berlin", "-o", "markdown"
    )
    assert markdown.exit_code == 0, markdown.output
    assert "## research: 2036-05-01 00:00 CEST to 2036-06-01 00:00 CEST (Europe/Berlin)" in markdown.stdout
    assert "Invoice research-2036-05, **draft**" in markdown.stdout
    assert (
        "| training | p4d.24xlarge | us-east-1 | on-demand | 1.500000 | 43200.000 | 32.772600 |"
        in markdown.stdout
    )
    assert "**Total: 49.158900 USD**" in markdown.stdout
    document = json.loads(invoke("ledger", "report", "--month", "2036-05", "--output", "json").stdout)
    research = next(tenant for tenant in document["tenants"] if tenant["tenant"] == "research")
    assert research["cost_usd"] == "49.158900"
    assert research["invoice"]["total_usd"] == "49.158900"
    assert research["invoice"]["lines"][0]["price_source"] == "prices.json"
    bad = invoke("ledger", "report", "--month", "May", "--timezone", "Mars/Olympus")
    assert bad.exit_code == 2
    assert "--timezone" in bad.output


def test_a_budget_in_a_time_zone_sets_the_tenants_months_and_can_be_removed(seeded: dict[str, str]) -> None:
    result = invoke("ledger", "budget", "research", "--limit-usd", "500", "--timezone", "Europe/Berlin")
    assert result.exit_code == 0, result.output
    assert "500.00 USD per month (Europe/Berlin)" in result.stdout
    (status,) = json.loads(invoke("ledger", "runway", "--tenant", "research", "-o", "json").stdout)
    assert status["timezone"] == "Europe/Berlin"
    assert "(Europe/Berlin)" in invoke("ledger", "runway", "--tenant", "research").stdout
    assert status["period_start"].endswith(
        ("T22:00:00+00:00", "T23:00:00+00:00")
    )  # local midnight, CEST or CET
    # The tenant's invoice takes its months from the budget's zone unless --timezone says otherwise.
    markdown = invoke("ledger", "report", "--tenant", "research", "--month", "2036-05", "-o", "markdown")
    assert "## research: 2036-05-01 00:00 CEST to 2036-06-01 00:00 CEST (Europe/Berlin)" in markdown.stdout
    assert "Invoice research-2036-05, **draft**" in markdown.stdout
    mixed = invoke("ledger", "report", "--tenant", "research", "--tenant", "product", "--month", "2036-05")
    assert mixed.exit_code == 0, mixed.output  # product has no budget: UTC, research Europe/Berlin
    assert invoke("ledger", "budget", "product", "--limit-usd", "5").exit_code == 0
    # Tenants whose months are in different zones: each its own month, each zone named.
    different = invoke(
        "ledger", "report", "--tenant", "research", "--tenant", "product", "--month", "2036-05", "--wide"
    )
    assert different.exit_code == 0, different.output
    assert "2036-05-01 00:00 – 2036-06-01 00:00 Europe/Berlin" in different.stdout
    assert "2036-05-01 00:00 – 2036-06-01 00:00 UTC" in different.stdout
    both = json.loads(
        invoke(
            "ledger",
            "report",
            "--tenant",
            "research",
            "--tenant",
            "product",
            "--month",
            "2036-05",
            "-o",
            "json",
        ).stdout
    )
    assert {entry["tenant"]: entry["timezone"] for entry in both["tenants"]} == {
        "research": "Europe/Berlin", "product": "UTC"
    }  # fmt: skip
    removed = invoke("ledger", "budget", "research", "--remove", "-o", "json")
    assert json.loads(removed.stdout)["removed"] is True
    (status,) = json.loads(invoke("ledger", "runway", "--tenant", "research", "-o", "json").stdout)
    assert status["limit_usd"] is None
    again = invoke("ledger", "budget", "research", "--remove")
    assert again.exit_code == 2
    assert "has no budget to remove" in again.output


def test_a_budget_change_re_arms_the_tenants_crossing_check_on_the_stack(
    aws: str, ledger_env: str, tmp_path: Path
) -> None:
    clients = client_factory(aws)
    create_deadline_group(clients)
    (host,) = launch(clients("ec2", None), "p4d.24xlarge", managed_tags(tenant="research", max_runtime="12h"))
    started = datetime.now(UTC) - timedelta(minutes=1)
    path = write_events(tmp_path / "running.jsonl", [state_change(host, "running", started)])
    assert invoke("ledger", "ingest", str(path)).exit_code == 0
    args = ["ledger", "budget", "research", "--limit-usd", "100", "--actions", "stop", "--stack", STACK]
    result = invoke(*args, "-o", "json")
    assert result.exit_code == 0, result.output
    crossing = json.loads(result.stdout)["crossing"]
    assert crossing["crossing"] == "armed"
    # $100 at $32.7726 an hour from the start: about 3 h 3 min after it.
    expected = started + timedelta(hours=100 / 32.7726)
    assert abs(datetime.fromisoformat(crossing["at"]) - expected) < timedelta(seconds=5)
    schedule = deadline_schedules(clients)[names.budget_crossing_schedule("research")]
    assert (
        schedule["Target"]["Arn"] == f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:parkbrake-{STACK}-budget"
    )
    assert schedule["Target"]["RoleArn"] == f"arn:aws:iam::{ACCOUNT}:role/parkbrake-{STACK}-scheduler"
    # An admission re-arms it too (the burn is the same: the same instant, to the billed second).
    admitted = invoke("ledger", "admit", "--tenant", "research", "--instance-type", "g5.xlarge",
                      "--max-runtime", "1h", "--stack", STACK, "-o", "json")  # fmt: skip
    assert admitted.exit_code == 0, admitted.output
    moved_to = datetime.fromisoformat(json.loads(admitted.stdout)["crossing"]["at"])
    assert abs(moved_to - datetime.fromisoformat(crossing["at"])) < timedelta(seconds=1)
    removed = invoke("ledger", "budget", "research", "--remove", "--stack", STACK)
    assert removed.exit_code == 0, removed.output
    assert "budget crossing check removed" in removed.stdout
    assert names.budget_crossing_schedule("research") not in deadline_schedules(clients)
    # Without a stack nothing is armed, and the output says so.
    unarmed = invoke("ledger", "budget", "research", "--limit-usd", "100", "--actions", "stop")
    assert "budget crossing check not armed: no --stack" in unarmed.stdout


ADMIT_P4D = (
    "ledger",
    "admit",
    "--tenant",
    "research",
    "--instance-type",
    "p4d.24xlarge",
    "--max-runtime",
    "90m",
)


def test_admit_prices_the_hosts_in_their_region_and_pricing_model(ledger_env: str) -> None:
    assert invoke("ledger", "budget", "research", "--limit-usd", "100").exit_code == 0
    args = ADMIT_P4D
    unpriced = invoke(*args, "--region", "eu-west-1", "--output", "json")
    assert unpriced.exit_code == 1
    assert "no price for p4d.24xlarge in eu-west-1" in json.loads(unpriced.stdout)["reason"]
    # A spot request with no spot price for its zone is reserved at the region's on-demand price.
    spot = invoke(
        *args, "--region", "us-west-2", "--pricing-model", "spot", "--zone", "us-west-2a", "-o", "json"
    )
    assert spot.exit_code == 0, spot.output
    assert json.loads(spot.stdout)["needed_usd"] == "49.158900"


def test_an_unknown_budget_time_zone_names_the_flag_and_an_example(ledger_env: str) -> None:
    result = invoke("ledger", "budget", "research", "--limit-usd", "5", "--timezone", "Europe/Berlim")
    assert result.exit_code == 2
    assert "--timezone: 'Europe/Berlim' is not an IANA time zone (for example Europe/Berlin" in result.output
    assert "--limit-usd: required" in invoke("ledger", "budget", "research").output


def test_report_text_is_a_table(seeded: dict[str, str]) -> None:
    result = invoke("ledger", "report", *WINDOW)
    assert result.exit_code == 0, result.output
    for text in ("research", "p4d.24xlarge", "12.000", "49.158900", "product", "UTC"):
        assert text in result.stdout


def test_a_malformed_file_is_refused_line_by_line_and_nothing_is_appended(
    aws: str, ledger_env: str, tmp_path: Path
) -> None:
    good = state_change("i-0123456789abcdef0", "running", at(0))
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps(good) + "\n{not json\n" + json.dumps({**good, "detail": {"state": "running"}}) + "\n"
    )
    result = invoke("ledger", "ingest", str(path))
    assert result.exit_code == 2
    assert "line 2:" in result.output
    assert "line 3:" in result.output
    assert "detail.instance-id: missing" in result.output
    assert "Traceback" not in result.output
    with psycopg.connect(ledger_env) as connection:
        assert connection.execute("SELECT count(*) FROM events").fetchone() == (0,)


def test_events_about_unknown_hosts_fail_the_ingest_after_the_rest_is_appended(
    aws: str, ledger_env: str, tmp_path: Path
) -> None:
    (known,) = launch(client_factory(aws)("ec2", None), "g5.xlarge", managed_tags())
    path = write_events(tmp_path / "events.jsonl", [state_change(known, "running", at(0)),
                                                     state_change("i-0fffffffffffffff0", "running", at(0))])  # fmt: skip
    result = invoke("ledger", "ingest", str(path))
    assert result.exit_code == 1
    assert "1 appended" in result.stdout
    assert "neither EC2 nor the ledger knows (i-0fffffffffffffff0)" in result.output


def test_budget_set_and_runway(seeded: dict[str, str]) -> None:
    result = invoke("ledger", "budget", "research", "--limit-usd", "5000", "--soft", "50,75%",
                    "--actions", "notify,deny,stop", "-o", "json")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"tenant": "research", "period": "month", "timezone": "UTC", "limit_usd": "5000.00",
                                         "soft_thresholds": [0.5, 0.75], "actions": ["deny", "notify", "stop"],
                                         "gpu_hours": None, "source": "hand",
                                         "crossing": {"tenant": "research", "crossing": "not armed",
                                                      "reason": "no --stack (or PARKBRAKE_STACK)"}}  # fmt: skip
    runway = {entry["tenant"]: entry for entry in json.loads(invoke("ledger", "runway", "-o", "json").stdout)}
    assert runway["research"]["limit_usd"] == "5000.00"  # amounts in JSON: exact decimal strings
    assert runway["research"]["spent_usd"] == "49.158900"
    assert runway["research"]["runway_seconds"] is None  # nothing running: nothing burns
    assert runway["product"]["limit_usd"] is None
    assert "research" in invoke("ledger", "runway").stdout


def test_invalid_budget_flags_are_all_reported(ledger_env: str) -> None:
    result = invoke("ledger", "budget", "research", "--limit-usd", "-3", "--soft", "50,120,x",
                    "--actions", "notify,explode")  # fmt: skip
    assert result.exit_code == 2
    for problem in ("--limit-usd: '-3'", "--soft: '120'", "--soft: 'x'", "--actions: 'explode'"):
        assert problem in result.output


def test_a_window_that_ends_before_it_starts_is_bad_input(ledger_env: str) -> None:
    result = invoke("ledger", "report", "--since", "2036-05-06", "--until", "2036-05-05")
    assert result.exit_code == 2
    assert "--until" in result.output
    assert invoke("ledger", "report", "--since", "last tuesday").exit_code == 2


def test_a_relative_window_counts_back_from_now(ledger_env: str) -> None:
    """`ledger report` takes `log`'s grammar: `--since 7d --until 12h` is [now − 7 d, now − 12 h)."""
    before = datetime.now(UTC)
    result = invoke("ledger", "report", "--since", "7d", "--until", "12h", "--output", "json")
    after = datetime.now(UTC)
    assert result.exit_code == 0, result.output
    window = json.loads(result.output)
    since, until = datetime.fromisoformat(window["since"]), datetime.fromisoformat(window["until"])
    assert before - timedelta(days=7) <= since <= after - timedelta(days=7)
    assert before - timedelta(hours=12) <= until <= after - timedelta(hours=12)


def test_a_database_that_is_down_is_one_clear_line_and_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", "postgresql://parkbrake@127.0.0.1:9/ledger")
    for command in (["ledger", "report"], ["ledger", "migrate"], ["ledger", "runway", "-o", "json"]):
        result = invoke(*command)
        assert result.exit_code == 1, command
        assert result.stderr.startswith("Error: cannot use the ledger database parkbrake@127.0.0.1:9/ledger")
        assert "Traceback" not in result.output


def test_no_database_configured_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARKBRAKE_DATABASE_URL", raising=False)
    monkeypatch.delenv("PARKBRAKE_DATABASE_SECRET_ARN", raising=False)
    result = invoke("ledger", "report")
    assert result.exit_code == 1
    assert "set PARKBRAKE_DATABASE_URL" in result.stderr


def test_admit_grants_with_an_id_refuses_with_the_numbers_and_release_gives_back(ledger_env: str) -> None:
    assert invoke("ledger", "budget", "research", "--limit-usd", "100").exit_code == 0
    args = ADMIT_P4D
    granted = invoke(*args, "--output", "json")
    assert granted.exit_code == 0, granted.output
    answer = json.loads(granted.stdout)
    assert (answer["granted"], answer["needed_usd"], answer["remaining_usd"]) == (
        True,
        "49.158900",
        "100.000000",
    )
    refused = invoke(*args, "--count", "2", "--output", "json")
    assert refused.exit_code == 1
    assert (json.loads(refused.stdout)["needed_usd"], json.loads(refused.stdout)["remaining_usd"]) == (
        "98.317800",
        "50.841100",
    )
    assert invoke("ledger", "release", str(answer["reservation_id"])).exit_code == 0
    assert invoke(*args, "--count", "2").exit_code == 0
    again = invoke("ledger", "release", str(answer["reservation_id"]))
    assert again.exit_code == 2
    assert "already released" in again.output
    bad = invoke(
        "ledger", "admit", "--tenant", "t", "--instance-type", "p4d.24xlarge", "--max-runtime", "soon"
    )
    assert bad.exit_code == 2
    assert (
        bad.output
        == "Error: invalid value for --max-runtime: 'soon' is not a duration — use 90m, 2h, 1h30m or 5400s\n"
    )


def test_a_line_of_the_wrong_type_or_encoding_is_refused_by_its_number(
    aws: str, ledger_env: str, tmp_path: Path
) -> None:
    good = state_change("i-0123456789abcdef0", "running", at(0))
    wrong_type = {**good, "detail": {"instance-id": "i-0123456789abcdef0", "state": ["running"]}}
    path = tmp_path / "bad.jsonl"
    path.write_bytes(
        json.dumps(good).encode() + b"\n" + json.dumps(wrong_type).encode() + b"\n"
        + b'{"id": "caf\xe9"}\n' + b"[" * 100_000 + b"\n"
    )  # fmt: skip
    result = invoke("ledger", "ingest", str(path))
    assert result.exit_code == 2, result.output
    assert "line 2: " in result.output
    assert "detail.state: ['running'] is not an EC2 instance state" in result.output
    assert "line 3: not UTF-8 text" in result.output
    assert "line 4: " in result.output
    assert "Traceback" not in result.output
    with psycopg.connect(ledger_env) as connection:
        assert connection.execute("SELECT count(*) FROM events").fetchone() == (0,)


@pytest.mark.parametrize("tenant", [" research", "", "research ", "re\nsearch", "x" * 64])
def test_a_tenant_no_host_can_carry_is_refused_wherever_a_tenant_is_named(
    ledger_env: str, tenant: str
) -> None:
    for args in (
        ["ledger", "budget", tenant, "--limit-usd", "100"],
        ["ledger", "report", "--tenant", tenant],
        ["ledger", "runway", "--tenant", tenant],
        ["ledger", "admit", "--tenant", tenant, "--instance-type", "g5.xlarge", "--max-runtime", "1h"],
        ["keys", "create", "--tenant", tenant],
        ["log", "--tenant", tenant],
    ):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "is not a tenant name" in result.output
        assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("limit", "message"),
    [("1e12", "above the largest the ledger stores"), ("0.001", "more than 2 decimals"),
     ("1000000000000", "above the largest"), ("12.345", "more than 2 decimals")],
)  # fmt: skip
def test_a_limit_the_ledger_cannot_store_is_one_line_and_exit_2(
    ledger_env: str, limit: str, message: str
) -> None:
    result = invoke("ledger", "budget", "research", "--limit-usd", limit)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert "psycopg" not in result.output
    assert invoke("ledger", "budget", "research", "--limit-usd", "999999999999.99").exit_code == 0


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("postgresql://ana:p@ss:w0rd-7Q@127.0.0.1:9/ledger", 2),  # an '@' psycopg takes for the host's start
        ("postgresql://ana:ss:w0rd-7Q@127.0.0.1:9/ledger", 1),
        ("postgresql://ana:p%40ss:w0rd-7Q@127.0.0.1:9/ledger", 1),
        ("host=127.0.0.1 port=9 user=ana password='p@ss:w0rd-7Q'", 1),
        ("postgresql://ana:p@ss:w0rd-7Q@[::1/ledger", 2),
    ],
)
def test_a_database_url_is_read_by_psycopg_and_shown_with_the_password_masked(
    monkeypatch: pytest.MonkeyPatch, url: str, code: int
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", url)
    result = invoke("ledger", "runway")
    assert result.exit_code == code, result.output
    assert len(result.output.strip().splitlines()) == 1
    for piece in ("w0rd-7Q", "ss:w0rd", "p%40ss"):
        assert piece not in result.output
    assert "Traceback" not in result.output


def test_report_focus_is_a_focus_dataset_with_the_mandatory_columns_and_types(seeded: dict[str, str]) -> None:
    from guardrails.focus_spec import MANDATORY_COLUMNS, row_problems

    result = invoke("ledger", "report", *WINDOW, "--format", "focus")
    assert result.exit_code == 0, result.output
    reader = csv.DictReader(io.StringIO(result.stdout))
    rows = list(reader)
    assert set(MANDATORY_COLUMNS) <= set(reader.fieldnames or ())
    assert len(MANDATORY_COLUMNS) == 21  # FOCUS 1.2: BillingAccountType is conditional
    assert sorted((row["BillingAccountId"], row["SkuId"]) for row in rows) == [
        ("product", "g5.xlarge"), ("research", "p4d.24xlarge")
    ]  # fmt: skip
    for row in rows:
        assert row_problems(row, "1.3") == [], row
        assert row["ChargeClass"] == ""  # null: a regular charge
        assert datetime.strptime(row["ChargePeriodStart"], "%Y-%m-%dT%H:%M:%SZ").year == 2036
        assert json.loads(row["Tags"]) == {
            "parkbrake:tenant": row["BillingAccountId"],
            "parkbrake:pool": {"research": "training", "product": "inference"}[row["BillingAccountId"]],
        }
        # The sub account is the AWS account the hosts ran in (the events' account).
        assert (row["SubAccountId"], row["SubAccountName"], row["SubAccountType"]) == (
            ACCOUNT, ACCOUNT, "AWS Account"
        )  # fmt: skip
        assert row["BillingCurrency"] == "USD"
    product = next(row for row in rows if row["BillingAccountId"] == "product")
    # The same figures as the CSV invoice: 30 s billed 60 s at 1.006 USD/h, one accelerator.
    assert (product["BilledCost"], product["PricingQuantity"], product["PricingUnit"]) == (
        "0.016767",
        "0.016667",
        "Hours",
    )
    assert (product["ConsumedQuantity"], product["ListUnitPrice"]) == ("0.008333", "1.006000")
    assert product["ChargePeriodStart"] == "2036-05-05T00:00:00Z"
    assert product["SkuPriceId"] == "g5.xlarge/us-east-1/on-demand/on-demand@first"
