"""A failure line across the organisation at 80 columns: wrapped at spaces, so an ARN or an account id
moves whole to the next line instead of being cut by the terminal."""

from __future__ import annotations

import pytest

from cli.oncall.organisation import echo_failures

ARN = "arn:aws:iam::316215886750:role/parkbrake-oncall-reader-with-a-long-name"


def test_a_long_failure_keeps_every_arn_whole_at_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    echo_failures(
        [f"finance (316215886750): cannot assume {ARN}: AccessDenied: User: {ARN} is not authorized"]
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("error: finance (316215886750): cannot assume")
    assert all(len(line) <= 80 for line in lines)
    assert sum(line.count(ARN) for line in lines) == 2
    assert all(line.startswith("  ") for line in lines[1:])
