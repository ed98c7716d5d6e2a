"""The components as a Pulumi component package (components/package/): the committed schema is the
one the SDK's analyzer infers from the annotations, and a construct call through the SDK's component
provider — the path `pulumi package add` programs take — builds the real component with its inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pulumi.provider.experimental.component import ComponentProvider
from ruamel.yaml import YAML

from components.package.schema import SCHEMA_FILE, package_schema, package_version
from components.package.wrappers import COMPONENTS, PACKAGE
from stacks.offline import OfflineRun, run_offline

GROUP = "aws:autoscaling/group:Group"
POOL_INPUTS: dict[str, Any] = {
    "stack": "dev",
    "pool": "training",
    "role": "training",
    "instanceType": "g5.12xlarge",
    "tenant": "research",
    "min": 0,
    "desired": 1,
    "max": 4,
    "maxRuntime": "4h",
    "vpcId": "vpc-0123456789abcdef0",
    "subnetIds": ["subnet-0a", "subnet-0b"],
    "capacityType": "spot",
}


def test_the_committed_schema_is_the_one_the_sdk_infers() -> None:
    committed = json.loads(SCHEMA_FILE.read_text())
    assert committed == package_schema(), "run `python -m components.package.schema` and commit schema.json"


def test_the_schema_names_each_component_with_its_inputs_and_outputs() -> None:
    schema = package_schema()
    assert schema["name"] == PACKAGE
    assert schema["version"] == package_version()
    assert set(schema["resources"]) == {f"parkbrake:index:{c.__name__}" for c in COMPONENTS}
    pool = schema["resources"]["parkbrake:index:GpuPool"]
    assert pool["isComponent"] is True
    assert {"maxRuntime", "instanceType", "subnetIds", "capacityType"} <= set(pool["inputProperties"])
    assert "capacityType" not in pool["requiredInputs"]
    assert pool["inputProperties"]["role"]["$ref"] == "#/types/parkbrake:index:Role"
    assert {value["value"] for value in schema["types"]["parkbrake:index:Role"]["enum"]} == {
        "training",
        "inference",
    }
    assert set(pool["properties"]) == {
        "launchTemplateId",
        "autoscalingGroupName",
        "autoscalingGroupArn",
        "securityGroupId",
    }
    assert "4h" in pool["inputProperties"]["maxRuntime"]["description"]


def test_the_plugin_runs_on_pythons_component_host() -> None:
    folder = SCHEMA_FILE.parent
    plugin = YAML(typ="safe").load((folder / "PulumiPlugin.yaml").read_text())
    assert plugin["runtime"]["name"] == "python"
    assert "component_provider_host(COMPONENTS" in (folder / "__main__.py").read_text()


def construct(component: str, inputs: dict[str, Any]) -> OfflineRun:
    provider = ComponentProvider(COMPONENTS, PACKAGE, version=package_version())

    def program() -> None:
        provider.construct("training", f"parkbrake:index:{component}", inputs, None)

    return run_offline(program, stack="dev", region="us-east-1")


def test_a_construct_call_builds_the_real_pool_from_the_schemas_inputs() -> None:
    run = construct("GpuPool", POOL_INPUTS)
    by_type = {resource.type: resource for resource in run.resources}
    outer, inner = by_type["parkbrake:index:GpuPool"], by_type["parkbrake:aws:GpuPool"]
    assert inner.parent == outer.urn
    group = by_type[GROUP]
    assert (group.inputs["minSize"], group.inputs["maxSize"]) == (0, 4)
    tags = {tag["key"]: tag["value"] for tag in group.inputs["tags"]}
    assert tags["parkbrake:max-runtime"] == "4h"
    assert tags["parkbrake:tenant"] == "research"
    # spot: the group buys its hosts through a mixed-instances policy at the spot price
    assert "mixedInstancesPolicy" in group.inputs


def test_a_network_construct_declares_a_vpc() -> None:
    run = construct("Network", {"stack": "dev", "cidr": "10.50.0.0/16"})
    vpcs = [resource for resource in run.resources if resource.type == "aws:ec2/vpc:Vpc"]
    assert [vpc.inputs["cidrBlock"] for vpc in vpcs] == ["10.50.0.0/16"]


def test_cache_and_database_constructs_declare_their_stores() -> None:
    private = {"vpcId": "vpc-0123456789abcdef0", "subnetIds": ["subnet-0a", "subnet-0b"]}
    cache = construct("Cache", {"stack": "dev", "nodeType": "cache.t4g.small", "nodes": 2, **private})
    (group,) = [r for r in cache.resources if r.type == "aws:elasticache/replicationGroup:ReplicationGroup"]
    assert (group.inputs["nodeType"], group.inputs["numCacheClusters"]) == ("cache.t4g.small", 2)
    database = construct(
        "Database",
        {
            "stack": "dev",
            "minAcu": 0,
            "maxAcu": 4,
            "storageGb": 20,
            "parked": True,
            "autoPauseAfter": "10m",
            **private,
        },
    )
    (cluster,) = [r for r in database.resources if r.type == "aws:rds/cluster:Cluster"]
    scaling = cluster.inputs["serverlessv2ScalingConfiguration"]
    assert (scaling["minCapacity"], scaling["maxCapacity"], scaling["secondsUntilAutoPause"]) == (0, 4, 600)


@pytest.mark.parametrize(
    ("component", "inputs", "message"),
    [
        (
            "GpuPool",
            POOL_INPUTS | {"maxRuntime": "90 minutes"},
            "GpuPool.max_runtime: '90 minutes' is not a duration",
        ),
        ("GpuPool", POOL_INPUTS | {"min": 3}, "GpuPool.min/desired/max: 3/1/4"),
        ("GpuPool", POOL_INPUTS | {"role": "batch"}, "Invalid value batch"),
        (
            "GpuPool",
            {k: v for k, v in POOL_INPUTS.items() if k != "maxRuntime"},
            "Missing required input 'maxRuntime'",
        ),
        ("Network", {"stack": "dev", "publicSubnetIds": ["subnet-0a"]}, "Network: subnet ids are only used"),
    ],
    ids=["bad-duration", "bad-capacity", "unknown-role", "missing-input", "subnets-without-vpc"],
)
def test_bad_inputs_fail_naming_the_field(component: str, inputs: dict[str, Any], message: str) -> None:
    with pytest.raises(Exception) as raised:  # noqa: PT011  # the host wraps the component's own error
        construct(component, inputs)
    assert message in str(raised.value) + str(raised.value.__cause__ or "") + repr(raised.value)


def test_the_schema_file_is_packaged() -> None:
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '"package/schema.json"' in pyproject
