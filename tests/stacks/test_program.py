"""The whole program under the mock engine: what every resource of the example stacks must satisfy."""

from __future__ import annotations

import functools

import pytest

from stacks.config import load_stack_config
from stacks.offline import OfflineRun, run_offline
from stacks.platform import build_platform
from tests.conftest import REPO_ROOT

# Inputs that give a resource a physical name of the stack's choosing, which AWS keeps unique.
PHYSICAL_NAMES = ("name", "clusterIdentifier", "identifier", "replicationGroupId", "userId", "userGroupId")
SERVICE = "aws:ecs/service:Service"
ASSOCIATION = "aws:ecs/clusterCapacityProviders:ClusterCapacityProviders"


@functools.cache
def planned(stack: str) -> OfflineRun:
    config = load_stack_config(stack, REPO_ROOT)
    return run_offline(lambda: build_platform(config), stack=stack, region=config.region)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_named_resource_is_deleted_before_it_is_replaced(stack: str) -> None:
    """A replacement under the same name would collide with the old resource; auto-names never do."""
    named = [
        resource
        for resource in planned(stack).resources
        if resource.custom and any(key in resource.inputs for key in PHYSICAL_NAMES)
    ]

    assert len(named) > 30
    assert [r.urn for r in named if not r.delete_before_replace] == []


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_services_on_a_capacity_provider_wait_for_the_cluster_association(stack: str) -> None:
    run = planned(stack)

    (association,) = run.of_type(ASSOCIATION)
    on_providers = [s for s in run.of_type(SERVICE) if s.inputs.get("capacityProviderStrategies")]
    assert {s.name for s in on_providers} == {"inference-blue", "inference-green"}
    assert all(association.urn in service.dependencies for service in on_providers)
