"""``Network``: the VPC every other component lives in, or an existing one adopted as it is.

A new VPC gets a public and a private subnet in each of two availability zones, an internet
gateway for the public tier and ONE NAT gateway for the private tier. One NAT gateway costs one
gateway-hour (about $33 a month plus data) instead of two, at the price of private egress in the
second zone depending on the first zone: if that zone fails, private subnets lose outbound
internet (image pulls, pip) until it returns. GPU hosts and services are stateless and re-launch,
so the platform trades that availability for half the NAT bill; a stack that cannot accept it
adopts a VPC it built itself.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.common import child_of, type_token
from guardrails import names

AVAILABILITY_ZONES = 2
ANYWHERE = "0.0.0.0/0"


@dataclass
class NetworkArgs:
    stack: str
    cidr: str = "10.40.0.0/16"
    # Adopting: an existing VPC and its subnets are used as they are and nothing is created.
    vpc_id: str | None = None
    public_subnet_ids: Sequence[str] = ()
    private_subnet_ids: Sequence[str] = ()
    tags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.vpc_id is None and (self.public_subnet_ids or self.private_subnet_ids):
            raise ValueError("subnet ids are only used when adopting an existing VPC; set vpc_id too")
        if self.vpc_id is not None and not (self.public_subnet_ids and self.private_subnet_ids):
            raise ValueError(f"adopting {self.vpc_id} needs both public_subnet_ids and private_subnet_ids")

    @property
    def adopts_existing(self) -> bool:
        return self.vpc_id is not None


@dataclass(frozen=True)
class SubnetPlan:
    """Where each tier's subnets go: the VPC's CIDR cut into four equal blocks, two per tier."""

    public: tuple[str, ...]
    private: tuple[str, ...]


def named_tags(args: NetworkArgs, suffix: str) -> dict[str, str]:
    return {**args.tags, "Name": f"{names.prefix(args.stack)}-{suffix}"}


def plan_subnets(cidr: str) -> SubnetPlan:
    blocks = [str(block) for block in ipaddress.ip_network(cidr).subnets(prefixlen_diff=2)]
    return SubnetPlan(public=tuple(blocks[:AVAILABILITY_ZONES]), private=tuple(blocks[AVAILABILITY_ZONES:]))


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    public_subnet_ids: pulumi.Output[list[str]]
    private_subnet_ids: pulumi.Output[list[str]]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(type_token("Network"), name, None, opts)
        if args.adopts_existing:
            self.vpc_id = pulumi.Output.from_input(str(args.vpc_id))
            self.public_subnet_ids = pulumi.Output.from_input(list(args.public_subnet_ids))
            self.private_subnet_ids = pulumi.Output.from_input(list(args.private_subnet_ids))
        else:
            self._create_vpc(name, args)
        self.register_outputs(
            {
                "vpcId": self.vpc_id,
                "publicSubnetIds": self.public_subnet_ids,
                "privateSubnetIds": self.private_subnet_ids,
            }
        )

    def _create_vpc(self, name: str, args: NetworkArgs) -> None:
        zones = aws.get_availability_zones_output(
            state="available", opts=pulumi.InvokeOutputOptions(parent=self)
        )
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.cidr,
            enable_dns_support=True,
            enable_dns_hostnames=True,  # RDS and ElastiCache endpoints resolve through VPC DNS
            tags=named_tags(args, "vpc"),
            opts=child_of(self),
        )
        gateway = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags=named_tags(args, "igw"), opts=child_of(self)
        )
        plan = plan_subnets(args.cidr)
        public, private = (
            [
                aws.ec2.Subnet(
                    f"{name}-{tier}-{index}",
                    vpc_id=vpc.id,
                    cidr_block=cidr,
                    availability_zone=zones.names.apply(lambda zone_names, index=index: zone_names[index]),
                    # Nothing gets a public address by accident; the NAT gateway and ALBs bring their own.
                    map_public_ip_on_launch=False,
                    tags=named_tags(args, f"{tier}-{index}"),
                    opts=child_of(self),
                )
                for index, cidr in enumerate(blocks)
            ]
            for tier, blocks in (("public", plan.public), ("private", plan.private))
        )
        nat_address = aws.ec2.Eip(
            f"{name}-nat-eip", domain="vpc", tags=named_tags(args, "nat"), opts=child_of(self)
        )
        nat = aws.ec2.NatGateway(
            f"{name}-nat",
            allocation_id=nat_address.id,
            subnet_id=public[0].id,
            tags=named_tags(args, "nat"),
            opts=child_of(self, depends_on=[gateway]),
        )
        self._route_tables(name, args, vpc, public=(public, gateway), private=(private, nat))

        self.vpc_id = vpc.id
        self.public_subnet_ids = pulumi.Output.all(*[subnet.id for subnet in public])
        self.private_subnet_ids = pulumi.Output.all(*[subnet.id for subnet in private])

    def _route_tables(
        self,
        name: str,
        args: NetworkArgs,
        vpc: aws.ec2.Vpc,
        *,
        public: tuple[list[aws.ec2.Subnet], aws.ec2.InternetGateway],
        private: tuple[list[aws.ec2.Subnet], aws.ec2.NatGateway],
    ) -> None:
        """The public tier routes out through the internet gateway, the private tier through the NAT."""
        (public_subnets, gateway), (private_subnets, nat) = public, private
        for tier, subnets, target in (
            (
                "public",
                public_subnets,
                aws.ec2.RouteTableRouteArgs(cidr_block=ANYWHERE, gateway_id=gateway.id),
            ),
            (
                "private",
                private_subnets,
                aws.ec2.RouteTableRouteArgs(cidr_block=ANYWHERE, nat_gateway_id=nat.id),
            ),
        ):
            table = aws.ec2.RouteTable(
                f"{name}-{tier}-routes",
                vpc_id=vpc.id,
                routes=[target],
                tags=named_tags(args, tier),
                opts=child_of(self),
            )
            for index, subnet in enumerate(subnets):
                aws.ec2.RouteTableAssociation(
                    f"{name}-{tier}-routes-{index}",
                    route_table_id=table.id,
                    subnet_id=subnet.id,
                    opts=child_of(self),
                )
