"""``parkbrake k8s``: the Kubernetes stack's commands (render its objects; the budget check and its controller).

The group's commands are this list of ``module:attribute`` targets, each imported when the group is: add a
command by adding its line. The group itself is registered lazily in cli/registry.py like every command.
"""

from __future__ import annotations

import importlib

import click

SUBCOMMANDS: list[str] = [
    "cli.k8s.render:render",
    "cli.k8s.check:check",
    "cli.k8s.controller:controller",
    "cli.k8s.park:park",
    "cli.k8s.window:window",
]


@click.group()
def k8s() -> None:
    """The Kubernetes stack: render its objects, decide and run the budget admission check."""


for _target in SUBCOMMANDS:
    _module, _, _attribute = _target.partition(":")
    k8s.add_command(getattr(importlib.import_module(_module), _attribute))
