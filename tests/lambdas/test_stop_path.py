"""The one stop path, as the ledger's hard limits and the reaper call it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy, ProxiedRequest
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
from lambdas.aws.stop_path import GROUP_REMOVAL_WORKERS, stop_hosts


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
    alone = launch(ec2, "g5.xlarge", managed_tags(), count=120)
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
    assert proxy.calls["StopInstances"] == 1  # 120 hosts, one call (EC2 documents no limit)
    assert proxy.calls["TerminateInstances"] == 1
    assert proxy.calls["TerminateInstanceInAutoScalingGroup"] == 2
    assert set(states(ec2, alone).values()) == {"stopped"}
    assert group_of(autoscaling, group)["DesiredCapacity"] == 0
    assert outcome.action_of(spot[0]) == "terminate"


def test_one_vanished_host_among_many_is_found_by_halves_not_host_by_host(proxy: FaultProxy) -> None:
    """The whole set goes in one call; when it fails, halves find the bad host in a few calls and every
    other host is stopped."""
    clients = client_factory(proxy.url)
    ec2, autoscaling = clients("ec2", REGION), clients("autoscaling", REGION)
    alone = launch(ec2, "g5.xlarge", managed_tags(), count=64)
    hosts = hosts_of(ec2, alone)
    gone = alone[37]
    proxy.clear()
    proxy.fail(
        "StopInstances",
        "InvalidInstanceID.NotFound",
        f"The instance ID '{gone}' does not exist",
        matches=lambda request: gone in request.text,
    )

    outcome = stop_hosts(hosts, reason="test", ec2=ec2, autoscaling=autoscaling)

    assert [(error["instance_id"], error["action"]) for error in outcome.errors] == [(gone, "stop")]
    assert sorted(outcome.stopped) == sorted(set(alone) - {gone})
    # 64 -> 32 + 32 -> 16 + 16 (the bad half) -> 16 hosts one by one: 1 + 2 + 2 + 16 calls, not 1 + 64.
    assert proxy.calls["StopInstances"] == 21
    assert set(states(ec2, [i for i in alone if i != gone]).values()) == {"stopped"}


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


class InFlight:
    """Holds each removal's answer a moment and counts how many were in flight at once."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s, self.now, self.most = hold_s, 0, 0
        self._lock = threading.Lock()

    def __call__(self, answer: bytes) -> bytes:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.hold_s)
        with self._lock:
            self.now -= 1
        return answer


def naming(*instance_ids: str) -> Any:
    def matches(request: ProxiedRequest) -> bool:
        return any(instance_id in request.text for instance_id in instance_ids)

    return matches


@pytest.fixture
def serial_proxy(aws: str) -> Iterator[FaultProxy]:
    with FaultProxy(aws, serial_upstream=True) as running:
        yield running


def test_removals_from_groups_run_side_by_side_and_each_error_stays_on_its_host(
    serial_proxy: FaultProxy,
) -> None:
    """20 hosts in two groups: one denied, one throttled past every retry; the other 18 leave their
    groups, at most GROUP_REMOVAL_WORKERS calls at a time, and the outcome keeps the hosts' order."""
    proxy = serial_proxy
    clients = client_factory(proxy.url)
    ec2, autoscaling = clients("ec2", REGION), clients("autoscaling", REGION)
    groups = [
        create_pool(autoscaling, ec2, pool=pool, desired=10, max_size=10) for pool in ("training", "batch")
    ]
    members = [group_instances(autoscaling, group) for group in groups]
    hosts = hosts_of(ec2, [*members[0], *members[1]])
    denied, throttled = members[0][3], members[1][4]
    proxy.clear()
    proxy.fail(
        "TerminateInstanceInAutoScalingGroup",
        "AccessDenied",
        "not authorized to perform: autoscaling:TerminateInstanceInAutoScalingGroup",
        status=403,
        matches=naming(denied),
    )
    proxy.fail(
        "TerminateInstanceInAutoScalingGroup", "Throttling", "Rate exceeded", matches=naming(throttled)
    )
    in_flight = InFlight(hold_s=0.2)
    proxy.rewrite("TerminateInstanceInAutoScalingGroup", in_flight)

    outcome = stop_hosts(hosts, reason="test", ec2=ec2, autoscaling=autoscaling)

    assert outcome.removed_from_group == [
        h.instance_id for h in hosts if h.instance_id not in (denied, throttled)
    ]
    assert [(e["instance_id"], e["action"], e["error"].split(":")[0]) for e in outcome.errors] == [
        (denied, "remove-from-group", "AccessDenied"),
        (throttled, "remove-from-group", "Throttling"),
    ]
    assert (
        proxy.failed["TerminateInstanceInAutoScalingGroup"] > 2
    )  # the denied call, the throttled one retried
    assert 1 < in_flight.most <= GROUP_REMOVAL_WORKERS
    remaining = {group: group_instances(autoscaling, group) for group in groups}
    assert remaining == {groups[0]: [denied], groups[1]: [throttled]}
    assert [group_of(autoscaling, group)["DesiredCapacity"] for group in groups] == [1, 1]
