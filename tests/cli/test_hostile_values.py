"""One hostile value (``parkbrake:max-runtime=9999999999d``) no longer stops a sweep, and the same value
in a flag or a variable is one line and exit 2, not a traceback."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from guardrail_fleet import (
    REGION,
    STACK,
    client_factory,
    create_deadline_group,
    latest_launch,
    launch,
    managed_tags,
    minutes,
    states,
)

from cli.main import parkbrake
from cli.reap import run_reap
from guardrails import names

HUGE = "9999999999d"


@pytest.fixture
def env(aws: str) -> dict[str, str]:
    made = client_factory(aws)
    made("ssm", REGION).put_parameter(Name=names.park_parameter(STACK), Value="false", Type="String")
    create_deadline_group(made)
    return {"PARKBRAKE_STACK": STACK, "PARKBRAKE_REGIONS": REGION, "AWS_REGION": REGION}


def test_reap_stops_every_host_due_and_judges_the_hostile_one_under_the_default_cap(
    aws: str, env: dict[str, str]
) -> None:
    clients = client_factory(aws)
    ec2 = clients("ec2", REGION)
    hostile = launch(ec2, "g5.xlarge", managed_tags(max_runtime=HUGE))[0]
    due = launch(ec2, "g5.xlarge", managed_tags(max_runtime="1h"))[0]
    within = launch(ec2, "g5.xlarge", managed_tags(max_runtime="3h"))[0]
    now = latest_launch(ec2, [hostile, due, within]) + minutes(100)  # past 1h and the default 90m

    report = run_reap(environ=env, clients=clients, now=now, dry_run=False, assume_yes=True, output="json")

    assert states(ec2, [hostile, due, within]) == {hostile: "stopped", due: "stopped", within: "running"}
    [row] = [row for row in report.as_dict()["hosts"] if row["instance_id"] == hostile]
    assert any("parkbrake:max-runtime" in finding["reason"] for finding in row["reports"]), row


def test_reap_through_the_cli_reports_the_hostile_tag_and_exits_0(aws: str, env: dict[str, str]) -> None:
    hostile = launch(client_factory(aws)("ec2", REGION), "g5.xlarge", managed_tags(max_runtime=HUGE))[0]
    result = CliRunner().invoke(parkbrake, ["reap", "--dry-run", "--output", "json"], env=env)
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)["hosts"]
    assert row["instance_id"] == hostile
    assert "Traceback" not in result.output


def test_extend_by_a_huge_duration_is_one_line_and_exit_2(aws: str, env: dict[str, str]) -> None:
    host = launch(client_factory(aws)("ec2", REGION), "g5.xlarge", managed_tags())[0]
    result = CliRunner().invoke(parkbrake, ["extend", host, "--by", HUGE, "--reason", "x", "--yes"], env=env)
    assert result.exit_code == 2
    assert "--by" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("variable", ["PARKBRAKE_DEFAULT_MAX_RUNTIME", "PARKBRAKE_MAX_RUNTIME_CEILING"])
@pytest.mark.parametrize("command", [["reap", "--dry-run"], ["status"]])
def test_a_huge_duration_in_the_environment_is_exit_2_naming_it(
    aws: str, env: dict[str, str], variable: str, command: list[str]
) -> None:
    result = CliRunner().invoke(
        parkbrake,
        [*command, "--stack", STACK] if command == ["status"] else command,
        env={**env, variable: HUGE},
    )
    assert result.exit_code == 2, result.output
    assert variable in result.output
    assert "Traceback" not in result.output


def test_status_shows_the_hostile_host_under_the_default_cap(aws: str, env: dict[str, str]) -> None:
    hostile = launch(client_factory(aws)("ec2", REGION), "g5.xlarge", managed_tags(max_runtime=HUGE))[0]
    result = CliRunner().invoke(
        parkbrake, ["status", "--stack", STACK, "--regions", REGION, "-o", "json"], env=env
    )
    assert result.exit_code == 0, result.output
    document: Any = json.loads(result.output)
    assert hostile in json.dumps(document)
