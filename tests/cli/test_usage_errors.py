"""One shape for every mistake: ``Error: <what> — <the fix>`` on one line of stderr, exit 2, in every command.

The convention tests walk every registered command and subcommand (nested groups included) and give each
an unknown flag, then a wrong value for each of its typed options, then a typed option with no value.
None of this reaches AWS or the ledger: usage errors are found while parsing, before a command runs.
"""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import parkbrake
from cli.options import Duration, SignalName, TenantName, When

CONTEXT = click.Context(parkbrake, info_name="parkbrake")


def walk(command: click.Command, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name in command.list_commands(CONTEXT):
            sub = command.get_command(CONTEXT, name)
            assert sub is not None, f"{' '.join(path)} lists {name} but cannot load it"
            found.extend(walk(sub, (*path, name)))
    return found


EVERY_COMMAND = walk(parkbrake, ())
LEAVES = [(path, command) for path, command in EVERY_COMMAND if not isinstance(command, click.Group)]


def wrong_value(param: click.Parameter) -> str | None:
    """A value the option's type refuses, or None for an option that takes any text."""
    kind = param.type
    if isinstance(kind, click.Choice):
        return "not-one-of-them"
    if isinstance(kind, click.types.IntParamType | click.types.FloatParamType):
        return "many"
    if isinstance(kind, Duration | When):
        return "90 minutes"
    if isinstance(kind, SignalName):
        return "SIGNOPE"
    if isinstance(kind, TenantName):
        return "no tenant!"
    if isinstance(kind, click.Path) and kind.exists:
        return "/nonexistent/parkbrake-usage-error"
    return None


def typed_options(command: click.Command) -> list[click.Option]:
    return [
        param
        for param in command.params
        if isinstance(param, click.Option) and not param.is_flag and wrong_value(param) is not None
    ]


def assert_one_line(result: Result, *args: str) -> str:
    shown = f"parkbrake {' '.join(args)}: exit {result.exit_code}\n{result.output}"
    assert result.exit_code == 2, shown
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, shown
    assert lines[0].startswith("Error: "), shown
    assert " — " in lines[0], shown
    assert "Usage:" not in result.output, shown
    assert "Try '" not in result.output, shown
    assert result.stdout == "", shown
    return lines[0]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(parkbrake, list(args))


def test_the_walk_reaches_the_nested_groups() -> None:
    names = {" ".join(path) for path, _ in EVERY_COMMAND}
    assert {"ledger report", "ledger admit", "k8s render", "schedule list", "extend"} <= names
    assert len(LEAVES) >= 30


@pytest.mark.parametrize(
    ("path", "command"), EVERY_COMMAND, ids=[" ".join(path) or "parkbrake" for path, _ in EVERY_COMMAND]
)
def test_an_unknown_flag_is_one_line_naming_the_closest(
    path: tuple[str, ...], command: click.Command
) -> None:
    line = assert_one_line(invoke(*path, "--outptu"), *path, "--outptu")
    assert line.startswith("Error: no such option --outptu — ")
    assert f"parkbrake {' '.join(path)} --help".replace("  ", " ") in line
    if any("--output" in getattr(param, "opts", []) for param in command.params):
        assert "did you mean --output?" in line


@pytest.mark.parametrize(("path", "command"), LEAVES, ids=[" ".join(path) for path, _ in LEAVES])
def test_a_wrong_value_is_one_line_with_the_forms(path: tuple[str, ...], command: click.Command) -> None:
    for option in typed_options(command):
        name = next(opt for opt in option.opts if opt.startswith("--"))
        value = wrong_value(option)
        assert value is not None
        line = assert_one_line(invoke(*path, name, value), *path, name, value)
        assert line.startswith(f"Error: invalid value for {name}: "), line


@pytest.mark.parametrize(("path", "command"), LEAVES, ids=[" ".join(path) for path, _ in LEAVES])
def test_an_option_without_its_value_is_one_line(path: tuple[str, ...], command: click.Command) -> None:
    for option in typed_options(command)[:1]:
        name = next(opt for opt in option.opts if opt.startswith("--"))
        line = assert_one_line(invoke(*path, name), *path, name)
        assert line.startswith(f"Error: option {name} needs a value — "), line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["park", "--dry-rn"], "Error: no such option --dry-rn — did you mean --dry-run? (parkbrake park --help lists them)"),
        (
            ["extend", "i-0123456789abcdef0", "--by", "90 minutes", "--reason", "r"],
            "Error: invalid value for --by: '90 minutes' is not a duration — use 90m, 2h, 1h30m or 5400s",
        ),
        (
            ["ledger", "admit", "--tenant", "research", "--instance-type", "g5.xlarge", "--max-runtime", "90 minutes"],
            "Error: invalid value for --max-runtime: '90 minutes' is not a duration — use 90m, 2h, 1h30m or 5400s",
        ),
        (["ledger", "admit", "--max-runtime"], "Error: option --max-runtime needs a value — use 90m, 2h, 1h30m or 5400s"),
        (["ledger", "report", "--since", "90 minutes"], "Error: invalid value for --since: '90 minutes' is not a time — use a duration back from now (90m, 12h, 7d)"),
        (["status", "--output", "jsn"], "Error: invalid value for --output: 'jsn' — use one of text, json"),
        (["extend"], "Error: missing argument INSTANCE_ID — give it: parkbrake extend [OPTIONS] INSTANCE_ID"),
        (["extend", "i-0123456789abcdef0", "--by", "1h"], "Error: missing option --reason — pass --reason TEXT"),
        (["stauts"], "Error: no such command 'stauts' — did you mean status? (parkbrake --help lists them)"),
        (["k8s", "rendr"], "Error: no such command 'rendr' — did you mean render? (parkbrake k8s --help lists them)"),
        (["park", "--dry-run=yes"], "Error: option --dry-run takes no value — write --dry-run alone"),
        (["deploy", "inference", "extra"], "Error: got unexpected extra argument (extra) — it takes: parkbrake deploy [OPTIONS] SERVICE"),
        (["--bogus"], "Error: no such option --bogus — parkbrake --help lists the options"),
    ],
)  # fmt: skip
def test_each_kind_of_mistake_says_what_and_the_fix(args: list[str], expected: str) -> None:
    assert assert_one_line(invoke(*args), *args).startswith(expected)


