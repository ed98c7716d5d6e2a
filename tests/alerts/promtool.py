"""promtool (Debian's prometheus package) for the alert and dashboard tests: skipped only off CI."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def promtool() -> str:
    """The promtool binary; CI (``.ci/run``) installs it, so under CI a missing one fails the test."""
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is not installed: .ci/run installs it with `apt-get install -y prometheus`")
        pytest.skip("promtool is not installed here (apt-get install prometheus); CI runs these tests")
    return found


def run_promtool(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *arguments], capture_output=True, text=True, cwd=ROOT, check=False)
