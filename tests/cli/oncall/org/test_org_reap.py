"""``parkbrake reap --dry-run --accounts FILE``: the sweep's own judgement in every account and
region, the account beside every host, nothing stopped; without --dry-run refused (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.main import parkbrake
from lambdas.aws.assumed import AccountAccess, AccountSessions
from tests.cli.oncall.org_fleet import accounts_file, members, seed_hosts
from tests.moto_iam_auth import enforced_iam, role_arn


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for variable in ("PARKBRAKE_REGIONS", "PARKBRAKE_STACK", "PARKBRAKE_DATABASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PARKBRAKE_REAP_UNTAGGED", "true")  # the untagged hosts would be stopped
    return tmp_path


def reap(*arguments: str) -> Result:
    return CliRunner().invoke(parkbrake, ["reap", *arguments])


def running(account: str, region: str, role: str = "reader") -> list[str]:
    ec2 = AccountSessions().clients(AccountAccess(account, (role_arn(account, role),)))("ec2", region)
    answer = ec2.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["running"]}])
    return sorted(i["InstanceId"] for r in answer["Reservations"] for i in r["Instances"])


def test_a_dry_run_judges_every_account_and_changes_nothing(aws: str, folder: Path) -> None:
    organisation = members(3)
    made = seed_hosts(organisation, hosts=2)
    result = reap("--dry-run", "--accounts", str(accounts_file(folder, organisation)), "--output", "json")
    assert result.exit_code == 0, result.output
    judged = json.loads(result.output)
    would_stop = {(host["account"], host["instance_id"]) for host in judged["would_stop"]}
    assert would_stop == {(m.name, i) for m in organisation for i in made[m.account_id]}
    assert judged["accounts"] == 3
    assert judged["errors"] == []
    for index, member in enumerate(organisation):  # every host still runs
        assert running(member.account_id, member.regions[index]) == made[member.account_id]
    text = reap("--dry-run", "--accounts", str(accounts_file(folder, organisation)))
    assert (
        text.output.splitlines()[-1]
        == "Dry run: would stop 6 and retire 0 of 6 hosts in 3 accounts; nothing changed."
    )
    for member in organisation:
        for instance in made[member.account_id]:
            (row,) = [line for line in text.output.splitlines() if instance in line]
            assert member.name in row


def test_without_dry_run_it_is_refused_before_any_call(folder: Path) -> None:
    result = reap("--accounts", "accounts.yml", "--yes")
    assert result.exit_code == 2
    assert result.output.startswith("Error: reap across accounts only judges: add --dry-run")
    assert len(result.output.splitlines()) == 1


def test_a_denied_account_is_its_line_and_the_others_are_judged(
    aws: str, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    organisation = members(2)
    made = seed_hosts(organisation)
    path = accounts_file(folder, organisation)
    ids = [member.account_id for member in organisation]
    with enforced_iam(aws, ids, ids[:1]) as credentials:
        for variable, value in credentials.items():
            monkeypatch.setenv(variable, value)
        result = reap("--dry-run", "--accounts", str(path), "--output", "json")
    assert result.exit_code == 1
    judged = json.loads(result.output)
    assert [host["instance_id"] for host in judged["would_stop"]] == made[ids[0]]
    (line,) = judged["errors"]
    assert line.startswith(f"team-02 ({ids[1]}): cannot assume {role_arn(ids[1])}: AccessDenied")


def test_the_answer_fits_80_columns_with_three_digit_counts(aws: str, folder: Path) -> None:
    organisation = members(10)
    seed_hosts(organisation, hosts=10)
    path = accounts_file(folder, organisation)
    text = CliRunner(env={"COLUMNS": "80"}).invoke(parkbrake, ["reap", "--stack", "dev", "--dry-run",
                                                                "--accounts", str(path)])  # fmt: skip
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert [line for line in lines if len(line) > 80] == []
    assert " ".join(lines[-2:]) == (
        "Dry run: would stop 100 and retire 0 of 100 hosts in 10 accounts; nothing changed."
    )
