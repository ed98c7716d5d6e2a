"""Network under the offline engine: a new two-AZ VPC, or an existing one adopted untouched."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from offline_outputs import capture

from components.network import Network, NetworkArgs, plan_subnets
from stacks.offline import OfflineRun, RegisteredResource, run_offline

REGION = "us-east-1"
TAGS = {"parkbrake:managed": "true", "parkbrake:stack": "dev", "parkbrake:revision": "abc123"}
VPC = "aws:ec2/vpc:Vpc"
SUBNET = "aws:ec2/subnet:Subnet"
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
ASSOCIATION = "aws:ec2/routeTableAssociation:RouteTableAssociation"
NAT = "aws:ec2/natGateway:NatGateway"
GATEWAY = "aws:ec2/internetGateway:InternetGateway"


def build(args: NetworkArgs) -> tuple[OfflineRun, dict[str, Any]]:
    outputs: dict[str, Any] = {}

    def program() -> None:
        network = Network("network", args)
        capture(
            {
                "vpc_id": network.vpc_id,
                "public": network.public_subnet_ids,
                "private": network.private_subnet_ids,
            },
            into=outputs,
        )

    return run_offline(program, stack="dev", region=REGION), outputs


def subnets_of(run: OfflineRun, tier: str) -> list[RegisteredResource]:
    return [subnet for subnet in run.of_type(SUBNET) if f"-{tier}-" in subnet.name]


def table_of(run: OfflineRun, subnet_id: str) -> RegisteredResource:
    (association,) = [item for item in run.of_type(ASSOCIATION) if item.inputs["subnetId"] == subnet_id]
    (table,) = [
        table
        for table in run.of_type(ROUTE_TABLE)
        if association.inputs["routeTableId"].rsplit("-", 1)[0] == table.name
    ]
    return table


def test_new_vpc_spans_two_zones_with_a_public_and_a_private_subnet_in_each() -> None:
    run, outputs = build(NetworkArgs(stack="dev", cidr="10.40.0.0/16", tags=TAGS))

    (vpc,) = run.of_type(VPC)
    assert vpc.inputs["cidrBlock"] == "10.40.0.0/16"
    assert vpc.inputs["enableDnsHostnames"] is True
    network = ipaddress.ip_network("10.40.0.0/16")
    blocks = [ipaddress.ip_network(subnet.inputs["cidrBlock"]) for subnet in run.of_type(SUBNET)]
    assert all(block.subnet_of(network) for block in blocks)
    assert not any(a.overlaps(b) for i, a in enumerate(blocks) for b in blocks[i + 1 :])
    for tier in ("public", "private"):
        subnets = subnets_of(run, tier)
        assert {subnet.inputs["availabilityZone"] for subnet in subnets} == {"us-east-1a", "us-east-1b"}
        assert all(subnet.inputs["mapPublicIpOnLaunch"] is False for subnet in subnets)
        assert all(subnet.inputs["vpcId"] == outputs["vpc_id"] for subnet in subnets)
    assert len(outputs["public"]) == len(outputs["private"]) == 2


def test_public_subnets_route_to_the_internet_gateway_and_private_ones_through_one_nat() -> None:
    run, outputs = build(NetworkArgs(stack="dev", tags=TAGS))

    (gateway,) = run.of_type(GATEWAY)
    (nat,) = run.of_type(NAT)
    assert nat.inputs["subnetId"] in outputs["public"], "the NAT gateway needs a public subnet"
    for subnet_id in outputs["public"]:
        (route,) = table_of(run, subnet_id).inputs["routes"]
        assert route == {"cidrBlock": "0.0.0.0/0", "gatewayId": route["gatewayId"]}
        assert route["gatewayId"].startswith(gateway.name)
    for subnet_id in outputs["private"]:
        (route,) = table_of(run, subnet_id).inputs["routes"]
        assert route["cidrBlock"] == "0.0.0.0/0"
        assert route["natGatewayId"].startswith(nat.name)
        assert "gatewayId" not in route


def test_every_network_resource_is_a_tagged_child_of_the_component() -> None:
    run, _ = build(NetworkArgs(stack="dev", tags=TAGS))

    (component,) = run.of_type("parkbrake:aws:Network")
    children = [resource for resource in run.resources if resource is not component]
    assert [child.urn for child in run.children_of(component)] == [child.urn for child in children]
    assert all(resource.custom for resource in children)
    tagged = [resource for resource in children if "tags" in resource.inputs]
    assert {resource.type for resource in tagged} >= {VPC, SUBNET, ROUTE_TABLE, NAT, GATEWAY}
    for resource in tagged:
        assert resource.inputs["tags"].items() >= TAGS.items()
        assert resource.inputs["tags"]["Name"].startswith("parkbrake-dev-")


def test_adopting_an_existing_vpc_creates_nothing_and_passes_its_ids_through() -> None:
    args = NetworkArgs(
        stack="prod",
        vpc_id="vpc-0abc",
        public_subnet_ids=("subnet-pub-a", "subnet-pub-b"),
        private_subnet_ids=("subnet-priv-a", "subnet-priv-b"),
        tags=TAGS,
    )
    run, outputs = build(args)

    assert [resource.type for resource in run.resources] == ["parkbrake:aws:Network"]
    assert run.of_type(VPC) == []
    assert outputs == {
        "vpc_id": "vpc-0abc",
        "public": ["subnet-pub-a", "subnet-pub-b"],
        "private": ["subnet-priv-a", "subnet-priv-b"],
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"private_subnet_ids": ("subnet-a", "subnet-b")}, "only used when adopting"),
        ({"vpc_id": "vpc-0abc", "public_subnet_ids": ("subnet-a",)}, "needs both"),
        ({"vpc_id": "vpc-0abc"}, "needs both"),
    ],
)
def test_half_specified_adoption_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NetworkArgs(stack="dev", **fields)


@pytest.mark.parametrize("cidr", ["10.40.0.0/16", "172.16.8.0/22", "192.168.1.0/24"])
def test_subnet_plan_quarters_the_vpc_cidr(cidr: str) -> None:
    plan = plan_subnets(cidr)

    network = ipaddress.ip_network(cidr)
    blocks = [ipaddress.ip_network(block) for block in plan.public + plan.private]
    assert len(plan.public) == len(plan.private) == 2
    assert all(block.prefixlen == network.prefixlen + 2 for block in blocks)
    assert sum(block.num_addresses for block in blocks) == network.num_addresses
