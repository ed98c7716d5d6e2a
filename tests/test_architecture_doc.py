"""The layout table of docs/architecture.md names every package and module of the tree, and nothing else.

The expected set is read from the tree (git's tracked and untracked, not ignored, files), never written
here: a module added, moved or removed without its row fails with its name.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The packages whose every module the table lists (tests/, alerts/ and docs/ have rows of their own, by folder).
LAID_OUT = (
    "cli",
    "stacks",
    "services",
    "components",
    "policies",
    "lambdas",
    "guardrails",
    "benchmarks",
    "scripts",
)
ROW = re.compile(r"^\| `([^`]+/)` \|(.*)\|\s*$")
# A module is named in its package's row as a bare file name: `sweep.py` (a path with a slash is not a module).
MODULE = re.compile(r"`(\w+)\.py`")


def tree_modules(root: Path = ROOT) -> dict[str, set[str]]:
    """Every folder under the laid-out packages that holds Python, and its modules (``__init__`` aside)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *LAID_OUT],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    packages: dict[str, set[str]] = {}
    for name in listed:
        path = Path(name)
        if path.suffix != ".py" or not (root / path).is_file():  # a deletion not yet committed is gone
            continue
        modules = packages.setdefault(f"{path.parent.as_posix()}/", set())
        if path.stem != "__init__":
            modules.add(path.stem)
    return packages


def table_modules(text: str) -> dict[str, set[str]]:
    """The layout table's rows for the laid-out packages: the folder in the first cell, the modules named in the rest."""
    table = text.split("\n## Layout\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in table.splitlines():
        match = ROW.match(line)
        if match and match.group(1).split("/", 1)[0] in LAID_OUT:
            rows.setdefault(match.group(1), set()).update(MODULE.findall(match.group(2)))
    return rows


def layout_problems(tree: Mapping[str, Iterable[str]], table: Mapping[str, Iterable[str]]) -> list[str]:
    """What the table lacks or names in excess, one line per package, with the module names."""
    problems = [
        f"{package}: no row (modules: {sorted(tree[package])})" for package in sorted(tree.keys() - table)
    ]
    problems += [
        f"{package}: a row, but no such package in the tree" for package in sorted(table.keys() - tree)
    ]
    for package in sorted(tree.keys() & table.keys()):
        missing, extra = set(tree[package]) - set(table[package]), set(table[package]) - set(tree[package])
        if missing:
            problems.append(f"{package}: modules missing from its row: {sorted(missing)}")
        if extra:
            problems.append(f"{package}: its row names modules that do not exist: {sorted(extra)}")
    return problems


def test_the_layout_table_names_every_package_and_module_of_the_tree() -> None:
    problems = layout_problems(tree_modules(), table_modules((ROOT / "docs" / "architecture.md").read_text()))
    assert not problems, "docs/architecture.md's layout table and the tree differ:\n" + "\n".join(problems)


def test_the_checker_names_what_is_missing_and_what_is_extra() -> None:
    text = """# x

## Layout

| package | holds |
|---|---|
| `cli/` | commands: `plan.py`, `gone.py`, and the span `cli/registry.py` (a path, not a module) |
| `lambdas/old/` | `meter.py` |
| `alerts/` | rules (`rules.py` is not a Python module of a laid-out package) |

### Who may import whom

| `guardrails/` | `sweep.py` (after the layout table: not read) |
"""
    table = table_modules(text)
    assert table == {"cli/": {"plan", "gone"}, "lambdas/old/": {"meter"}}
    tree = {"cli/": {"plan", "registry"}, "guardrails/": {"sweep"}}
    assert layout_problems(tree, table) == [
        "guardrails/: no row (modules: ['sweep'])",
        "lambdas/old/: a row, but no such package in the tree",
        "cli/: modules missing from its row: ['registry']",
        "cli/: its row names modules that do not exist: ['gone']",
    ]
    assert layout_problems(tree, {"cli/": {"plan", "registry"}, "guardrails/": {"sweep"}}) == []


def test_the_tree_reading_sees_a_new_untracked_module(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "cli" / "oncall").mkdir(parents=True)
    (tmp_path / "cli" / "__init__.py").write_text("")
    (tmp_path / "cli" / "oncall" / "fresh.py").write_text("")
    (tmp_path / "cli" / "notes.txt").write_text("")
    (tmp_path / ".gitignore").write_text("cli/ignored.py\n")
    (tmp_path / "cli" / "ignored.py").write_text("")

    assert tree_modules(tmp_path) == {"cli/": set(), "cli/oncall/": {"fresh"}}
