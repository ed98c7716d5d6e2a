"""``parkbrake park --now --accounts FILE``: each account's stack parked as one is parked today
(the demo stack seeded in two member accounts of moto). A dry run changes nothing in either; --yes
parks both; a third account without the stack is said so and is no failure."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cli.main import parkbrake
from guardrails import names
from lambdas.aws.assumed import AccountAccess, AccountSessions
from tests.cli.oncall.ops_fleet import REGION, STACK, demo_fleet, project_copy
from tests.cli.oncall.org_fleet import Member, accounts_file, members
from tests.moto_iam_auth import enforced_iam, role_arn


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = project_copy(tmp_path)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("PARKBRAKE_STACK", raising=False)
    return folder


def clients_of(member: Member) -> Any:
    factory = AccountSessions().clients(AccountAccess(member.account_id, (role_arn(member.account_id),)))
    return lambda service: factory(service, REGION)


def parked_value(member: Member) -> str:
    return str(
        clients_of(member)("ssm").get_parameter(Name=names.park_parameter(STACK))["Parameter"]["Value"]
    )


def desired(member: Member) -> list[int]:
    groups = clients_of(member)("autoscaling").describe_auto_scaling_groups()["AutoScalingGroups"]
    return sorted(group["DesiredCapacity"] for group in groups)


def park(*arguments: str) -> Result:
    return CliRunner().invoke(parkbrake, ["park", "--stack", STACK, "--now", *arguments])


@pytest.fixture
def two_stacks(aws: str, project: Path) -> tuple[list[Member], Path]:
    organisation = [Member(m.account_id, m.name, regions=(REGION,)) for m in members(3)]
    for member in organisation[:2]:  # the third account runs no stack dev
        demo_fleet.seed_fleet(clients_of(member), stack=STACK, region=REGION, now=datetime.now(UTC))
    return organisation, accounts_file(project, organisation)


def test_a_dry_run_across_two_accounts_changes_nothing(two_stacks: tuple[list[Member], Path]) -> None:
    organisation, path = two_stacks
    before = [desired(member) for member in organisation[:2]]
    result = park("--accounts", str(path), "--dry-run", "--output", "json")
    assert result.exit_code == 0, result.output
    places = json.loads(result.output)["places"]
    assert [(p["account"], p.get("dry_run"), "absent" in p) for p in places] == [
        ("team-01", True, False), ("team-02", True, False), ("team-03", None, True),
    ]  # fmt: skip
    assert all(action["status"] in ("planned", "unchanged") for p in places[:2] for action in p["actions"])
    assert [parked_value(member) for member in organisation[:2]] == ["false", "false"]
    assert [desired(member) for member in organisation[:2]] == before


def test_yes_parks_both_accounts(two_stacks: tuple[list[Member], Path]) -> None:
    organisation, path = two_stacks
    result = park("--accounts", str(path), "--yes")
    assert result.exit_code == 0, result.output
    assert [parked_value(member) for member in organisation[:2]] == ["true", "true"]
    assert all(set(desired(member)) == {0} for member in organisation[:2])
    assert "park --now dev (team-01 (" in result.output
    assert "team-03 (100000000003) us-east-1: not parked here: " in result.output


def test_accounts_without_now_is_refused(project: Path) -> None:
    result = CliRunner().invoke(parkbrake, ["park", "--stack", STACK, "--accounts", "a.yml"])
    assert result.exit_code == 2
    assert "--accounts and --org go with --now" in result.output
    assert len(result.output.splitlines()) == 1


def test_an_account_whose_regions_cannot_be_listed_is_a_failure_line(
    aws: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``regions: [all]`` through a denied role: the account's regions cannot be listed, so it is
    the last line and exit 1 (it was dropped, and alone it was an IndexError traceback)."""
    reachable = Member(members(1)[0].account_id, "team-01", regions=(REGION,))
    denied = Member("100000000002", "team-02", regions=("all",))
    demo_fleet.seed_fleet(clients_of(reachable), stack=STACK, region=REGION, now=datetime.now(UTC))
    alone = accounts_file(project, [denied]).rename(project / "alone.yml")
    both = accounts_file(project, [reachable, denied])
    ids = [reachable.account_id, denied.account_id]
    with enforced_iam(aws, ids, ids[:1]) as credentials:
        for variable, value in credentials.items():
            monkeypatch.setenv(variable, value)
        mixed = park("--accounts", str(both), "--dry-run")
        only = park("--accounts", str(alone), "--dry-run", "--output", "json")
    assert mixed.exit_code == 1, mixed.output
    assert "park --now dev (team-01 (" in mixed.output
    assert mixed.output.splitlines()[-1].startswith(
        f"error: team-02 ({denied.account_id}): cannot list its regions: "
    )
    assert only.exit_code == 1, only.output
    assert isinstance(only.exception, SystemExit)
    (line,) = json.loads(only.output)["errors"]
    assert line.startswith(f"team-02 ({denied.account_id}): cannot list its regions: cannot assume ")


def test_an_account_without_the_stack_fits_80_columns(two_stacks: tuple[list[Member], Path]) -> None:
    """The "not parked here" line names the park parameter looked for: wrapped at spaces, never cut."""
    _, path = two_stacks
    runner = CliRunner(env={"COLUMNS": "80"})
    result = runner.invoke(
        parkbrake, ["park", "--stack", STACK, "--now", "--accounts", str(path), "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line for line in lines if len(line) > 80] == []
    start = next(i for i, line in enumerate(lines) if line.startswith("team-03 (100000000003) us-east-1: "))
    said = " ".join(line.strip() for line in lines[start:])
    assert f"not parked here: found nothing of stack '{STACK}' in {REGION}: no park parameter " in said
    assert f" {names.park_parameter(STACK)}," in said
