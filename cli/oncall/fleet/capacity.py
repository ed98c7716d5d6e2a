"""What ``status`` shows besides hosts: each pool's Auto Scaling capacity and park record, and where
each service's load balancer sends its traffic."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cli.oncall.deploy.elb import routes_to
from cli.oncall.park.records import ParkRecord
from cli.oncall.stack_inventory import managed_groups
from guardrails import tags


@dataclass(frozen=True)
class GroupStatus:
    region: str
    stack: str
    name: str
    pool: str | None
    minimum: int
    desired: int
    maximum: int
    in_service: int
    park_record: ParkRecord | None
    surge: str | None  # the deploy's surge mark, while a deploy holds an extra host
    tenant: str | None = (
        None  # the pool's parkbrake:tenant tag: ``status --filter tenant=`` narrows pools too
    )

    def as_dict(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "stack": self.stack,
            "name": self.name,
            "pool": self.pool,
            "min": self.minimum,
            "desired": self.desired,
            "max": self.maximum,
            "in_service": self.in_service,
            "park_record": self.park_record.as_dict() if self.park_record else None,
            "deploy_surge": self.surge,
            "tenant": self.tenant,
        }


def groups_of(autoscaling: Any, region: str, stack: str) -> list[GroupStatus]:
    found = []
    for group in managed_groups(autoscaling, stack):
        group_tags = tags.as_dict(group.get("Tags"))
        found.append(
            GroupStatus(
                region=region,
                stack=stack,
                name=group["AutoScalingGroupName"],
                pool=group_tags.get(tags.POOL),
                minimum=group["MinSize"],
                desired=group["DesiredCapacity"],
                maximum=group["MaxSize"],
                in_service=sum(1 for i in group.get("Instances", []) if i["LifecycleState"] == "InService"),
                park_record=ParkRecord.parse(group_tags.get(tags.PARKED_CAPACITY)),
                surge=group_tags.get(tags.DEPLOY_SURGE),
                tenant=group_tags.get(tags.TENANT),
            )
        )
    return sorted(found, key=lambda item: item.name)


def service_traffic(elbv2: Any, services: Iterable[dict[str, Any]]) -> dict[str, str]:
    """ECS service name → where its load balancer sends it traffic ("listener :80 default 90%, …").

    A service behind no load balancer is absent; one behind a target group no route uses gets "none".
    """
    groups = {
        service["serviceName"]: lb["targetGroupArn"]
        for service in services
        for lb in service.get("loadBalancers", [])
        if lb.get("targetGroupArn")
    }
    if not groups:
        return {}
    routes = routes_to(elbv2, set(groups.values()))
    traffic = {}
    for name, arn in groups.items():
        shares = [
            f"{'default' if route.priority == 'default' else 'rule ' + route.priority} {route.percent(arn)}%"
            for route in routes
            if route.weights.get(arn, 0) > 0
        ]
        traffic[name] = ", ".join(shares) or "none"
    return traffic
