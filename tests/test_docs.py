"""Every repository path the README and the docs name exists, so the docs cannot drift from the tree."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cli.registry import COMMANDS
from guardrails import settings
from tests.exported_metrics import fleet_metrics, inference_metrics

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
# Tracked top-level names only: a local build/ or .venv/ is not part of the repository the docs describe.
TOP_LEVEL = {
    name.split("/", 1)[0]
    for name in subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    if not name.startswith(".")
}
# A backticked token or a markdown link target that looks like a path: `cli/oncall/fleet/status.py`, `docs/x.md`.
CODE_SPAN = re.compile(r"`([^`\s]+)`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
FILE_SUFFIXES = (".py", ".md", ".yaml", ".yml", ".json", ".sql", ".toml", ".sh", ".jsonl")
PACKAGES = ("benchmarks", "cli", "components", "guardrails", "lambdas", "policies", "stacks", "tests")
# A dotted name such as `lambdas.aws.stop_path.stop_hosts`: a module, then perhaps an attribute.
DOTTED = re.compile(rf"(?:{'|'.join(PACKAGES)})(?:\.\w+)+")


def named_paths(document: Path) -> set[str]:
    """Repository paths in ``document``: relative links, and code spans naming a top-level folder or file."""
    text = document.read_text()
    paths = set()
    for target in LINK.findall(text):
        if "://" not in target and not target.startswith("mailto:"):
            paths.add(str((document.parent / target).resolve().relative_to(ROOT)))
    for span in CODE_SPAN.findall(text):
        candidate = span.rstrip(".,:;").removeprefix("./").removeprefix(".venv/bin/")
        if any(mark in candidate for mark in "<>*…{}$=") or candidate.startswith(("/", "-", "http")):
            continue  # a placeholder, a glob, an option or an absolute path: not a repository path
        first = candidate.split("/", 1)[0]
        if ("/" in candidate and first in TOP_LEVEL) or (
            "/" not in candidate and candidate in TOP_LEVEL and candidate.endswith(FILE_SUFFIXES)
        ):
            paths.add(candidate.rstrip("/"))
    return paths


def named_modules(document: Path) -> set[str]:
    return {
        span.removesuffix("()")
        for span in CODE_SPAN.findall(document.read_text())
        if DOTTED.fullmatch(span.removesuffix("()"))
    }


def module_problem(dotted: str) -> str | None:
    """Why ``dotted`` names no module (or no name in its module) of the repository; None when it does."""
    parts = dotted.split(".")
    for length in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:length])
        source = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if source.exists():
            break
    else:
        return f"{dotted}: no such module"
    rest = parts[length:]
    if length < 2 and rest:
        return f"{dotted}: no module {'.'.join(parts[:2])}"
    if rest and not re.search(rf"\b{re.escape(rest[0])}\b", source.read_text()):
        return f"{dotted}: {source.relative_to(ROOT)} defines no {rest[0]}"
    return None


def test_the_checker_sees_paths_in_code_spans_and_links() -> None:
    document = ROOT / "docs" / "architecture.md"
    found = named_paths(document)
    assert {"guardrails/tags.py", "lambdas/clients.py"} <= found
    assert module_problem("lambdas.aws.stop_path.stop_hosts") is None
    assert module_problem("lambdas.aws.stop_path.no_such_function") is not None
    assert module_problem("guardrails.no_such_module") is not None


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_path_a_document_names_exists(document: Path) -> None:
    missing = sorted(path for path in named_paths(document) if not (ROOT / path).exists())
    assert not missing, f"{document.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_module_a_document_names_exists(document: Path) -> None:
    problems = sorted(filter(None, map(module_problem, named_modules(document))))
    assert not problems, f"{document.relative_to(ROOT)} names modules that do not exist: {problems}"


def test_the_architecture_cli_table_lists_every_registered_command() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("\n## CLI\n", 1)[1].split("\n### ", 1)[0]
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| `")]
    documented = {span.split()[0] for row in rows for span in re.findall(r"`([^`]+)`", row)}
    assert documented == set(COMMANDS)


def test_the_architecture_metric_table_matches_what_the_code_exports() -> None:
    """Every name in the table is exported; every fleet metric (agent, exporter, guardrails) is in it."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`(parkbrake_\w+)`", table))
    fleet, inference = fleet_metrics(), inference_metrics()
    scraped = {name.removesuffix("_total") for name in fleet | inference if not name.endswith("_created")}
    assert {name.removesuffix("_total") for name in documented} <= scraped
    assert {name.removesuffix("_total") for name in fleet if not name.endswith("_created")} <= {
        name.removesuffix("_total") for name in documented
    }


def test_the_settings_table_names_every_variable_of_the_settings() -> None:
    """Every variable guardrails.settings names is a row of the generated table in configuration.md,
    which the architecture page's Lambda environment section points to."""
    variables = {
        value
        for name, value in vars(settings).items()
        if name.isupper() and str(value).startswith("PARKBRAKE_")
    }
    text = (ROOT / "docs" / "configuration.md").read_text()
    table = text.split("\n## Guardrail settings\n", 1)[1].split("\n## ", 1)[0]
    assert variables
    assert variables <= set(re.findall(r"`(PARKBRAKE_\w+)`", table))
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    section = architecture.split("\n## The Lambda environment\n", 1)[1].split("\n## ", 1)[0]
    assert "configuration.md#guardrail-settings" in section
