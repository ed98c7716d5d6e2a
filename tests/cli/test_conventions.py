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


def registered_command(name: str) -> click.Command:
    module_name, attribute = COMMANDS[name].target.split(":")
    command = getattr(importlib.import_module(module_name), attribute)
    assert isinstance(command, click.Command), f"{COMMANDS[name].target} is not a click command"
    return command


def leaf_commands() -> list[tuple[str, click.Command]]:
    found = []
    for name in sorted(COMMANDS):
        command = registered_command(name)
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


@pytest.mark.parametrize(("name", "command"), leaf_commands(), ids=str)
def test_every_option_has_help_and_the_help_shows_an_example(name: str, command: click.Command) -> None:
    silent = [
        param.opts[0]
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()
    ]
    assert not silent, f"{name}: options without help text: {', '.join(silent)}"
    shown = CliRunner().invoke(parkbrake, [*name.split(), "--help"]).output
    example = shown.split("Example:", 1)[-1] if "Example:" in shown else ""
    assert f"parkbrake {name}" in example, f"{name}: its --help shows no 'Example:' running it"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_registry_help_line_is_the_commands_own_short_help(name: str) -> None:
    """``parkbrake --help`` shows the registry's line without importing the command: it must not drift."""
    assert COMMANDS[name].short_help == registered_command(name).get_short_help_str(limit=1000)


def test_top_level_help_lists_every_command_without_importing_any() -> None:
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from cli.main import parkbrake\n"
        "result = CliRunner().invoke(parkbrake, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(result.output)\n"
        "print('LOADED:' + ' '.join(sorted(sys.modules)))\n"
    )
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    help_text, _, loaded_line = output.rpartition("LOADED:")
    loaded = set(loaded_line.split())
    command_modules = {entry.target.split(":")[0] for entry in COMMANDS.values()}
    assert "cli.main" in loaded  # the probe saw the CLI's own modules
    assert not loaded & command_modules
    assert not {name for name in loaded if name.startswith(("cli.oncall", "cli.host", "cli.preview"))}
    assert not loaded & {"boto3", "botocore", "pulumi", "pulumi_aws", "psycopg", "pynvml", "rich"}
    listed = " ".join(help_text.split())  # help lines wrap at the terminal's width
    for name, entry in COMMANDS.items():
        assert f"{name} {entry.short_help.split()[0]}" in listed


def test_no_command_module_loads_the_aws_sdk_or_pulumi_when_imported() -> None:
    """A command's own ``--help`` (and shell completion) imports its module: boto3, botocore and
    Pulumi load only when the command runs. (The organisation options once pulled botocore into
    every command that has them: ``status --help`` took the SDK's import time.)"""
    heavy = ("boto3", "botocore", "pulumi")
    modules = sorted({entry.target.split(":")[0] for entry in COMMANDS.values()})
    probe = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"    found = [m for m in {heavy!r} if m in sys.modules]\n"
        "    if found:\n"
        "        print(name, *found)\n"
        "        break\n"
    )
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert output == ""


def test_the_concurrency_shown_in_help_is_the_one_used() -> None:
    from cli.options import CONCURRENCY_SHOWN
    from lambdas.aws.assumed import DEFAULT_CONCURRENCY

    assert CONCURRENCY_SHOWN == DEFAULT_CONCURRENCY
    shown = " ".join(CliRunner().invoke(parkbrake, ["status", "--help"]).output.split())
    assert (
        f"--concurrency INTEGER Accounts and regions read at once (one shared rate limit for all). [default: {DEFAULT_CONCURRENCY}]"
        in shown
    )


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(parkbrake, ["frobnicate"])
    assert result.exit_code == 2
    assert result.output == "Error: no such command 'frobnicate' — parkbrake --help lists the commands\n"
