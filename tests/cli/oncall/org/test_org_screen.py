"""``parkbrake status --org`` as on-call sees it: a real process on an 80×24 pseudo-terminal over a
test organisation in moto (accounts made through Organizations, one whose role the caller may not
assume). The account is beside every host, no line is wider than 80 columns, and the denied
account's line is on the last screen, last, with exit 1."""

from __future__ import annotations

import os
from pathlib import Path

import boto3

from tests.cli.oncall.demo_terminal import Demo, on_terminal
from tests.cli.oncall.org_fleet import Member, seed_hosts
from tests.conftest import REPO_ROOT
from tests.moto_iam_auth import enforced_iam, role_arn

COLUMNS, ROWS = 80, 24
TEAMS = ("research", "inference", "platform", "finance")


def test_status_org_at_80_columns_names_the_account_of_every_host_and_the_denied_one(
    aws: str, tmp_path: Path
) -> None:
    organizations = boto3.client("organizations")
    organizations.create_organization(FeatureSet="ALL")
    ids = [
        organizations.create_account(Email=f"{team}@example.com", AccountName=team)["CreateAccountStatus"][
            "AccountId"
        ]
        for team in TEAMS
    ]
    organisation = [
        Member(account, team, regions=("us-east-1", "us-west-2"))
        for account, team in zip(ids, TEAMS, strict=True)
    ]
    made = seed_hosts(organisation, hosts=2)
    listed = [account["Id"] for account in organizations.list_accounts()["Accounts"]]
    with enforced_iam(
        aws, listed, [a for a in listed if a != ids[3]], caller_may=["organizations:List*"]
    ) as keys:
        environ = {key: value for key, value in os.environ.items() if not key.startswith("PARKBRAKE_")}
        demo = Demo({**environ, **keys, "PYTHONPATH": str(REPO_ROOT)}, tmp_path)
        arguments = ("status", "--org", "--org-role", "reader", "--not-account", "master")
        arguments += ("--regions", "us-east-1,us-west-2")
        exit_status, shown = on_terminal(demo, COLUMNS, *arguments, rows=ROWS, term="xterm")
    lines = shown.splitlines()
    print("\n".join(lines[-ROWS:]))  # the closing note's screen: pytest -s shows it
    assert exit_status == 1, shown
    assert [line for line in lines if len(line) > COLUMNS] == []
    for member in organisation[:3]:
        for instance in made[member.account_id]:
            (row,) = [line for line in lines if instance in line]
            assert member.name in row
    assert not any(instance in shown for instance in made[ids[3]])
    # The answer last: the denied account's line, wrapped at 80 columns, ends the last screen.
    (start,) = [index for index, line in enumerate(lines) if line.startswith("error: ")]
    denied = " ".join(line.strip() for line in lines[start:])
    assert denied.startswith(f"error: finance ({ids[3]}): cannot assume {role_arn(ids[3])}: AccessDenied")
    assert start >= len(lines) - ROWS
    assert lines[start - 4].startswith("GPU fleet in 4 accounts × us-east-1, us-west-2 at ")
