"""benchmarks/org_sweep.py's parkbrake side at a small scale: the fleet it seeds per account through
moto's backends is what the hub's central sweep finds through the spoke roles, and its calls are
one AssumeRole and one DescribeInstances per account (c7n-org's run is the benchmark's, not a test's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks import org_sweep
from benchmarks.harness import REGION, Moto


@pytest.fixture
def moto(monkeypatch: pytest.MonkeyPatch) -> Iterator[Moto]:
    # The harness turns moto's default images off process-wide; put back as it was after the test.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    running = Moto()
    for variable, value in {
        "AWS_ENDPOINT_URL": running.proxy.url,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "POWERTOOLS_METRICS_DISABLED": "true",
    }.items():
        monkeypatch.setenv(variable, value)
    try:
        yield running
    finally:
        running.close()


def test_the_hub_finds_every_accounts_due_hosts_in_two_calls_an_account(moto: Moto) -> None:
    accounts = org_sweep.member_accounts(3)
    due = org_sweep.seed_organisation(accounts, 100)
    org_sweep.publish_spokes(moto, accounts)
    run = org_sweep.parkbrake_sweep(moto)
    assert run()[0] == due  # the first run reads the spokes list too
    moto.proxy.clear()
    would_stop, _seconds = run()
    assert would_stop == due == 3 * 50
    assert dict(moto.proxy.calls) == {"AssumeRole": 3, "DescribeInstances": 3}
