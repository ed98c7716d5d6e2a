"""The values a component's Outputs resolved to during ``run_offline``, for assertions afterwards."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi


def capture(outputs: Mapping[str, pulumi.Output[Any]], into: dict[str, Any]) -> None:
    """Fill ``into`` with each output's value as the offline engine resolves it (done when the run returns)."""
    for key, output in outputs.items():
        output.apply(lambda value, key=key: into.__setitem__(key, value))
