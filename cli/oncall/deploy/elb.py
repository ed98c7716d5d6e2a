"""Every Elastic Load Balancing call of a deploy, a rollback, an abort, ``verify`` and ``status``: where a
service's traffic goes (its colours, every listener route that forwards to them), the colours' target
health, and the listener's weights moved.

A blue-green service has one ECS service and target group per colour and a listener whose default
action forwards to both with weights (the deploy moves those weights). Listener rules can forward
too (a path or host rule, say), so what takes traffic is read from every listener and rule of every
load balancer the colours' target groups are attached to, never from the default action alone.

No other module calls Elastic Load Balancing; ``tests/test_aws_conversations.py`` fails naming any that does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cli.oncall.ecs import existing_services, list_service_names
from guardrails import names
from guardrails.errors import InputError, ParkbrakeError


@dataclass(frozen=True)
class Topology:
    """A blue-green service: one ECS service and target group per colour, one weighted listener."""

    cluster: str
    service: str
    services: dict[str, str]  # colour → ECS service name
    target_groups: dict[str, str]  # colour → target group ARN
    listener_arn: str


def find_topology(ecs: Any, elbv2: Any, cluster: str, service: str) -> Topology | None:
    """The colours of ``service`` and their listener; None when ``service`` is a plain ECS service."""
    coloured = {colour: names.ecs_service(service, colour) for colour in names.COLOURS}
    found = existing_services(ecs, cluster, [*coloured.values(), service])
    if not any(name in found for name in coloured.values()):
        if service in found:
            return None
        known = ", ".join(sorted(list_service_names(ecs, cluster))) or "none"
        raise InputError(
            f"unknown service {service!r}: cluster {cluster} has no such service — its services: {known}"
        )
    missing = [name for name in coloured.values() if name not in found]
    if missing:
        raise ParkbrakeError(f"{service} is half blue-green: cluster {cluster} has no {', '.join(missing)}")
    target_groups = {}
    for colour, name in coloured.items():
        arns = [
            lb["targetGroupArn"] for lb in found[name].get("loadBalancers", []) if lb.get("targetGroupArn")
        ]
        if len(arns) != 1:
            raise ParkbrakeError(f"{name} must be behind exactly one target group (it has {len(arns)})")
        target_groups[colour] = arns[0]
    listener = _shared_listener(elbv2, target_groups.values())
    return Topology(cluster, service, coloured, target_groups, listener["ListenerArn"])


def _shared_listener(elbv2: Any, target_groups: Iterable[str]) -> dict[str, Any]:
    wanted = set(target_groups)
    groups = elbv2.describe_target_groups(TargetGroupArns=sorted(wanted))["TargetGroups"]
    for load_balancer in sorted({arn for group in groups for arn in group.get("LoadBalancerArns", [])}):
        pages = elbv2.get_paginator("describe_listeners").paginate(LoadBalancerArn=load_balancer)
        for listener in (item for page in pages for item in page["Listeners"]):
            if wanted <= set(forward_weights(listener)):
                return dict(listener)
    raise ParkbrakeError("no load balancer listener forwards to both colours' target groups")


def forward_weights(listener: Mapping[str, Any]) -> dict[str, int]:
    """Target group ARN → weight of the listener's default weighted forward."""
    return action_weights(listener.get("DefaultActions", []))


