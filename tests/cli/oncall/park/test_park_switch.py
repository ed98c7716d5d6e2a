"""``parkbrake park`` / ``unpark`` on the reviewed path: the stack file's `parked` value edited byte for
byte, with its plan, and the editor that does it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cli.main import parkbrake
from cli.oncall.stack_file import read_config_value, set_config_value
from guardrails.errors import InputError
from tests.cli.oncall.ops_fleet import STACK, project_copy


def invoke(*arguments: str) -> Result:
    return CliRunner().invoke(parkbrake, list(arguments), catch_exceptions=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return project_copy(tmp_path)


# --- the reviewed path: Pulumi.<stack>.yaml ----------------------------------------------------------


def test_park_then_unpark_flips_only_the_value_and_shows_the_plan(project: Path) -> None:
    path = project / f"Pulumi.{STACK}.yaml"
    # An inference pool that keeps a host on, so parking has a group to bring to zero (the example
    # stack's scales to zero by itself).
    set_config_value(path, "parkbrake:pools.inference.min", 1)
    set_config_value(path, "parkbrake:pools.inference.desired", 1)
    original = path.read_bytes()

    parked = invoke("park", "--yes", "--stack", STACK, "--project-dir", str(project))

    assert parked.exit_code == 0, parked.output
    assert path.read_bytes() == original.replace(b"parkbrake:parked: false", b"parkbrake:parked: true", 1)
    assert "parked false → true" in parked.output
    assert "Monthly cost: $" in parked.output
    assert "saves" in parked.output
    assert "desiredCapacity" in parked.output
    assert "DISABLED" in parked.output
    assert "reaper (schedule, stays enabled)" in parked.output
    switched_off = parked.output.split("Switched off:")[1].split("Stays on:")[0]
    assert "nightly-training (ENABLED → DISABLED)" in switched_off
    assert "nightly-training" not in parked.output.split("Goes to zero:")[1].split("Switched off:")[0]

    unparked = invoke("unpark", "--yes", "--stack", STACK, "--project-dir", str(project), "--output", "json")

    assert unparked.exit_code == 0, unparked.output
    assert path.read_bytes() == original
    report = json.loads(unparked.stdout)
    assert report["parked"] == {"before": True, "after": False}
    assert report["file_changed"] is True
    assert report["applied"] is None
    assert report["cost"]["monthly_usd"]["after"] > report["cost"]["monthly_usd"]["before"]
    by_input = {(change["name"], change["input"]): change for change in report["changes"]}
    assert by_input[("nightly-training", "state")] | {"type": None} == {
        "type": None,
        "name": "nightly-training",
        "input": "state",
        "before": "DISABLED",
        "after": "ENABLED",
    }
    assert any(
        change["type"] == "aws:autoscaling/group:Group" and change["after"] == 1
        for change in report["changes"]
    )
    # What unparking turns on is listed as coming back, never as staying on.
    assert "inference-group (desiredCapacity)" in report["comes_back"]
    assert report["switched"] == ["nightly-training (DISABLED → ENABLED)"]
    assert not [item for item in report["stays_on"] if "nightly" in item or "gpu-pool" in item]


def test_parking_a_parked_stack_says_so_and_changes_nothing(project: Path) -> None:
    path = project / f"Pulumi.{STACK}.yaml"
    set_config_value(path, "parkbrake:parked", True)
    before = path.read_bytes()
    modified = path.stat().st_mtime_ns

    result = invoke("park", "--yes", "--stack", STACK, "--project-dir", str(project))

    assert result.exit_code == 0
    assert "already parked; nothing to change" in result.output
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == modified


def test_dry_run_shows_the_plan_and_writes_nothing(project: Path) -> None:
    path = project / f"Pulumi.{STACK}.yaml"
    before = path.read_bytes()

    result = invoke("park", "--dry-run", "--stack", STACK, "--project-dir", str(project), "-o", "json")

    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["dry_run"] is True
    assert report["file_changed"] is False
    assert report["cost"]["monthly_usd"]["after"] < report["cost"]["monthly_usd"]["before"]
    assert path.read_bytes() == before


def test_apply_without_the_pulumi_cli_is_a_clear_error_and_changes_nothing(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    path = project / f"Pulumi.{STACK}.yaml"
    before = path.read_bytes()

    result = CliRunner().invoke(
        parkbrake, ["park", "--apply", "--yes", "--stack", STACK, "--project-dir", str(project)]
    )

    assert result.exit_code == 1
    assert "the Pulumi CLI is not installed" in result.output
    assert isinstance(result.exception, SystemExit)
    assert path.read_bytes() == before


def test_without_a_terminal_or_yes_nothing_is_written(project: Path) -> None:
    path = project / f"Pulumi.{STACK}.yaml"
    before = path.read_bytes()

    result = CliRunner().invoke(parkbrake, ["park", "--stack", STACK, "--project-dir", str(project)])

    assert result.exit_code == 2
    assert "Refusing without --yes" in result.output
    assert path.read_bytes() == before


def test_unknown_stack_file_is_a_clear_error(project: Path) -> None:
    result = CliRunner().invoke(
        parkbrake, ["park", "--yes", "--stack", "nosuch", "--project-dir", str(project)]
    )

    assert result.exit_code == 2
    assert "no config for stack 'nosuch'" in result.output
    assert "dev, eks, org, prod" in result.output  # every Pulumi.<stack>.yaml here


# --- the byte-preserving editor ----------------------------------------------------------------------


def test_absent_key_is_added_right_after_config_and_line_endings_kept(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_bytes(b"# top\r\nconfig:   # ours\r\n  # first\r\n  aws:region: us-east-1\r\n")

    edit = set_config_value(path, "parkbrake:parked", True)

    assert edit.changed
    assert edit.before is None
    assert path.read_bytes() == (
        b"# top\r\nconfig:   # ours\r\n  parkbrake:parked: true\r\n  # first\r\n  aws:region: us-east-1\r\n"
    )


@pytest.mark.parametrize(
    ("line", "value", "expected"),
    [
        (b"  parkbrake:parked: False   # why\n", True, b"  parkbrake:parked: True   # why\n"),
        (b"  parkbrake:parked: FALSE\n", True, b"  parkbrake:parked: TRUE\n"),
        (b'  parkbrake:parked: "false"\n', True, b"  parkbrake:parked: true\n"),
        (b"  parkbrake:colour: 'blue'  # live\n", "green", b"  parkbrake:colour: 'green'  # live\n"),
        (b'  parkbrake:colour: "blue"\n', "it's", b'  parkbrake:colour: "it\'s"\n'),
        (b"  parkbrake:colour: blue\n", "yes", b'  parkbrake:colour: "yes"\n'),
    ],
)
def test_the_value_keeps_its_style(tmp_path: Path, line: bytes, value: Any, expected: bytes) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    head = b"config:\n  aws:region: us-east-1\n"
    path.write_bytes(head + line + b"  parkbrake:other: 1\n")
    key = line.split(b":", 2)[0].strip().decode() + ":" + line.split(b":", 2)[1].decode()

    set_config_value(path, key, value)

    assert path.read_bytes() == head + expected + b"  parkbrake:other: 1\n"
    assert read_config_value(path, key) == value


def test_a_nested_value_can_be_set_and_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_bytes(b"config:\n  parkbrake:inference:\n    image: x  # pinned\n    pool: inference\n")

    set_config_value(path, "parkbrake:inference.live_colour", "green")
    set_config_value(path, "parkbrake:inference.pool", "serving")

    assert path.read_bytes() == (
        b"config:\n  parkbrake:inference:\n    live_colour: green\n    image: x  # pinned\n    pool: serving\n"
    )
    path.write_bytes(b"config:\n  parkbrake:parked: false\n  parkbrake:parked: true\n")
    with pytest.raises(InputError, match='duplicate key "parkbrake:parked"'):
        set_config_value(path, "parkbrake:parked", True)


def test_park_edits_a_symlinked_stack_file_where_it_points_and_keeps_the_link_and_the_mode(
    project: Path, tmp_path: Path
) -> None:
    link = project / f"Pulumi.{STACK}.yaml"
    shared = tmp_path / "shared-config"
    shared.mkdir()
    target = shared / f"{STACK}.yaml"
    target.write_bytes(link.read_bytes())
    target.chmod(0o640)
    link.unlink()
    link.symlink_to(target)
    original = target.read_bytes()

    parked = invoke("park", "--yes", "--stack", STACK, "--project-dir", str(project))

    assert parked.exit_code == 0, parked.output
    assert link.is_symlink()
    assert link.resolve() == target.resolve()
    assert target.read_bytes() == original.replace(b"parkbrake:parked: false", b"parkbrake:parked: true", 1)
    assert target.stat().st_mode & 0o7777 == 0o640
    assert sorted(path.name for path in shared.iterdir()) == [target.name]  # no temporary left behind
    assert sorted(path.name for path in project.iterdir() if path.name.startswith(".Pulumi")) == []


def test_an_edit_keeps_the_files_mode(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text("config:\n  parkbrake:parked: false\n")
    path.chmod(0o600)
    set_config_value(path, "parkbrake:parked", True)
    assert path.stat().st_mode & 0o7777 == 0o600
    assert "parkbrake:parked: true" in path.read_text()


def test_park_edits_a_hard_linked_stack_file_in_place_so_every_name_sees_it(
    project: Path, tmp_path: Path
) -> None:
    """A rename would give Pulumi.<stack>.yaml a new inode and leave the other name with the old text;
    the file is written in place instead, and keeps its mode and inode."""
    path = project / f"Pulumi.{STACK}.yaml"
    shared = tmp_path / "shared-config"
    shared.mkdir()
    other_name = shared / f"{STACK}.yaml"
    other_name.hardlink_to(path)
    path.chmod(0o640)
    original, inode = path.read_bytes(), path.stat().st_ino

    parked = invoke("park", "--yes", "--stack", STACK, "--project-dir", str(project))

    assert parked.exit_code == 0, parked.output
    edited = original.replace(b"parkbrake:parked: false", b"parkbrake:parked: true", 1)
    assert path.read_bytes() == edited
    assert other_name.read_bytes() == edited
    assert path.stat().st_ino == other_name.stat().st_ino == inode
    assert path.stat().st_nlink == 2
    assert path.stat().st_mode & 0o7777 == 0o640
    assert sorted(entry.name for entry in project.iterdir() if entry.name.startswith(".Pulumi")) == []

    unparked = invoke("unpark", "--yes", "--stack", STACK, "--project-dir", str(project))

    assert unparked.exit_code == 0, unparked.output
    assert other_name.read_bytes() == original  # shorter again: the old tail is cut, not left behind


def test_a_file_with_one_name_is_still_replaced_whole_by_a_rename(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text("config:\n  parkbrake:parked: false\n")
    inode = path.stat().st_ino
    held_open = path.open("rb")  # keeps the old inode alive, so its number cannot be reused
    set_config_value(path, "parkbrake:parked", True)
    assert path.stat().st_ino != inode
    assert held_open.read() == b"config:\n  parkbrake:parked: false\n"  # a reader sees the old file whole
    held_open.close()
    assert path.read_text() == "config:\n  parkbrake:parked: true\n"
