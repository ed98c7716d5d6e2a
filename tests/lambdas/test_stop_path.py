"""The one stop path, as the ledger's hard limits and the reaper call it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy
from guardrail_fleet import (
    REGION,
    client_factory,
    create_pool,
    group_instances,
    group_of,
    launch,
    managed_tags,
    states,
)

from guardrails.hosts import Host
from lambdas.aws.stop_path import BATCH_SIZE, stop_hosts


@pytest.fixture
def proxy(aws: str) -> Iterator[FaultProxy]:
    with FaultProxy(aws) as running:
        yield running


def hosts_of(ec2: Any, instance_ids: list[str]) -> list[Host]:
    reservations = ec2.describe_instances(InstanceIds=instance_ids)["Reservations"]
    return [Host.from_instance(i, REGION) for r in reservations for i in r["Instances"]]


def test_each_kind_of_host_leaves_the_bill_its_own_way(proxy: FaultProxy) -> None:
    clients = client_factory(proxy.url)
    ec2, autoscaling = clients("ec2", REGION), clients("autoscaling", REGION)
    alone = launch(ec2, "g5.xlarge", managed_tags(), count=BATCH_SIZE + 20)
    spot = launch(ec2, "g5.xlarge", managed_tags(), spot=True)
    group = create_pool(autoscaling, ec2, pool="training", desired=2)
    grouped = group_instances(autoscaling, group)
    hosts = hosts_of(ec2, [*alone, *spot, *grouped])
    proxy.clear()

    outcome = stop_hosts(hosts, reason="test", ec2=ec2, autoscaling=autoscaling)

    assert (sorted(outcome.stopped), outcome.terminated, sorted(outcome.removed_from_group)) == (
        sorted(alone),
        spot,
        grouped,
    )
    assert outcome.errors == []
    assert proxy.calls["StopInstances"] == 2  # 120 hosts, batches of 100
    assert proxy.calls["TerminateInstances"] == 1
    assert proxy.calls["TerminateInstanceInAutoScalingGroup"] == 2
    assert set(states(ec2, alone).values()) == {"stopped"}
    assert group_of(autoscaling, group)["DesiredCapacity"] == 0
    assert outcome.action_of(spot[0]) == "terminate"


def test_dry_run_calls_nothing(proxy: FaultProxy) -> None:
    clients = client_factory(proxy.url)
    ec2 = clients("ec2", REGION)
    alone = launch(ec2, "g5.xlarge", managed_tags(), count=2)
    hosts = hosts_of(ec2, alone)
    proxy.clear()

    outcome = stop_hosts(
        hosts, reason="test", ec2=ec2, autoscaling=clients("autoscaling", REGION), dry_run=True
    )

    assert (sorted(outcome.acted), outcome.dry_run) == (sorted(alone), True)
    assert dict(proxy.calls) == {}
    assert set(states(ec2, alone).values()) == {"running"}


def test_a_bad_spot_action_is_refused_before_any_call(aws: str) -> None:
    with pytest.raises(ValueError, match="spot_action"):
        stop_hosts([], reason="test", ec2=None, autoscaling=None, spot_action="hibernate")  # type: ignore[arg-type]
