"""``parkbrake status --accounts FILE`` and ``--org`` on moto's server: every member account in each
of its regions through its role, one answer with the account beside every host, a denied role one
line and exit 1 while the other accounts are answered."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner, Result

from cli.main import parkbrake
from guardrails import names
from lambdas.aws.assumed import AccountAccess, AccountSessions
from tests.cli.oncall.org_fleet import REGIONS, Member, accounts_file, members, seed_hosts
from tests.moto_iam_auth import enforced_iam, role_arn


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # no stack files here: status reads only AWS
    for variable in ("PARKBRAKE_REGIONS", "PARKBRAKE_STACK", "PARKBRAKE_DATABASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path


def status(*arguments: str) -> Result:
    return CliRunner().invoke(parkbrake, ["status", *arguments])


def hosts_by_account(result: Result) -> dict[str, list[str]]:
    report = json.loads(result.output)
    found: dict[str, list[str]] = {}
    for host in report["hosts"]:
        found.setdefault(host["account"], []).append(host["instance_id"])
    return {account: sorted(ids) for account, ids in found.items()}


def test_fifty_accounts_in_three_regions_are_one_answer(aws: str, folder: Path) -> None:
    organisation = members(50)
    made = seed_hosts(organisation, hosts=2)
    result = status("--accounts", str(accounts_file(folder, organisation)), "--output", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["accounts"] == 50
    assert report["regions"] == list(REGIONS)
    assert report["errors"] == []
    assert hosts_by_account(result) == {member.name: made[member.account_id] for member in organisation}
    assert boto3.client("ec2").describe_instances()["Reservations"] == []  # the caller's own: none


def test_a_denied_role_is_one_line_and_the_other_accounts_are_answered(
    aws: str, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    organisation = members(3)
    made = seed_hosts(organisation)
    path = accounts_file(folder, organisation)
    ids = [member.account_id for member in organisation]
    with enforced_iam(aws, ids, ids[:2]) as credentials:
        for variable, value in credentials.items():
            monkeypatch.setenv(variable, value)
        result = status("--accounts", str(path), "--output", "json")
        text = status("--accounts", str(path))
    assert result.exit_code == 1
    assert hosts_by_account(result) == {member.name: made[member.account_id] for member in organisation[:2]}
    (line,) = json.loads(result.output)["errors"]
    assert line.startswith(f"team-03 ({ids[2]}): cannot assume {role_arn(ids[2])}: AccessDenied")
    assert text.exit_code == 1
    assert text.output.splitlines()[-1].startswith(f"error: team-03 ({ids[2]}): cannot assume ")


def test_a_chain_reaches_its_last_account(aws: str, folder: Path) -> None:
    target, hop = members(1)[0], "100000000099"
    made = seed_hosts([target])
    chain = [role_arn(hop, "hub"), role_arn(target.account_id)]
    path = accounts_file(folder, [target], chains={target.account_id: chain})
    result = status("--accounts", str(path), "--output", "json")
    assert result.exit_code == 0, result.output
    assert hosts_by_account(result) == {"team-01": made[target.account_id]}


def test_org_reads_the_accounts_from_organizations(aws: str, folder: Path) -> None:
    organizations = boto3.client("organizations")
    organizations.create_organization(FeatureSet="ALL")
    created = [
        organizations.create_account(Email=f"{name}@example.com", AccountName=name)["CreateAccountStatus"]
        for name in ("research", "inference")
    ]
    organisation = [
        Member(status["AccountId"], status["AccountName"], role="parkbrake-oncall", regions=("us-east-1",))
        for status in created
    ]
    made = seed_hosts(organisation)
    result = status("--org", "--regions", "us-east-1", "--output", "json")
    assert result.exit_code == 0, result.output
    found = hosts_by_account(result)
    assert {name: found[name] for name in ("research", "inference")} == {
        member.name: made[member.account_id] for member in organisation
    }
    narrowed = status("--org", "--regions", "us-east-1", "-a", "research", "--output", "json")
    assert set(hosts_by_account(narrowed)) == {"research"}


def test_org_without_an_organisation_is_one_line(aws: str, folder: Path) -> None:
    result = status("--org", "--regions", "us-east-1")
    assert result.exit_code == 1
    assert result.output.startswith("Error: --org: cannot list the organisation's accounts (")
    assert len(result.output.splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "Error: --accounts missing.yml: cannot read it ("),
        ("accounts: [unclosed\n", "Error: missing.yml is not valid YAML: "),
    ],
    ids=["missing", "not-yaml"],
)
def test_a_bad_accounts_file_is_one_line_exit_2(folder: Path, content: str | None, expected: str) -> None:
    if content is not None:
        (folder / "missing.yml").write_text(content, encoding="utf-8")
    result = status("--accounts", "missing.yml", "--regions", "us-east-1")
    assert result.exit_code == 2
    assert result.output.startswith(expected)
    assert len(result.output.splitlines()) == 1


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--accounts", "a.yml", "--org"], "--accounts and --org"),
        (["-a", "team-01"], "--account, --tag and --not-account"),
        (["--org", "-t", "type:prod"], "--tag selects"),
        (["--org", "--concurrency", "0"], "--concurrency 0"),
        (["--org-role", "reader"], "--org-role reader"),  # it was ignored without --org
        (["--accounts", "a.yml", "--org-role", "reader"], "--org-role reader"),  # the list names roles
    ],
)
def test_flags_that_cannot_go_together_are_one_line_exit_2(
    folder: Path, arguments: list[str], named: str
) -> None:
    result = status(*arguments, "--regions", "us-east-1")
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: {named}")
    assert len(result.output.splitlines()) == 1


def test_an_org_role_arn_of_one_account_is_one_line_exit_2(aws: str, folder: Path) -> None:
    """An ARN without {account_id} would enter every member as that one account (each answered with
    its hosts); it is refused, naming the option and the fix."""
    organizations = boto3.client("organizations")
    organizations.create_organization(FeatureSet="ALL")
    organizations.create_account(Email="research@example.com", AccountName="research")
    fixed = "arn:aws:iam::100000000001:role/parkbrake-oncall"
    result = status("--org", "--org-role", fixed, "--regions", "us-east-1")
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: --org-role {fixed}: not a role in account ")
    assert "{account_id}" in result.output
    assert len(result.output.splitlines()) == 1
    templated = status("--org", "--org-role", "arn:aws:iam::{account_id}:role/parkbrake-oncall",
                       "--regions", "us-east-1", "--output", "json")  # fmt: skip
    assert templated.exit_code == 0, templated.output


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["reap", "--dry-run"],
        ["schedule", "list"],
        ["park", "--now", "--dry-run"],
        ["unpark", "--now", "--dry-run"],
    ],
    ids=lambda command: command[0],
)
def test_every_command_across_accounts_refuses_org_role_without_org(folder: Path, command: list[str]) -> None:
    """--org-role is the role --org assumes; given alone it would be ignored, so it is refused."""
    result = CliRunner().invoke(parkbrake, [*command, "--org-role", "reader"])
    assert result.exit_code == 2, result.output
    assert (
        result.output
        == "Error: --org-role reader: the role --org assumes in each member account; add --org\n"
    )


def test_an_organisation_switch_in_one_member_is_named_beside_its_stacks(aws: str, folder: Path) -> None:
    """The hub's spoke parks the member accounts: their own stacks' switches still say "no" while
    every start there is refused; the answer names the stack, its account and the hub."""
    organisation = members(2)
    parked, free = organisation
    sessions = AccountSessions()
    for member, value in ((parked, "true"), (free, "false")):
        ssm = sessions.clients(AccountAccess(member.account_id, (role_arn(member.account_id, member.role),)))(
            "ssm", "us-east-1"
        )
        ssm.put_parameter(Name=names.park_parameter("dev"), Value="false", Type="String")
        ssm.put_parameter(Name=names.spoke_park_parameter("org", "us-east-1"), Value=value, Type="String")
    path = str(accounts_file(folder, organisation))

    report = json.loads(status("--accounts", path, "--regions", "us-east-1", "--output", "json").output)
    text = status("--accounts", path, "--regions", "us-east-1")

    switches = {stack["account"]: stack["organisation_parked"] for stack in report["stacks"]}
    assert switches == {
        parked.name: [{"parameter": "/parkbrake/org/spoke-us-east-1/parked", "hub": "org"}],
        free.name: [],
    }
    assert report["summary"]["organisation_parked_stacks"] == ["dev"]
    assert text.exit_code == 0, text.output
    line = "  organisation parked (hub org): nightly starts refused for 1 stack in 1 account-region"
    assert text.output.splitlines().count(line) == 2
