"""Failures injected at the HTTP layer by a real proxy in front of moto: throttling, missing
permissions, vanished instances. One host's error never stops the others, and a run with any
error writes no heartbeat, so the dead-man's-switch alarm pages."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

import pytest
from aws_fault_proxy import FaultProxy, ProxiedRequest
from guardrail_fleet import (
    REGION,
    STACK,
    client_factory,
    create_pool,
    group_instances,
    guardrail_settings,
    heartbeats,
    latest_launch,
    launch,
    managed_tags,
    metric_value,
    minutes,
    published,
    sns_queue,
    states,
)

from lambdas import reaper
from lambdas.aws.environment import ClientFactory


@pytest.fixture
def proxy(aws: str) -> Iterator[FaultProxy]:
    with FaultProxy(aws) as running:
        yield running


def about(instance_id: str) -> Callable[[ProxiedRequest], bool]:
    """Match the calls that name ``instance_id``."""

    def matches(request: ProxiedRequest) -> bool:
        return instance_id in request.text

    return matches


@dataclass
class DueFleet:
    alone: list[str]
    spot: str
    group: str
    grouped: list[str]
    now: datetime


def due_fleet(clients: ClientFactory) -> DueFleet:
    ec2, autoscaling = clients("ec2", REGION), clients("autoscaling", REGION)
    alone = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"), count=3)
    spot = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"), spot=True)[0]
    group = create_pool(
        autoscaling, ec2, pool="training", desired=2, group_tags=managed_tags(max_runtime="90m")
    )
    grouped = group_instances(autoscaling, group)
    return DueFleet(alone, spot, group, grouped, latest_launch(ec2, [*alone, spot, *grouped]) + minutes(91))


def test_throttling_is_absorbed_by_botocore_retries(proxy: FaultProxy) -> None:
    clients = client_factory(proxy.url, max_attempts=5)
    fleet = due_fleet(clients)
    proxy.fail("StopInstances", "RequestLimitExceeded", "Request limit exceeded.", status=503, times=2)

    result = reaper.handle({}, settings=guardrail_settings(), clients=clients, now=fleet.now)

    assert result["errors"] == []
    assert set(result["stopped"]) == {*fleet.alone, fleet.spot, *fleet.grouped}
    assert proxy.failed["StopInstances"] == 2
    assert proxy.calls["StopInstances"] == 3  # one batch, retried twice
    assert set(states(clients("ec2", REGION), fleet.alone).values()) == {"stopped"}


def test_throttling_that_outlasts_the_retries_fails_only_that_host(
    proxy: FaultProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    clients = client_factory(proxy.url, max_attempts=2)
    fleet = due_fleet(clients)
    stuck = fleet.alone[1]
    proxy.fail(
        "StopInstances", "RequestLimitExceeded", "Request limit exceeded.", status=503, matches=about(stuck)
    )
    result = reaper.handle({}, settings=guardrail_settings(), clients=clients, now=fleet.now)

    assert [(e["instance_id"], e["error"].split(":")[0]) for e in result["errors"]] == [
        (stuck, "RequestLimitExceeded")
    ]
    assert set(result["stopped"]) == {fleet.alone[0], fleet.alone[2], fleet.spot, *fleet.grouped}
    assert states(clients("ec2", REGION), fleet.alone) == {
        fleet.alone[0]: "stopped",
        stuck: "running",
        fleet.alone[2]: "stopped",
    }
    assert heartbeats(clients) == []
    out = capsys.readouterr().out
    assert metric_value(out, "GuardrailLastSuccess", Guardrail="reaper") is None
    assert metric_value(out, "GuardrailActions", Guardrail="reaper", Action="error", Reason="stop") == 1


def test_missing_stop_permission_is_reported_pages_and_spares_the_rest(proxy: FaultProxy) -> None:
    """The dead-man's switch: ec2:StopInstances denied. Every stand-alone host reports the error,
    the Auto Scaling and spot hosts (other API calls) are still taken off the bill, the summary
    carries the errors, and no heartbeat is written, so the alarm on missing data pages."""
    clients = client_factory(proxy.url)
    fleet = due_fleet(clients)
    topic, queue_url = sns_queue(clients)
    proxy.fail(
        "StopInstances",
        "UnauthorizedOperation",
        "You are not authorized to perform this operation.",
        status=403,
    )

    result = reaper.handle(
        {}, settings=guardrail_settings(sns_topic_arn=topic), clients=clients, now=fleet.now
    )

    assert sorted(e["instance_id"] for e in result["errors"]) == sorted(fleet.alone)
    assert {e["error"].split(":")[0] for e in result["errors"]} == {"UnauthorizedOperation"}
    assert set(result["stopped"]) == {fleet.spot, *fleet.grouped}
    assert proxy.calls["StopInstances"] == 1 + len(fleet.alone)  # the batch, then host by host
    assert group_instances(clients("autoscaling", REGION), fleet.group) == []
    assert heartbeats(clients) == []
    [message] = published(clients, queue_url)
    assert message["Subject"] == f"parkbrake {STACK} sweep: 3 stopped, 3 error(s), 0 finding(s)"
    assert "Failed to stop (3):" in message["Message"]
    assert message["Message"].count("action: failed to stop: UnauthorizedOperation") == 3


def test_a_vanished_instance_fails_alone(proxy: FaultProxy) -> None:
    clients = client_factory(proxy.url)
    fleet = due_fleet(clients)
    gone = fleet.alone[0]
    proxy.fail(
        "StopInstances",
        "InvalidInstanceID.NotFound",
        f"The instance ID '{gone}' does not exist",
        matches=about(gone),
    )

    result = reaper.handle({}, settings=guardrail_settings(), clients=clients, now=fleet.now)

    assert [e["instance_id"] for e in result["errors"]] == [gone]
    assert set(fleet.alone[1:]) <= set(result["stopped"])


def test_a_group_that_refuses_to_shrink_fails_only_its_host(proxy: FaultProxy) -> None:
    """AWS refuses to decrement below the group's MinSize (moto does not check); that host is reported."""
    clients = client_factory(proxy.url)
    fleet = due_fleet(clients)
    pinned = fleet.grouped[0]
    proxy.fail(
        "TerminateInstanceInAutoScalingGroup",
        "ValidationError",
        "Currently, desiredSize equals minSize (1). Terminating instance without replacement will violate "
        "group's min size constraint. Either set shouldDecrementDesiredCapacity flag to false or lower "
        "group's min size.",
        matches=about(pinned),
    )

    result = reaper.handle({}, settings=guardrail_settings(), clients=clients, now=fleet.now)

    assert [(e["instance_id"], e["action"]) for e in result["errors"]] == [(pinned, "remove-from-group")]
    assert "min size" in result["errors"][0]["error"]
    assert group_instances(clients("autoscaling", REGION), fleet.group) == [pinned]
    assert set(fleet.alone) <= set(result["stopped"])


def test_listing_denied_is_an_error_not_an_empty_fleet(proxy: FaultProxy) -> None:
    clients = client_factory(proxy.url)
    fleet = due_fleet(clients)
    proxy.fail("DescribeInstances", "UnauthorizedOperation", "You are not authorized.", status=403)

    result = reaper.handle({}, settings=guardrail_settings(), clients=clients, now=fleet.now)

    assert result["checked"] == 0
    assert result["errors"] == [
        {"region": REGION, "action": "list", "error": "UnauthorizedOperation: You are not authorized."}
    ]
    assert heartbeats(clients) == []
