"""Monthly cost of a Kubernetes stack's GPU nodes, from its declared Karpenter NodePools and Deployments.

Karpenter has no desired size: a NodePool launches nodes for pending pods, up to its ``limits``. So:
- the worst case of a NodePool is its GPU limit ÷ the instance type's GPUs, as whole nodes, all month, on
  demand (parked, the limit is "0": nothing);
- its expected figure is the nodes its always-on pods keep up — the GPU requests of the Deployments placed
  on it (``nodeSelector`` ``karpenter.sh/nodepool``) × their replicas, packed onto whole nodes, never more
  than the limit allows. Batch jobs admitted by Kueue come and go and are not priced (the budget check
  reserves their cost in the ledger before they start). A spot NodePool is priced at the snapshot's highest
  zone price, as an EC2 spot pool is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any, Protocol

from guardrails.pricing import HOURS_PER_MONTH, PriceTable

NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
GPU_RESOURCE = "nvidia.com/gpu"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
NODE_POOL_LABEL = "karpenter.sh/nodepool"


class ResourceLike(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def inputs(self) -> Mapping[str, Any]: ...


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _requirement(template_spec: Mapping[str, Any], key: str) -> list[str]:
    for entry in template_spec.get("requirements") or []:
        requirement = _mapping(entry)
        if requirement.get("key") == key and requirement.get("operator") == "In":
            return [str(value) for value in requirement.get("values") or []]
    return []


def node_pool_gpu_limit(node_pool: ResourceLike) -> int | None:
    """The NodePool's ``limits["nvidia.com/gpu"]`` as a whole number, or None when it sets none (or not a number)."""
    limit = _mapping(_mapping(node_pool.inputs.get("spec")).get("limits")).get(GPU_RESOURCE)
    try:
        return int(str(limit)) if limit is not None else None
    except ValueError:
        return None


def deployment_gpus_by_node_pool(resources: Iterable[ResourceLike]) -> dict[str, int]:
    """GPUs requested by Deployments' replicas, per NodePool they are placed on."""
    gpus: dict[str, int] = {}
    for deployment in resources:
        if deployment.type != DEPLOYMENT:
            continue
        spec = _mapping(deployment.inputs.get("spec"))
        pod = _mapping(_mapping(spec.get("template")).get("spec"))
        pool = _mapping(pod.get("nodeSelector")).get(NODE_POOL_LABEL)
        per_pod = sum(
            int(str(_mapping(_mapping(container).get("resources")).get("requests", {}).get(GPU_RESOURCE, 0)))
            for container in pod.get("containers") or []
        )
        if pool and per_pod:
            gpus[str(pool)] = gpus.get(str(pool), 0) + per_pod * int(spec.get("replicas", 1) or 0)
    return gpus


def node_pool_items(
    resources: list[ResourceLike], prices: PriceTable, region: str
) -> Iterator[tuple[str, Decimal, Decimal, str]]:
    """(NodePool name, expected monthly USD, worst-case monthly USD, how) for every GPU NodePool."""
    always_on = deployment_gpus_by_node_pool(resources)
    for node_pool in resources:
        if node_pool.type != NODE_POOL:
            continue
        name = str(_mapping(node_pool.inputs.get("metadata")).get("name") or node_pool.name)
        template_spec = _mapping(_mapping(_mapping(node_pool.inputs.get("spec")).get("template")).get("spec"))
        instance_types = _requirement(template_spec, INSTANCE_TYPE_LABEL)
        limit = node_pool_gpu_limit(node_pool)
        if not instance_types or limit is None:
            continue
        instance_type = instance_types[0]
        per_node = prices.accelerators(instance_type) or 1
        on_demand = prices.on_demand(instance_type, region).usd_per_hour
        hourly, note = on_demand, ""
        if _requirement(template_spec, CAPACITY_TYPE_LABEL) == ["spot"]:
            zones = prices.spot_zones(instance_type, region)
            if zones:
                hourly = min(on_demand, max(zones.values()))
                note = f"; spot ${hourly}/h (snapshot {prices.spot.taken}), worst case on demand"
            else:
                note = "; spot, no price in the snapshot: priced on demand"
        most = limit // per_node
        wanted = always_on.get(name, 0)
        nodes = min(most, -(-wanted // per_node))
        yield (
            name,
            nodes * hourly * HOURS_PER_MONTH,
            most * on_demand * HOURS_PER_MONTH,
            f"Karpenter NodePool: {nodes} × {instance_type} for always-on pods ({wanted} GPU requested), "
            f"up to {most} ({limit} GPU limit ÷ {per_node}){note}",
        )
