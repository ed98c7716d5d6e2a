"""``parkbrake reap`` against moto: the table, --dry-run, confirmation, JSON, and errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from guardrail_fleet import (
    REGION,
    STACK,
    client_factory,
    latest_launch,
    launch,
    managed_tags,
    minutes,
    states,
)

from cli.main import parkbrake
from cli.reap import run_reap
from guardrails import names


@pytest.fixture
def env(aws: str) -> dict[str, str]:
    """A deployed stack: its park parameter exists (the Pulumi program writes it)."""
    deploy_stack(aws, REGION)
    return {"PARKBRAKE_STACK": STACK, "PARKBRAKE_REGIONS": REGION}


def deploy_stack(aws: str, region: str) -> None:
    client_factory(aws)("ssm", region).put_parameter(
        Name=names.park_parameter(STACK), Value="false", Type="String", Overwrite=True
    )


def invoke(args: list[str], env: dict[str, str], stdin: str | None = None) -> Any:
    return CliRunner().invoke(parkbrake, ["reap", *args], env=env, input=stdin, catch_exceptions=False)


def test_dry_run_prints_what_it_would_stop_and_why(
    aws: str, env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    clients = client_factory(aws)
    ec2 = clients("ec2", REGION)
    due = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))[0]
    within = launch(ec2, "g5.xlarge", managed_tags(max_runtime="3h"))[0]
    untagged = launch(ec2, "p3.2xlarge", {"Name": "notebook"})[0]
    now = latest_launch(ec2, [due, within, untagged]) + minutes(100)

    report = run_reap(
        environ={**env, "AWS_REGION": REGION},
        clients=clients,
        now=now,
        dry_run=True,
        assume_yes=False,
        output="text",
    )

    assert [v.host.instance_id for v in report.plan.to_stop] == [due]
    assert set(states(ec2, [due, within, untagged]).values()) == {"running"}
    printed = capsys.readouterr().out
    assert "would stop" in printed
    assert "past its 1h30m cap (tag) by 10m" in printed
    assert "within its 3h cap (tag)" in printed
    assert "reported only" in printed


def test_dry_run_table_through_the_cli(aws: str, env: dict[str, str]) -> None:
    ec2 = client_factory(aws)("ec2", REGION)
    untagged = launch(ec2, "g4dn.xlarge", {"Name": "forgotten"})[0]
    result = invoke(["--dry-run"], {**env, "PARKBRAKE_REAP_UNTAGGED": "true"})
    assert result.exit_code == 0, result.output
    assert untagged in result.output
    assert "would stop" in result.output
    assert "untagged accelerator host" in result.output
    assert "Dry run: would stop 1 of 1 host; nothing changed." in result.output
    assert states(ec2, [untagged]) == {untagged: "running"}


def test_stops_with_yes_and_reports_json(aws: str, env: dict[str, str]) -> None:
    ec2 = client_factory(aws)("ec2", REGION)
    untagged = launch(ec2, "g4dn.xlarge", {"Name": "forgotten"})[0]
    result = invoke(["--yes", "--output", "json"], {**env, "PARKBRAKE_REAP_UNTAGGED": "true"})
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["stopped"] == [untagged]
    assert document["hosts"][0]["rule"] == "untagged-accelerator"
    assert states(ec2, [untagged]) == {untagged: "stopped"}


def test_asks_before_stopping_and_a_no_changes_nothing(aws: str, env: dict[str, str]) -> None:
    ec2 = client_factory(aws)("ec2", REGION)
    untagged = launch(ec2, "g4dn.xlarge", {"Name": "forgotten"})[0]
    # CliRunner's stdin is not a terminal: without --yes the command refuses rather than guess.
    result = CliRunner().invoke(parkbrake, ["reap"], env={**env, "PARKBRAKE_REAP_UNTAGGED": "true"})
    assert result.exit_code == 2
    assert "Refusing without --yes" in result.output
    assert states(ec2, [untagged]) == {untagged: "running"}


def test_nothing_to_stop(aws: str, env: dict[str, str]) -> None:
    result = invoke([], env)
    assert result.exit_code == 0, result.output
    assert "No running GPU hosts." in result.output
    assert "Nothing to stop." in result.output


def test_bad_settings_exit_2_naming_the_variable(aws: str, env: dict[str, str]) -> None:
    result = CliRunner().invoke(
        parkbrake, ["reap", "--dry-run"], env={**env, "PARKBRAKE_DEFAULT_MAX_RUNTIME": "90 minutes"}
    )
    assert result.exit_code == 2
    assert "PARKBRAKE_DEFAULT_MAX_RUNTIME" in result.output
    assert "Traceback" not in result.output


def test_an_unknown_stack_is_an_error_not_an_empty_sweep(aws: str, env: dict[str, str]) -> None:
    result = CliRunner().invoke(parkbrake, ["reap", "--stack", "staging", "--dry-run"], env=env)

    assert result.exit_code == 2
    assert "stack 'staging' is not deployed in us-east-1: no /parkbrake/staging/parked — " in result.output
    assert "Traceback" not in result.output


def test_region_option_and_the_stack_files_region_are_honoured(
    aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = "eu-west-1"
    deploy_stack(aws, other)
    host = launch(client_factory(aws)("ec2", other), "g4dn.xlarge", {"Name": "forgotten"})[0]
    environment = {"PARKBRAKE_STACK": STACK, "PARKBRAKE_REGIONS": "", "AWS_REGION": REGION}

    by_option = invoke(["--region", other, "--dry-run"], environment)
    assert by_option.exit_code == 0, by_option.output
    assert host in by_option.output

    monkeypatch.chdir(tmp_path)
    (tmp_path / f"Pulumi.{STACK}.yaml").write_text(f"config:\n  aws:region: {other}\n")
    by_stack_file = invoke(["--dry-run"], environment)
    assert by_stack_file.exit_code == 0, by_stack_file.output
    assert host in by_stack_file.output

    mistyped = CliRunner().invoke(parkbrake, ["reap", "--region", "eu-wset-1"], env=environment)
    assert mistyped.exit_code == 2
    assert "unknown AWS region 'eu-wset-1' (from --region); did you mean eu-west-1?" in mistyped.output


def test_the_table_keeps_ids_and_timestamps_whole_at_80_columns(aws: str, env: dict[str, str]) -> None:
    ec2 = client_factory(aws)("ec2", REGION)
    hosts = [launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))[0] for _ in range(2)]

    result = invoke(["--dry-run"], {**env, "COLUMNS": "80"})

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    for host in hosts:
        assert any(line.startswith(host + " ") for line in lines), result.output
    assert re.search(r" \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", result.output), result.output


def test_a_listing_error_is_one_clear_line_and_a_failure(aws: str, env: dict[str, str]) -> None:
    from aws_fault_proxy import FaultProxy

    launch(client_factory(aws)("ec2", REGION), "g5.xlarge", managed_tags(max_runtime="90m"))
    with FaultProxy(aws) as proxy:
        proxy.fail("DescribeInstances", "UnauthorizedOperation", "You are not authorized.", status=403)
        for output in ("text", "json"):
            result = CliRunner().invoke(
                parkbrake, ["reap", "--dry-run", "-o", output], env={**env, "AWS_ENDPOINT_URL": proxy.url}
            )
            assert result.exit_code == 1
            assert result.output.splitlines() == [
                f"Error: could not list GPU hosts in {REGION}: UnauthorizedOperation: You are not authorized."
            ]


def test_a_listing_error_in_a_real_process_is_said_once(aws: str, env: dict[str, str]) -> None:
    """Outside pytest no handler catches the sweep's log lines (Lambda's, for CloudWatch): the command's
    own line must be the only one, not Python's last-resort copy of the log line beside it."""
    from aws_fault_proxy import FaultProxy

    with FaultProxy(aws) as proxy:
        proxy.fail("DescribeInstances", "UnauthorizedOperation", "You are not authorized.", status=403)
        done = subprocess.run(
            [sys.executable, "-c", "from cli.main import main; main()", "reap", "--dry-run"],
            env={**os.environ, **env, "AWS_ENDPOINT_URL": proxy.url}, cwd=Path(__file__).parents[2],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"Error: could not list GPU hosts in {REGION}: UnauthorizedOperation: You are not authorized."
    ]


def test_unmanaged_hosts_are_shown_with_their_burn_rate(aws: str, env: dict[str, str]) -> None:
    ec2 = client_factory(aws)("ec2", REGION)
    launch(ec2, "g5.xlarge", {"Name": "notebook"})
    launch(ec2, "g5.xlarge", {**managed_tags(), "parkbrake:managed": "false"})
    result = invoke(["--dry-run"], env)
    assert result.exit_code == 0, result.output
    assert "2 GPU hosts without parkbrake:managed=true, burning $2.01/hour" in result.output
    assert "report" in result.output
