"""Guardrail Lambda code run inside a command (``reap``'s sweep, ``schedule run-now``'s launcher).

Inside Lambda that code logs every failure and prints its counters as embedded-metric JSON on
stdout, for CloudWatch. Run from the CLI, the command reports the outcome itself, once, as one clear
line per failure; with no logging configured, Python would also print each error log line on
stderr beside it, and the metric lines would break ``--output json``.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout


@contextmanager
def lambda_quiet(logger: str = "lambdas") -> Iterator[None]:
    """Within the block, ``logger``'s lines (and its children's) go nowhere and stdout is set aside."""
    quiet = logging.getLogger(logger)
    handler = logging.NullHandler()
    quiet.addHandler(handler)
    try:
        with redirect_stdout(io.StringIO()):
            yield
    finally:
        quiet.removeHandler(handler)
