"""Conventions every registered command keeps, checked by looping over the registry (Custodian-style)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from cli.registry import COMMANDS


def leaf_commands() -> list[tuple[str, click.Command]]:
    found = []
    for name, target in sorted(COMMANDS.items()):
        module_name, attribute = target.split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if isinstance(command, click.Group):
            found.extend((f"{name} {sub}", command.commands[sub]) for sub in sorted(command.commands))
        else:
            found.append((name, command))
    return found


@pytest.mark.parametrize(("name", "command"), leaf_commands(), ids=str)
def test_every_command_has_help_and_an_output_option(name: str, command: click.Command) -> None:
    assert len((command.help or "").strip()) > 20, f"{name} needs a real --help text"
    option_names = {opt for param in command.params for opt in getattr(param, "opts", [])}
    assert "--output" in option_names, f"{name} lacks the shared --output option"
    result = CliRunner().invoke(parkbrake, [*name.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert "--output" in result.output


def test_every_registered_target_is_importable_and_is_a_click_command() -> None:
    for name, target in COMMANDS.items():
        module_name, attribute = target.split(":")
        assert isinstance(getattr(importlib.import_module(module_name), attribute), click.Command), name


def test_top_level_help_lists_every_command_without_loading_cloud_libraries() -> None:
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from cli.main import parkbrake\n"
        "result = CliRunner().invoke(parkbrake, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(result.output)\n"
        "heavy = sorted(m for m in ('boto3', 'botocore', 'pulumi', 'pulumi_aws', 'psycopg', 'pynvml') if m in sys.modules)\n"
        "print('HEAVY:' + ','.join(heavy))\n"
    )
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert output.strip().endswith("HEAVY:"), output
    for name in COMMANDS:
        assert name in output


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(parkbrake, ["frobnicate"])
    assert result.exit_code == 2
    assert "No such command" in result.output
