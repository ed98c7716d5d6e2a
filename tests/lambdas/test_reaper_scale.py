"""1,000 GPU hosts behind moto: the sweep pages through them with server-side filters (running and
stopped hosts in one listing) and stops them in one call, so its API calls grow with pages of hosts,
never with hosts."""

from __future__ import annotations

import math
import urllib.request
from collections.abc import Iterator

import pytest
from aws_fault_proxy import FaultProxy
from guardrail_fleet import ACCOUNT, AMI, REGION, client_factory, guardrail_settings, managed_tags, minutes

from lambdas.engines import sweeping

# 1,000 hosts, not more: moto renders ~30 ms of XML per instance in each DescribeInstances page, so
# 2,500 cost 85 s alone and over 300 s in a long single-process run; the calls count pages either way.
RESERVATIONS = 10
PER_RESERVATION = 100
PAGE_SIZE = 4  # moto counts MaxResults in reservations (AWS counts instances): 10 -> 3 pages


@pytest.fixture
def proxy(aws: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    # moto scans its ~1,300 default AMIs for every instance it creates; this account needs none.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    urllib.request.urlopen(urllib.request.Request(f"{aws}/moto-api/reset", method="POST"), timeout=30).close()
    with FaultProxy(aws) as running:
        yield running


def seed(instance_type: str, max_runtime: str) -> list[str]:
    """Create hosts in moto's in-process EC2 backend directly.

    Over HTTP, moto renders ~15 ms of XML per instance in each RunInstances answer (15 s for
    1,000); the sweep under test still reaches moto only over HTTP, through the proxy.
    """
    from moto.backends import get_backend

    backend = get_backend("ec2")[ACCOUNT][REGION]
    created: list[str] = []
    for _ in range(RESERVATIONS):
        reservation = backend.run_instances(
            AMI,
            PER_RESERVATION,
            None,
            [],
            instance_type=instance_type,
            is_instance_type_default=False,
            tags={"instance": managed_tags(max_runtime=max_runtime)},
        )
        created += [instance.id for instance in reservation.instances]
    return created


@pytest.mark.slow
def test_a_sweep_over_1000_hosts_costs_pages_not_hosts(proxy: FaultProxy) -> None:
    clients = client_factory(proxy.url)
    gpu = seed("g5.xlarge", "90m")
    launched = [
        i["LaunchTime"]
        for r in clients("ec2", REGION).describe_instances(InstanceIds=[gpu[0], gpu[-1]])["Reservations"]
        for i in r["Instances"]
    ]
    now = max(launched) + minutes(91)
    proxy.clear()

    settings = guardrail_settings()
    plan = sweeping.plan_sweep(settings, now=now, clients=clients, page_size=PAGE_SIZE)
    report = sweeping.execute_sweep(plan, settings, now=now, clients=clients, dry_run=False)

    assert report.errors == []
    assert len(plan.verdicts) == RESERVATIONS * PER_RESERVATION
    assert sorted(report.outcome.stopped) == sorted(gpu)
    # The pages of running and stopped hosts together, and every stop in one call (EC2 documents no
    # limit on StopInstances' ids); every host names this stack, so which stacks exist is never read.
    assert proxy.calls["DescribeInstances"] == math.ceil(RESERVATIONS / PAGE_SIZE)
    assert proxy.calls["StopInstances"] == 1
    assert sum(proxy.calls.values()) == 3 + 1

    proxy.clear()
    again = sweeping.plan_sweep(settings, now=now, clients=clients, page_size=PAGE_SIZE)
    # The same listing pages through the stopped hosts, but hosts stopped within the retention are not
    # judged worth a report.
    assert again.verdicts == []
    assert set(proxy.calls) == {"DescribeInstances"}
    # Pages, not hosts (moto may close the paged listing with one more, empty, page).
    assert proxy.calls["DescribeInstances"] <= math.ceil(RESERVATIONS / PAGE_SIZE) + 1
