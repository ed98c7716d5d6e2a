"""``parkbrake schedule list --accounts FILE``: the stack's schedules in every account and region,
the account beside each; an account without the stack's group has none; a denied one is its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.main import parkbrake
from guardrails import names
from lambdas.aws.assumed import AccountAccess, AccountSessions
from tests.cli.oncall.org_fleet import Member, accounts_file, members
from tests.moto_iam_auth import enforced_iam, role_arn

STACK = "dev"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PARKBRAKE_STACK", raising=False)
    return tmp_path


def schedule_list(*arguments: str) -> Result:
    return CliRunner().invoke(parkbrake, ["schedule", "list", "--stack", STACK, *arguments])


def nightly_start(member: Member, region: str, name: str) -> None:
    scheduler = AccountSessions().clients(AccountAccess(member.account_id, (role_arn(member.account_id),)))(
        "scheduler", region
    )
    group = names.schedule_group(STACK)
    scheduler.create_schedule_group(Name=group)
    scheduler.create_schedule(
        Name=name,
        GroupName=group,
        ScheduleExpression="cron(0 7 ? * MON-FRI *)",
        ScheduleExpressionTimezone="UTC",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": f"arn:aws:lambda:{region}:{member.account_id}:function:parkbrake-{STACK}-launcher",
            "RoleArn": role_arn(member.account_id, "scheduler"),
            "Input": json.dumps({"pool": "training", "desired": 2}),
        },
    )


def test_every_account_s_schedules_with_the_account_beside_each(aws: str, folder: Path) -> None:
    first, second, third = members(3)
    nightly_start(first, "us-east-1", "morning-training")
    nightly_start(second, "eu-west-1", "morning-eval")
    result = schedule_list(
        "--accounts", str(accounts_file(folder, [first, second, third])), "--output", "json"
    )
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert [(s["account"], s["region"], s["name"]) for s in listed["schedules"]] == [
        ("team-01", "us-east-1", "morning-training"),
        ("team-02", "eu-west-1", "morning-eval"),
    ]
    assert listed["errors"] == []
    text = schedule_list("--accounts", str(accounts_file(folder, [first, second, third])))
    (row,) = [line for line in text.output.splitlines() if "morning-eval" in line]
    assert "team-02" in row


def test_a_denied_account_is_its_line(aws: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = members(2)
    nightly_start(first, "us-east-1", "morning-training")
    path = accounts_file(folder, [first, second])
    with enforced_iam(aws, [first.account_id, second.account_id], [first.account_id]) as credentials:
        for variable, value in credentials.items():
            monkeypatch.setenv(variable, value)
        result = schedule_list("--accounts", str(path))
    # moto, with authorisation on, refuses every EventBridge Scheduler request signed with assumed
    # credentials (SignatureDoesNotMatch), so team-01 cannot be read here either: only the denied
    # account's line is asserted, and that neither failure is a crash. The other accounts being
    # answered beside a denied one is shown by status and reap (test_org_status.py, test_org_reap.py).
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert (
        f"error: team-02 ({second.account_id}): cannot assume {role_arn(second.account_id)}: AccessDenied"
        in " ".join(errors)
    )
