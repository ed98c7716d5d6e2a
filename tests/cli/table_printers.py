"""Which registered commands print a table: found in the source, so a new one cannot be missed.

A function prints a table when it calls ``cli.table.print_table``, or calls a function that does
(followed through the module's own functions and its imports, module-level or inside functions,
``from m import f`` and ``from p import m as alias`` then ``alias.f``). A command prints one when
its callback does.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path

import click

from cli.registry import COMMANDS
from tests.conftest import REPO_ROOT

PRINT_TABLE = "cli.table:print_table"


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted((REPO_ROOT / "cli").rglob("*.py")):
        relative = path.relative_to(REPO_ROOT).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        yield ".".join(parts), ast.parse(Path(path).read_text())


def _imports(nodes: list[ast.stmt] | ast.AST) -> dict[str, str]:
    """Local name -> ``module`` or ``module:name`` for the imports among (or inside) ``nodes``."""
    found: dict[str, str] = {}
    for node in ast.walk(nodes) if isinstance(nodes, ast.AST) else nodes:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}:{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
    return found


def call_graph() -> dict[str, set[str]]:
    """``module:function`` -> the ``module:function`` names it calls (best effort, by name)."""
    graph: dict[str, set[str]] = {}
    for module, tree in _modules():
        top_imports = _imports(tree.body)
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        for function in (node for node in tree.body if isinstance(node, ast.FunctionDef)):
            names = top_imports | _imports(function)
            callees = set()
            for node in ast.walk(function):
                if not isinstance(node, ast.Call):
                    continue
                target = node.func
                if isinstance(target, ast.Name):
                    if target.id in names:
                        callees.add(names[target.id])
                    elif target.id in defined:
                        callees.add(f"{module}:{target.id}")
                elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    bound = names.get(target.value.id)
                    if bound is not None:
                        # ``from cli.oncall import extend as engine``: engine is the module cli.oncall.extend
                        as_module = bound.replace(":", ".")
                        callees.add(f"{as_module}:{target.attr}")
                        callees.add(f"{bound.split(':')[0]}:{target.attr}")
            graph[f"{module}:{function.name}"] = callees
    return graph


def table_printers() -> set[str]:
    graph = call_graph()
    printers = {PRINT_TABLE}
    grown = True
    while grown:
        grown = False
        for function, callees in graph.items():
            if function not in printers and callees & printers:
                printers.add(function)
                grown = True
    return printers


def leaf_commands() -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name in sorted(COMMANDS):
        module_name, attribute = COMMANDS[name].target.split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if isinstance(command, click.Group):
            found |= {f"{name} {sub}": command.commands[sub] for sub in sorted(command.commands)}
        else:
            found[name] = command
    return found


def table_printing_commands() -> set[str]:
    printers = table_printers()
    printing = set()
    for name, command in leaf_commands().items():
        callback = inspect.unwrap(command.callback) if command.callback else None
        if callback is not None and f"{callback.__module__}:{callback.__name__}" in printers:
            printing.add(name)
    return printing
