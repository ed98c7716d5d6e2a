"""A mistyped ``--stack`` is bad input in every command: exit 2, one line naming the stack given and the
stacks that exist (the stack files beside it, or the stacks deployed where the command looked)."""

from __future__ import annotations

import boto3
import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from guardrails import names
from tests.conftest import REPO_ROOT

REGION = "us-east-1"


def one_line(args: list[str]) -> str:
    result = CliRunner().invoke(parkbrake, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.output
    return result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["plan", "--project-dir", str(REPO_ROOT)],
        ["package", "--out", "unused", "--project-dir", str(REPO_ROOT)],
        ["park", "--dry-run", "--project-dir", str(REPO_ROOT)],
        ["guard-policy"],
        ["k8s", "render", "--project-dir", str(REPO_ROOT)],
        [
            "deploy",
            "inference",
            "--image",
            "repo:1",
            "--revision",
            "r1",
        ],  # the stack file here (the repository)
        ["rollback", "inference"],
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_a_stack_without_its_file_names_the_stack_files_there(command: list[str]) -> None:
    line = one_line([*command, "--stack", "prd"])
    assert "no config for stack 'prd'" in line
    assert "(stacks here: dev, eks, org, prod) — did you mean --stack prod?" in line


@pytest.fixture
def deployed(aws: str) -> list[str]:
    ssm = boto3.client("ssm", region_name=REGION)
    for stack in ("prod", "dev"):
        ssm.put_parameter(Name=names.park_parameter(stack), Value="false", Type="String")
    return ["dev", "prod"]


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        (["reap", "--dry-run", "--region", REGION], "stack 'prd' is not deployed in us-east-1: no /parkbrake/prd/parked"),
        (["status", "--regions", REGION], "stack 'prd' has nothing in us-east-1"),
        (["schedule", "list", "--region", REGION], "stack 'prd' has no schedule group parkbrake-prd in us-east-1"),
        (["park", "--now", "--yes", "--region", REGION], "found nothing of stack 'prd' in us-east-1"),
        (["ledger", "replay-dlq", "--region", REGION], "stack 'prd' has no meter dead-letter queue parkbrake-prd-"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)  # fmt: skip
def test_a_stack_not_deployed_names_the_stacks_that_are(
    deployed: list[str], command: list[str], problem: str
) -> None:
    line = one_line([*command, "--stack", "prd"])
    assert line.startswith(f"Error: {problem}")
    region_flag = "--regions" if command[0] == "status" else "--region"
    assert (
        f" — did you mean --stack prod? stacks deployed there: dev, prod; check --stack and {region_flag}\n"
        in line
    )
