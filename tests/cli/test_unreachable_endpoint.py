"""An AWS endpoint that cannot be reached: one line naming the endpoint tried and the fix, within seconds.

botocore's adaptive retries tried a refused connection eight times with backoff (~10 s for the same
answer); a connection that could not be opened is now tried twice (lambdas/clients.py).
"""

from __future__ import annotations

import socket
import time

import pytest
from click.testing import CliRunner

from cli.main import parkbrake
from lambdas import clients

# Generous on purpose: the bound is for "seconds, not ten", on a busy two-core machine, never a tight timing.
SECONDS_AT_MOST = 5.0


@pytest.fixture
def closed_endpoint(monkeypatch: pytest.MonkeyPatch) -> str:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return endpoint


def test_a_refused_endpoint_is_one_line_naming_it_and_the_fix(closed_endpoint: str) -> None:
    started = time.monotonic()
    result = CliRunner().invoke(parkbrake, ["reap", "--dry-run", "--stack", "dev"])
    elapsed = time.monotonic() - started

    assert result.exit_code == 1, result.output
    assert result.stderr == (
        f"Error: cannot reach the AWS endpoint {closed_endpoint} (connection refused) — check "
        "AWS_ENDPOINT_URL (unset it to use AWS itself) and that the server there is up\n"
    )
    assert "Traceback" not in result.output
    assert elapsed < SECONDS_AT_MOST


def test_a_connection_that_cannot_be_opened_is_tried_twice_not_eight_times(closed_endpoint: str) -> None:
    sts = clients.client("sts")
    attempts: list[str] = []
    sts.meta.events.register("before-send.sts", lambda **_: attempts.append("sent"))

    with pytest.raises(clients.EndpointConnectionError, match="Could not connect to the endpoint URL"):
        sts.get_caller_identity()

    assert len(attempts) == clients.UNREACHABLE_ATTEMPTS == 2


class _ThirdAttempt(Exception):
    """Raised on a call's third send: enough to show the retries go on."""


def test_in_lambda_a_connection_that_cannot_be_opened_keeps_its_retries(
    closed_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "parkbrake-dev-reaper")
    sts = clients.client("sts")
    attempts: list[str] = []

    def count(**_: object) -> None:
        attempts.append("sent")
        if len(attempts) == 3:
            raise _ThirdAttempt

    sts.meta.events.register("before-send.sts", count)
    with pytest.raises(_ThirdAttempt):
        sts.get_caller_identity()
    assert len(attempts) == 3 > clients.UNREACHABLE_ATTEMPTS
