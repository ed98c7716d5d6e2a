"""The rich console every command prints through."""

from __future__ import annotations

import os

from rich.console import Console

# Rich assumes 80 columns when output is not a terminal (a pipe, CI logs, a test); tables of hosts
# and resources are unreadable at that width, so such output gets a wide, fixed one, unless COLUMNS
# asks for a width.
UNATTENDED_WIDTH = 240


def console(*, stderr: bool = False, quiet: bool = False) -> Console:
    probe = Console(stderr=stderr)
    columns = os.environ.get("COLUMNS", "")
    width = None if probe.is_terminal else int(columns) if columns.isdigit() else UNATTENDED_WIDTH
    return Console(stderr=stderr, quiet=quiet, width=width)
