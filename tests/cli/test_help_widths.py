"""Every help page fits an 80-column terminal: a convention over every registered command."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from cli.registry import COMMANDS
from tests.cli.table_printers import leaf_commands

PAGES = ["", *sorted(COMMANDS), *sorted(set(leaf_commands()) - set(COMMANDS))]


@pytest.mark.parametrize("name", PAGES, ids=lambda name: name or "parkbrake")
def test_the_help_page_fits_80_columns(name: str) -> None:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(parkbrake, [*name.split(), "--help"])
    assert result.exit_code == 0, result.output
    wide = [line for line in result.output.splitlines() if len(line) > 80]
    assert not wide, f"parkbrake {name} --help is wider than 80 columns:\n" + "\n".join(wide)


def test_a_wide_help_page_would_be_found() -> None:
    """The check itself: a docstring block click may not rewrap (``\\b``) is printed as written."""
    import click

    @click.command()
    def wide() -> None:
        """Short.

        \b
        parkbrake a-very-long-example --with --many --flags --that --run --past --eighty --columns --x
        """

    shown = CliRunner(env={"COLUMNS": "80"}).invoke(wide, ["--help"]).output
    assert max(len(line) for line in shown.splitlines()) > 80
