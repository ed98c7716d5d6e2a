"""Where a service's traffic goes: its colours, and every listener route that forwards to them.

A blue-green service has one ECS service and target group per colour and a listener whose default
action forwards to both with weights (the deploy moves those weights). Listener rules can forward
too (a path or host rule, say), so what takes traffic is read from every listener and rule of every
load balancer the colours' target groups are attached to, never from the default action alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cli.oncall.deploy.revisions import existing_services, list_service_names
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
