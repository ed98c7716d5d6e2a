"""Serving hosts at their lifetime are rotated, never left at zero healthy hosts (moto's server)."""

from __future__ import annotations

from typing import Any

import pytest
from guardrail_fleet import (
    REGION,
    client_factory,
    create_pool,
    group_instances,
    group_of,
    guardrail_settings,
    latest_launch,
    managed_tags,
    minutes,
    states,
)

from guardrails import tags
from guardrails.rotation import GroupState, rotation_step
from lambdas import reaper
from lambdas.aws.environment import ClientFactory

SERVING = managed_tags(pool="inference", tenant="product", max_runtime="90m", **{tags.SERVING: "true"})


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    return client_factory(aws)


def serving_pool(clients: ClientFactory, *, desired: int, max_size: int) -> tuple[str, list[str], Any]:
    autoscaling, ec2 = clients("autoscaling", REGION), clients("ec2", REGION)
    group = create_pool(
        autoscaling, ec2, pool="inference", desired=desired, max_size=max_size, group_tags=SERVING
    )
    hosts = group_instances(autoscaling, group)
    return group, hosts, latest_launch(ec2, hosts) + minutes(100)


def rotations(result: dict[str, Any]) -> dict[str, str]:
    return {step["instance_id"]: step["step"] for step in result["rotations"]}


def test_a_serving_host_is_replaced_first_then_removed(clients: ClientFactory) -> None:
    autoscaling, ec2 = clients("autoscaling", REGION), clients("ec2", REGION)
    group, [old], later = serving_pool(clients, desired=1, max_size=2)
    settings = guardrail_settings()

    first = reaper.handle({}, settings=settings, clients=clients, now=later)
    [replacement] = [host for host in group_instances(autoscaling, group) if host != old]
    described = ec2.describe_instances(InstanceIds=[old])["Reservations"][0]["Instances"][0]

    assert rotations(first) == {old: "replace"}
    assert first["stopped"] == []
    assert first["errors"] == []
    assert states(ec2, [old]) == {old: "running"}  # still serving while the replacement starts
    assert tags.ROTATING_SINCE in tags.as_dict(described["Tags"])
    # The deadline schedule's event for the old host: the replacement is not due yet.
    second = reaper.handle({"instance_ids": [old]}, settings=settings, clients=clients, now=later)
    assert rotations(second) == {old: "remove"}
    assert group_instances(autoscaling, group) == [replacement]
    assert group_of(autoscaling, group)["DesiredCapacity"] == 1
    assert states(ec2, [replacement]) == {replacement: "running"}


def test_the_old_host_stays_while_its_replacement_is_unhealthy(clients: ClientFactory) -> None:
    autoscaling, ec2 = clients("autoscaling", REGION), clients("ec2", REGION)
    group, [old], later = serving_pool(clients, desired=1, max_size=2)
    settings = guardrail_settings()
    reaper.handle({}, settings=settings, clients=clients, now=later)
    [replacement] = [host for host in group_instances(autoscaling, group) if host != old]
    autoscaling.set_instance_health(InstanceId=replacement, HealthStatus="Unhealthy")

    waiting = reaper.handle({"instance_ids": [old]}, settings=settings, clients=clients, now=later)

    assert rotations(waiting) == {old: "wait"}
    assert states(ec2, [old]) == {old: "running"}
    assert old in group_instances(autoscaling, group)


def test_a_group_at_its_maximum_keeps_its_only_host_and_says_so(clients: ClientFactory) -> None:
    autoscaling, ec2 = clients("autoscaling", REGION), clients("ec2", REGION)
    group, [only], later = serving_pool(clients, desired=1, max_size=1)

    result = reaper.handle({}, settings=guardrail_settings(), clients=clients, now=later)

    assert rotations(result) == {only: "blocked"}
    assert states(ec2, [only]) == {only: "running"}
    assert group_of(autoscaling, group)["DesiredCapacity"] == 1
    assert [error["instance_id"] for error in result["errors"]] == [only]
    assert "raise the pool's max" in result["errors"][0]["error"]


def test_a_dry_run_rotates_nothing(clients: ClientFactory) -> None:
    autoscaling = clients("autoscaling", REGION)
    group, [old], later = serving_pool(clients, desired=1, max_size=2)

    result = reaper.handle({"dry_run": True}, settings=guardrail_settings(), clients=clients, now=later)

    assert rotations(result) == {old: "replace"}
    assert group_instances(autoscaling, group) == [old]
    assert group_of(autoscaling, group)["DesiredCapacity"] == 1


@pytest.mark.parametrize(
    ("healthy", "desired", "marked", "step"),
    [
        ({"i-old"}, 1, False, "replace"),
        ({"i-old"}, 2, True, "wait"),  # the replacement is not healthy yet
        ({"i-old", "i-new"}, 2, True, "remove"),
        ({"i-new"}, 2, True, "wait"),  # the old one is already unhealthy: wait for the group
        ({"i-old", "i-a", "i-b"}, 4, True, "wait"),
        ({"i-old"}, 2, False, "blocked"),
    ],
)
def test_rotation_never_removes_the_only_healthy_host(
    healthy: set[str], desired: int, marked: bool, step: str
) -> None:
    host_tags = {tags.SERVING: "true", **({tags.ROTATING_SINCE: "2026-01-01T00:00:00Z"} if marked else {})}
    group = GroupState("parkbrake-test-inference", desired=desired, max_size=2, healthy=frozenset(healthy))
    rotation = rotation_step("i-old", host_tags, group)
    assert rotation.step == step
    if rotation.step == "remove":
        assert group.healthy - {"i-old"}