def test_a_value_with_a_newline_stays_on_one_line() -> None:
    assert_one_line(invoke("extend", "i-1", "--reason", "r", "--by", "90\nminutes"), "extend")


def test_a_group_without_its_command_still_shows_its_help() -> None:
    result = invoke("ledger")
    assert "Commands:" in result.output
    assert "report" in result.output


@settings(max_examples=100, deadline=None)
@given(value=st.text(max_size=40).filter(lambda text: text not in ("text", "json")))
def test_any_wrong_choice_is_one_line_listing_the_choices(value: str) -> None:
    """Whatever is typed (newlines, control characters, quotes), the error stays one line."""
    line = assert_one_line(invoke("status", "--output", value), "status", "--output", repr(value))
    assert line.endswith(" — use one of text, json")


@settings(max_examples=100, deadline=None)
@given(name=st.from_regex(r"--[a-z][a-z-]{0,20}", fullmatch=True))
def test_any_unknown_flag_is_one_line(name: str) -> None:
    command = parkbrake.get_command(CONTEXT, "park")
    assert command is not None
    real = {opt for param in command.get_params(CONTEXT) for opt in (*param.opts, *param.secondary_opts)}
    if name in real:
        return  # one of park's flags (--help included): nothing to refuse
    line = assert_one_line(invoke("park", name), "park", name)
    assert line.startswith(f"Error: no such option {name} — ")
