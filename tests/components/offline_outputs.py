"""The values a component's Outputs resolved to during ``run_offline``, for assertions afterwards."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from stacks.offline import OfflineRun, input_changes


def capture(outputs: Mapping[str, pulumi.Output[Any]], into: dict[str, Any]) -> None:
    """Fill ``into`` with each output's value as the offline engine resolves it (done when the run returns)."""
    for key, output in outputs.items():
        output.apply(lambda value, key=key: into.__setitem__(key, value))


def changed_inputs(before: OfflineRun, after: OfflineRun) -> set[tuple[str, str, str]]:
    """(type, name, input path) of every input that differs between two runs of the same program."""
    assert {(r.type, r.name) for r in before.resources} == {(r.type, r.name) for r in after.resources}
    return {(change.type, change.name, change.input) for change in input_changes(before, after)}
