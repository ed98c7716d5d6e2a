"""Shell completion as README.md documents it: `_PARKBRAKE_COMPLETE=<shell>_source parkbrake` prints
the script for bash, zsh and fish, and the script's completions name the commands and flags."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def parkbrake(environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from cli.main import main; main()"]
    return subprocess.run(
        command,
        cwd=REPO_ROOT,
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("shell", "sign"),
    [
        ("bash", "complete -o nosort -F _parkbrake_completion parkbrake"),
        ("zsh", "#compdef parkbrake"),
        ("fish", "complete --no-files --command parkbrake"),
    ],
)
def test_the_completion_script_is_printed_for_each_shell(shell: str, sign: str) -> None:
    done = parkbrake({"_PARKBRAKE_COMPLETE": f"{shell}_source"})
    assert done.returncode == 0, done.stderr
    assert sign in done.stdout
    assert f"_PARKBRAKE_COMPLETE={shell}_complete" in done.stdout


def test_completion_names_commands_and_flags() -> None:
    commands = parkbrake(
        {"_PARKBRAKE_COMPLETE": "bash_complete", "COMP_WORDS": "parkbrake pl", "COMP_CWORD": "1"}
    )
    assert commands.stdout.split() == ["plain,plan"]
    flags = parkbrake(
        {
            "_PARKBRAKE_COMPLETE": "bash_complete",
            "COMP_WORDS": "parkbrake ledger report --un",
            "COMP_CWORD": "3",
        }
    )
    assert flags.stdout.split() == ["plain,--until"]


def test_an_unknown_shell_prints_no_script() -> None:
    done = parkbrake({"_PARKBRAKE_COMPLETE": "tcsh_source"})
    assert "complete" not in done.stdout
