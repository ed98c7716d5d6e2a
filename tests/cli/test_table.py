"""cli/table.py: a cell is shown whole or not at all, columns give way in priority order, details
move under their rows, and what is left out is named."""

from __future__ import annotations

import io
import textwrap

import click
import pytest
from click.testing import CliRunner
from rich.console import Console

from cli.options import wide_option
from cli.table import Column, Table, layout, print_table, render

ARN = "arn:aws:sts::123456789012:assumed-role/OnCall/alice"


def hosts() -> Table:
    table = Table(
        "GPU hosts",
        [Column("instance", 0), Column("deadline", 1), Column("why", 2, detail=True), Column("type", 3),
         Column("GPUs", 4, justify="right")],
    )  # fmt: skip
    table.add_row("i-0123456789abcdef0", "2026-12-02T09:35:15Z", "within its 4h cap (tag): due at "
                  "2026-12-02T09:35:15Z, in 3h59m", "g5.12xlarge", "4")  # fmt: skip
    table.add_row("i-0fedcba9876543210", "-", f'record {{"at":"2026-12-02T04:29:36Z","by":"{ARN}","min":0}}',
                  "p4d.24xlarge", "8")  # fmt: skip
    return table


def shown(table: Table, width: int, *, wide: bool = False) -> str:
    output = io.StringIO()
    print_table(Console(file=output, width=width, color_system=None), table, wide=wide)
    return output.getvalue()


def test_wide_enough_everything_is_in_line() -> None:
    text = shown(hosts(), 200)
    assert text.splitlines()[1].split() == ["instance", "deadline", "why", "type", "GPUs"]
    assert "hidden at this width" not in text


@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_no_cell_is_ever_cut_or_folded(width: int) -> None:
    text = shown(hosts(), width)
    for whole in ("i-0123456789abcdef0", "i-0fedcba9876543210", "2026-12-02T09:35:15Z", ARN,
                  '"at":"2026-12-02T04:29:36Z"'):  # fmt: skip
        assert whole in text
    assert "…" not in text


def test_at_80_columns_the_reason_moves_under_its_row_and_nothing_is_hidden() -> None:
    text = shown(hosts(), 80)
    lines = text.splitlines()
    assert lines[1].split() == ["instance", "deadline", "type", "GPUs"]
    assert lines[4].startswith("    why: within its 4h cap (tag): due at 2026-12-02T09:35:15Z")
    assert "hidden at this width" not in text
    # The JSON record wraps between its members, each line within the width but the ARN's.
    record = [line for line in lines if "record" in line or '"by"' in line or '"min"' in line]
    assert any(f'"by":"{ARN}",' in line for line in record)


def test_narrower_columns_are_left_out_in_priority_order_and_named() -> None:
    shown_at, beneath, hidden = layout(hosts(), 30)
    assert (shown_at, beneath, hidden) == ([0, 4], [2], [1, 3])  # GPUs is narrow enough after the others
    text = shown(hosts(), 30)
    assert (
        " ".join(text.split()).count("hidden at this width: deadline, type; --wide or --output json has all")
        == 1
    )


def test_a_priority_0_column_is_shown_however_narrow() -> None:
    table = Table("t", [Column("name", 0), Column("other", 1)])
    table.add_row("parkbrake-dev-nightly-training", "x")
    text = render(table, 10).text.plain
    assert "parkbrake-dev-nightly-training" in text
    assert "other" not in text


def test_wide_shows_every_column_in_line() -> None:
    text = shown(hosts(), 40, wide=True)
    assert text.splitlines()[1].split() == ["instance", "deadline", "why", "type", "GPUs"]
    assert "hidden" not in text


def test_the_wide_flag_reaches_the_table_through_the_command_context() -> None:
    @click.command()
    @wide_option
    def command() -> None:
        print_table(Console(width=40, color_system=None), hosts())

    narrow = CliRunner().invoke(command, []).output
    wide = CliRunner().invoke(command, ["--wide"]).output
    assert "hidden at this width" in " ".join(narrow.split())
    assert "hidden" not in wide
    assert "p4d.24xlarge" in wide


def test_a_row_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="2 cells for 5 columns in table 'GPU hosts'"):
        hosts().add_row("i-1", "x")


def many_hidden() -> Table:
    table = Table(
        "GPU hosts",
        [Column("instance", 0), Column("deadline", 1), Column("type", 2), Column("GPUs", 3),
         Column("owner", 4), Column("tenant", 5), Column("since", 6)],
    )  # fmt: skip
    table.add_row("i-0123456789abcdef0", "2026-12-02T09:35:15Z", "g5.12xlarge", "4", "alice@example.com",
                  "research", "2026-12-02T05:35:15Z")  # fmt: skip
    return table


@pytest.mark.parametrize("width", range(24, 111))  # from 111 columns on, nothing is hidden
def test_the_hidden_note_never_leaves_a_word_alone_on_its_last_line(width: int) -> None:
    lines = shown(many_hidden(), width).splitlines()
    start = next(index for index, line in enumerate(lines) if "hidden at this width" in line)
    note = lines[start:]

    assert len(note[-1].split()) >= 2 or len(note) == 1
    assert all(len(line) <= width or len(line.split()) == 1 for line in note)
    assert all(line.startswith("  ") for line in note)
    assert " ".join(" ".join(note).split()).endswith("; --wide or --output json has all")


def test_the_wrapped_note_moves_one_word_down_to_its_orphan() -> None:
    from cli.table import wrap_note

    note = "hidden at this width: deadline, type, GPUs, owner, since; --wide or --output json has all"

    plain = textwrap.wrap(note, 88, initial_indent="  ", subsequent_indent="  ")
    assert plain[-1] == "  all"  # what a plain wrap leaves alone at 88 columns
    assert wrap_note(note, 88) == [
        "  hidden at this width: deadline, type, GPUs, owner, since; --wide or --output json",
        "  has all",
    ]
    assert wrap_note(note, 100) == ["  " + note]
