"""``parkbrake dev``: tools for working on parkbrake locally (a throwaway database).

The group's commands are this list of ``module:attribute`` targets, each imported when the group is: add a
command by adding its line. The group itself is registered lazily in cli/registry.py like every command.
"""

from __future__ import annotations

import importlib

import click

SUBCOMMANDS: list[str] = [
    "cli.dev.database:database",
]


@click.group()
def dev() -> None:
    """Local development: a throwaway PostgreSQL with the ledger's tables, for the ledger and inference."""


for _target in SUBCOMMANDS:
    _module, _, _attribute = _target.partition(":")
    dev.add_command(getattr(importlib.import_module(_module), _attribute))