def action_weights(actions: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Target group ARN → weight of the forward among ``actions`` (a plain forward weighs 1)."""
    for action in actions:
        if action.get("Type") == "forward":
            groups = action.get("ForwardConfig", {}).get("TargetGroups", [])
            if groups:
                return {group["TargetGroupArn"]: int(group.get("Weight", 1)) for group in groups}
            return {action["TargetGroupArn"]: 1} if action.get("TargetGroupArn") else {}
    return {}


def colour_weights(elbv2: Any, topology: Topology) -> dict[str, int]:
    """Colour → the listener's weight for it, read now."""
    listener = elbv2.describe_listeners(ListenerArns=[topology.listener_arn])["Listeners"][0]
    weights = forward_weights(listener)
    return {colour: weights.get(arn, 0) for colour, arn in topology.target_groups.items()}


def set_colour_weights(elbv2: Any, topology: Topology, weights: Mapping[str, int]) -> bool:
    """The listener's default forward to these colour weights (stickiness kept); False, and no call,
    when it forwards so already."""
    listener = elbv2.describe_listeners(ListenerArns=[topology.listener_arn])["Listeners"][0]
    forward = next(action for action in listener["DefaultActions"] if action["Type"] == "forward")
    stickiness = forward.get("ForwardConfig", {}).get("TargetGroupStickinessConfig", {"Enabled": False})
    current = forward_weights(listener)
    wanted = {topology.target_groups[colour]: weight for colour, weight in weights.items()}
    if all(current.get(arn) == weight for arn, weight in wanted.items()):
        return False
    groups = [{"TargetGroupArn": arn, "Weight": weight} for arn, weight in wanted.items()]
    elbv2.modify_listener(
        ListenerArn=topology.listener_arn,
        DefaultActions=[
            {
                "Type": "forward",
                "ForwardConfig": {"TargetGroups": groups, "TargetGroupStickinessConfig": stickiness},
            }
        ],
    )
    return True


def healthy_targets(elbv2: Any, target_group: str) -> int:
    answer = elbv2.describe_target_health(TargetGroupArn=target_group)
    return sum(1 for item in answer["TargetHealthDescriptions"] if item["TargetHealth"]["State"] == "healthy")


def deregistration_delay(elbv2: Any, target_group: str) -> timedelta:
    """How long the target group lets in-flight requests be answered by a target it deregisters."""
    attributes = elbv2.describe_target_group_attributes(TargetGroupArn=target_group)["Attributes"]
    seconds = next(
        (a["Value"] for a in attributes if a["Key"] == "deregistration_delay.timeout_seconds"), "0"
    )
    return timedelta(seconds=int(seconds))


@dataclass(frozen=True)
class Route:
    """One way a request reaches target groups: a listener's default action or one of its rules."""

    listener_arn: str
    port: int | None
    priority: str  # "default", or the rule's priority
    conditions: str  # what the rule matches, for people ("path /*"); empty for the default action
    weights: dict[str, int]  # target group ARN → weight

    @property
    def name(self) -> str:
        if self.priority == "default":
            return f"listener :{self.port} default action"
        return f"listener :{self.port} rule {self.priority} ({self.conditions or 'no conditions'})"

    def percent(self, target_group: str) -> int:
        total = sum(self.weights.values())
        return round(100 * self.weights.get(target_group, 0) / total) if total else 0


def routes_to(elbv2: Any, target_groups: Iterable[str]) -> list[Route]:
    """Every default action and rule, of every listener on the load balancers of ``target_groups``,
    that forwards to at least one of them."""
    wanted = set(target_groups)
    groups = elbv2.describe_target_groups(TargetGroupArns=sorted(wanted))["TargetGroups"]
    routes = []
    for load_balancer in sorted({arn for group in groups for arn in group.get("LoadBalancerArns", [])}):
        pages = elbv2.get_paginator("describe_listeners").paginate(LoadBalancerArn=load_balancer)
        for listener in (item for page in pages for item in page["Listeners"]):
            routes += _listener_routes(elbv2, listener)
    return [route for route in routes if wanted & set(route.weights)]


def _listener_routes(elbv2: Any, listener: Mapping[str, Any]) -> list[Route]:
    arn, port = listener["ListenerArn"], listener.get("Port")
    routes = [Route(arn, port, "default", "", forward_weights(listener))]
    for rule in elbv2.describe_rules(ListenerArn=arn)["Rules"]:
        if rule.get("IsDefault"):
            continue
        conditions = ", ".join(_condition_text(condition) for condition in rule.get("Conditions", []))
        routes.append(Route(arn, port, str(rule["Priority"]), conditions, action_weights(rule["Actions"])))
    return routes


def _condition_text(condition: Mapping[str, Any]) -> str:
    field = condition.get("Field", "?")
    config: Any = next((value for key, value in condition.items() if key.endswith("Config")), {})
    values = config.get("Values") if isinstance(config, Mapping) else None
    values = values or condition.get("Values") or []
    return f"{field} {'|'.join(str(value) for value in values)}".strip()


def colour_traffic(routes: Iterable[Route], topology: Topology) -> dict[str, list[tuple[Route, int]]]:
    """Colour → each route sending it traffic, with the percent of that route's requests."""
    traffic: dict[str, list[tuple[Route, int]]] = {colour: [] for colour in topology.target_groups}
    for route in routes:
        for colour, arn in topology.target_groups.items():
            if route.weights.get(arn, 0) > 0:
                traffic[colour].append((route, route.percent(arn)))
    return traffic
