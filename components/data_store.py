"""What the Database and the Cache share: a subnet group in the private subnets, and a security group
that admits the store's port from the security groups of its clients only — never from a CIDR, so an
adopted VPC's other tenants (or a VPN) cannot reach it.

Clients are admitted after they exist (``admit``), since the program declares the stores first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import pulumi
import pulumi_aws as aws

from components.common import child_of

Service = Literal["rds", "elasticache"]


class DataStore(pulumi.ComponentResource):
    """A component holding a private data store; subclasses declare the store after ``_network``."""

    security_group_id: pulumi.Output[str]

    def _network(
        self,
        name: str,
        *,
        service: Service,
        description: str,
        port: int,
        vpc_id: pulumi.Input[str],
        subnet_ids: pulumi.Input[Sequence[str]],
        tags: Mapping[str, str],
    ) -> pulumi.Output[str]:
        """Declare the subnet group and the (ingress-less) security group; returns the subnet group's name."""
        self._name = name
        self._port = port
        self._tags = dict(tags)
        subnet_type = aws.rds.SubnetGroup if service == "rds" else aws.elasticache.SubnetGroup
        subnet_group = subnet_type(
            f"{name}-subnets",
            description=f"{description}: private subnets",
            subnet_ids=subnet_ids,
            tags=dict(tags),
            opts=child_of(self),
        )
        security_group = aws.ec2.SecurityGroup(
            f"{name}-access",
            description=f"{description}: port {port} from its clients security groups only",
            vpc_id=vpc_id,
            tags=dict(tags),
            opts=child_of(self),
        )
        self.security_group_id = security_group.id
        return subnet_group.name

    def admit(self, client: str, client_security_group_id: pulumi.Input[str]) -> None:
        """Let one client (by its security group) reach the store's port."""
        aws.vpc.SecurityGroupIngressRule(
            f"{self._name}-from-{client}",
            security_group_id=self.security_group_id,
            referenced_security_group_id=client_security_group_id,
            ip_protocol="tcp",
            from_port=self._port,
            to_port=self._port,
            description=f"{client} to port {self._port}",
            tags=self._tags,
            opts=child_of(self),
        )
