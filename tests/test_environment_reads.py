"""No module reads a ``PARKBRAKE_*`` variable itself: only the environment modules do.

Every variable is a row (or a declared variable) of ``guardrails/settings_table.py`` and is read
through ``guardrails/settings.py`` (``lambdas/aws/environment.py`` reads the Lambdas' once per
container). services/ is left out: the inference service keeps its own single settings module.
A read is a mapping's ``get``/``pop``/``setdefault``, ``os.getenv``, a subscript, an ``in`` test or a
click option's ``envvar`` whose key is a ``PARKBRAKE_*`` name, written out or held by a constant.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from guardrails import settings, settings_table
from tests.conftest import REPO_ROOT

PACKAGES = ("cli", "lambdas", "guardrails", "stacks", "components")
ENVIRONMENT_MODULES = {
    "guardrails/settings.py",
    "guardrails/settings_table.py",
    "lambdas/aws/environment.py",
}
VARIABLE = re.compile(r"PARKBRAKE_[A-Z0-9_]+")
READING_METHODS = {"get", "pop", "setdefault", "getenv"}
# The modules whose constants name variables, by the names a module imports them as.
DECLARING = {"guardrails.settings": settings, "guardrails.settings_table": settings_table}


def _constants(tree: ast.Module) -> dict[str, str]:
    """Names bound in the module to a ``PARKBRAKE_*`` string: its own constants and imported ones."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in DECLARING:
            for alias in node.names:
                value = getattr(DECLARING[node.module], alias.name, None)
                if isinstance(value, str):
                    names[alias.asname or alias.name] = value
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    names[target.id] = node.value.value
    # A constant copied from another (X_VARIABLE = SHUTDOWN_COMMAND) names the same variable.
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in names:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = names[node.value.id]
    return names


def _variable(node: ast.expr, constants: dict[str, str]) -> str | None:
    """The ``PARKBRAKE_*`` variable ``node`` names, if it names one."""
    value: object = None
    if isinstance(node, ast.Constant):
        value = node.value
    elif isinstance(node, ast.Name):
        value = constants.get(node.id)
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        module = {"settings": settings, "settings_table": settings_table, "variables": settings_table}.get(
            node.value.id
        )
        value = getattr(module, node.attr, None) if module else None
    return value if isinstance(value, str) and VARIABLE.fullmatch(value) else None


def reads_of(source: str) -> list[str]:
    """Each ``PARKBRAKE_*`` read in ``source``, as ``line: variable``."""
    tree = ast.parse(source)
    constants = _constants(tree)
    found: list[str] = []

    def note(node: ast.AST, key: ast.expr) -> None:
        variable = _variable(key, constants)
        if variable is not None:
            found.append(f"{getattr(node, 'lineno', 0)}: {variable}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
            if name in READING_METHODS and node.args:
                note(node, node.args[0])
            for keyword in node.keywords:
                if keyword.arg == "envvar" and isinstance(keyword.value, ast.Constant):
                    note(node, keyword.value)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            note(node, node.slice)
        elif isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
            note(node, node.left)
    return found


def modules() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (REPO_ROOT / package).rglob("*.py")
        if path.relative_to(REPO_ROOT).as_posix() not in ENVIRONMENT_MODULES
    )


@pytest.mark.parametrize("path", modules(), ids=lambda path: path.relative_to(REPO_ROOT).as_posix())
def test_no_module_reads_a_parkbrake_variable_itself(path: Path) -> None:
    assert reads_of(path.read_text()) == [], "read it through guardrails.settings (a row of settings_table)"


@pytest.mark.parametrize(
    "source",
    [
        'import os\ncap = os.environ.get("PARKBRAKE_DEFAULT_MAX_RUNTIME", "90m")\n',
        'import os\nVARIABLE = "PARKBRAKE_WHEEL_CACHE"\npath = os.environ[VARIABLE]\n',
        "from guardrails.settings import REGIONS\ndef f(environ):\n    return environ.get(REGIONS)\n",
        "from guardrails import settings\ndef f(environ):\n    return settings.STACK in environ\n",
        'import os\nos.getenv("PARKBRAKE_STACK")\n',
        'import click\nclick.option("--stack", envvar="PARKBRAKE_STACK")\n',
    ],
)
def test_the_check_finds_a_read_however_it_is_spelled(source: str) -> None:
    assert len(reads_of(source)) == 1


def test_writing_a_childs_environment_and_naming_a_variable_in_help_are_not_reads() -> None:
    source = (
        'import os, subprocess\nsubprocess.run(["x"], env={**os.environ, "PARKBRAKE_ON_EXIT": "stop"})\n'
        'HELP = "Also $PARKBRAKE_STACK."\n'
    )
    assert reads_of(source) == []


def test_every_variable_the_process_modules_read_is_declared_in_the_table() -> None:
    """What guardrails.settings.process_variable accepts is what the table declares, and nothing else."""
    for item in settings_table.PROCESS:
        assert settings.process_variable({item.variable: " x "}, item.variable) == "x"
    with pytest.raises(KeyError, match="not declared"):
        settings.process_variable({}, "PARKBRAKE_UNDECLARED")
