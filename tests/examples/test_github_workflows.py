"""examples/ci/github: the workflow files parse, every `parkbrake` command in them is one the CLI has
with exactly those flags, and the pull-request comment the plan step writes is `plan`'s markdown."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from cli.main import parkbrake
from tests.conftest import REPO_ROOT

WORKFLOWS = REPO_ROOT / "examples" / "ci" / "github"
MARKER = "<!-- parkbrake-plan -->"


def workflow(name: str) -> dict[str, Any]:
    document: dict[str, Any] = YAML(typ="safe").load((WORKFLOWS / name).read_text())
    return document


def steps(document: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each step with its job's environment."""
    return [(job.get("env", {}), step) for job in document["jobs"].values() for step in job["steps"]]


def fill(word: str, environment: dict[str, Any]) -> str:
    """``word`` with each GitHub expression and each ``$VARIABLE`` (from the job's environment) filled."""
    expression = re.compile(r"\$\{\{[^}]*\}\}")
    word = re.sub(r"\$(\w+)", lambda match: str(environment.get(match.group(1), "0123abcd")), word)
    return expression.sub("0123abcd", word)


def parkbrake_commands(document: dict[str, Any]) -> list[list[str]]:
    """Every `parkbrake …` command line in the steps' scripts, its variables and expressions filled
    with a plausible value (the job's environment, else a revision-shaped word)."""
    commands = []
    for environment, step in steps(document):
        script = re.sub(r"\\\n\s*", " ", step.get("run", ""))
        for text in script.splitlines():
            line = text.strip()
            if line.startswith("parkbrake "):
                words = shlex.split(line.split(" > ")[0])
                commands.append([fill(word, environment) for word in words[1:]])
    return commands


@pytest.mark.parametrize("name", ["plan-comment.yml", "deploy-on-merge.yml"])
def test_the_workflow_parses_and_runs_on_the_events_it_says(name: str) -> None:
    document = workflow(name)
    assert document["jobs"], name
    expected = {"plan-comment.yml": "pull_request", "deploy-on-merge.yml": "push"}[name]
    assert expected in document["on"]
    assert all("uses" in step or "run" in step for _, step in steps(document))


def test_the_commands_are_plan_on_pull_requests_and_deploy_then_verify_on_merge() -> None:
    plan_commands = parkbrake_commands(workflow("plan-comment.yml"))
    assert plan_commands == [["plan", "--stack", "dev", "--against", "origin/main", "--output", "markdown"]]
    merge = workflow("deploy-on-merge.yml")
    names = [command[0] for command in parkbrake_commands(merge)]
    assert names == ["plan", "deploy", "verify"]
    scripts = [step.get("run", "") for _, step in steps(merge)]
    pulumi_up = next(index for index, script in enumerate(scripts) if script.startswith("pulumi up"))
    deploy = next(index for index, script in enumerate(scripts) if "parkbrake deploy" in script)
    assert pulumi_up < deploy  # the stack first, then the service on it
    for command in parkbrake_commands(merge)[1:]:  # the image pinned to the commit, the revision confirmed
        assert command[command.index("--revision") + 1] == "0123abcd"
        assert command[command.index("--image") + 1].endswith(":0123abcd")


@pytest.mark.parametrize(
    "command",
    [
        *parkbrake_commands(workflow("plan-comment.yml")),
        *parkbrake_commands(workflow("deploy-on-merge.yml")),
    ],
    ids=lambda command: command[0],
)
def test_every_parkbrake_command_exists_with_those_flags(command: list[str]) -> None:
    context = click.Context(parkbrake, info_name="parkbrake")
    found = parkbrake.get_command(context, command[0])
    assert found is not None, command[0]
    # The real command parses the arguments: an unknown flag, a missing value or a bad choice raises.
    found.make_context(command[0], list(command[1:]), parent=context)
    result = CliRunner().invoke(parkbrake, [command[0], "--help"])
    assert result.exit_code == 0, result.output
    for flag in (word for word in command[1:] if word.startswith("--")):
        assert flag in result.output


def test_a_flag_the_command_lacks_is_caught() -> None:
    """The check above can fail: a misspelt flag is refused by the command's own parser."""
    context = click.Context(parkbrake, info_name="parkbrake")
    verify = parkbrake.get_command(context, "verify")
    assert verify is not None
    with pytest.raises(click.NoSuchOption):
        verify.make_context("verify", ["inference", "--revison", "0123abcd"], parent=context)


def plan_step_script() -> str:
    step = next(step for _, step in steps(workflow("plan-comment.yml")) if step.get("id") == "plan")
    script: str = step["run"]
    return script


def git(folder: Path, *arguments: str) -> None:
    subprocess.run(["git", *arguments], cwd=folder, check=True, capture_output=True)


def stack_repository(folder: Path) -> Path:
    """A git repository whose origin/main holds the dev stack file, its work tree a changed one."""
    yaml = YAML()
    document = yaml.load((REPO_ROOT / "Pulumi.dev.yaml").read_text())
    stack = folder / "Pulumi.dev.yaml"
    with stack.open("w") as stream:
        yaml.dump(document, stream)
    git(folder, "init", "-q")
    git(folder, "add", "Pulumi.dev.yaml")
    git(folder, "-c", "user.email=ci@example.com", "-c", "user.name=ci", "commit", "-q", "-m", "base")
    git(folder, "update-ref", "refs/remotes/origin/main", "HEAD")
    # The pull request doubles the training pool's maximum and allows only small hosts (a mandatory failure).
    document["config"]["parkbrake:pools"]["training"]["max"] *= 2
    document["config"]["parkbrake:policy"]["allowed_instance_types"] = ["g5.xlarge"]
    with stack.open("w") as stream:
        yaml.dump(document, stream)
    return stack


def run_plan_step(folder: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    outputs = folder / "github-output"
    outputs.write_text("")
    environment = {
        **os.environ,
        "STACK": "dev",
        "GITHUB_OUTPUT": str(outputs),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO_ROOT),
    }
    done = subprocess.run(
        ["bash", "-e", "-c", plan_step_script()],
        check=False,
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
    )
    return done, outputs.read_text()


def test_the_comment_is_the_markdown_plan_prints_and_a_failed_policy_still_posts(tmp_path: Path) -> None:
    stack_repository(tmp_path)
    done, outputs = run_plan_step(tmp_path)
    assert done.returncode == 0, done.stderr  # the step posts; the job's last step fails the check
    assert outputs == "status=1\n"
    printed = CliRunner().invoke(
        parkbrake,
        [
            "plan",
            "--stack",
            "dev",
            "--project-dir",
            str(tmp_path),
            "--against",
            "origin/main",
            "-o",
            "markdown",
        ],
    )
    assert printed.exit_code == 1
    comment = (tmp_path / "comment.md").read_text()
    assert comment == f"{MARKER}\n{printed.output}"
    assert "**Against `origin/main`**: worst case +$8,297.12 a month" in comment
    assert "**Mandatory policies failed: `instance-types-allowed`**" in comment


def test_bad_input_fails_the_step_without_a_comment(tmp_path: Path) -> None:
    stack = stack_repository(tmp_path)
    stack.write_text(stack.read_text() + "  parkbrake:nighty: {}\n")
    done, outputs = run_plan_step(tmp_path)
    assert done.returncode == 2
    assert outputs == "status=2\n"
    assert "nighty: unknown key" in done.stdout + done.stderr
    assert not (tmp_path / "comment.md").exists()
