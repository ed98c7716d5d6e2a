"""The garbage collector ``status`` pauses is running again afterwards, however the block ended."""

from __future__ import annotations

import gc

import pytest
from aws_fault_proxy import FaultProxy
from click.testing import CliRunner

from cli.main import parkbrake
from cli.oncall.collector import collector_paused


def read_that_fails() -> None:
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves the outer one's pause in place
        raise RuntimeError("the read failed")


def test_paused_inside_and_running_again_after_an_error_and_after_nesting() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="the read failed"):
        read_that_fails()
    assert gc.isenabled()


def test_a_collector_turned_off_before_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_status_that_fails_leaves_the_collector_running(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with FaultProxy(aws) as proxy:
        proxy.fail("DescribeInstances", "UnauthorizedOperation", "not authorized", status=403)
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        result = CliRunner().invoke(parkbrake, ["status", "--regions", "us-east-1"])

    assert result.exit_code == 1
    assert "cannot list instances: UnauthorizedOperation" in result.output
    assert gc.isenabled()
