"""The rich console every command prints through."""

from __future__ import annotations

from rich.console import Console

# Rich assumes 80 columns when output is not a terminal (a pipe, CI logs, a test); tables of hosts
# and resources are unreadable at that width, so such output gets a wide, fixed one.
UNATTENDED_WIDTH = 240


def console(*, stderr: bool = False, quiet: bool = False) -> Console:
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else UNATTENDED_WIDTH
    return Console(stderr=stderr, quiet=quiet, width=width)
