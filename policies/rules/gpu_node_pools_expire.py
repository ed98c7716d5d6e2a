"""Every Karpenter GPU NodePool expires its nodes within the runtime ceiling and limits its GPUs.

``template.spec.expireAfter`` is the Kubernetes counterpart of a host's ``parkbrake:max-runtime``: Karpenter
forcefully replaces a node at that age, so a node cannot outlive the cap even when the sweep is down.
``Never`` (or no value: Karpenter's default is 720h) would leave a GPU node running for weeks. The GPU limit
bounds what the pool can launch at once, and is what parking sets to "0".
"""

from __future__ import annotations

from collections.abc import Iterator

from guardrails.durations import DurationError, format_duration, parse_duration
from policies.kubernetes_fields import (
    GPU_RESOURCE,
    NODE_POOL,
    is_gpu_node_pool,
    node_pool_template_spec,
    spec,
)
from policies.resources import mapping
from policies.rule import PolicyContext, PolicyRule, ResourceView, per_resource


def expiry_problems(node_pool: ResourceView, context: PolicyContext) -> Iterator[str]:
    if not is_gpu_node_pool(node_pool):
        return
    ceiling = format_duration(context.max_runtime_ceiling)
    expire_after = node_pool_template_spec(node_pool).get("expireAfter")
    if expire_after is None or expire_after == "Never":
        shown = "is not set (Karpenter's default is 720h)" if expire_after is None else "is Never"
        yield f"template.spec.expireAfter {shown}; set the pool's cap, at most {ceiling}"
    else:
        try:
            parse_duration(expire_after, ceiling=context.max_runtime_ceiling)
        except DurationError as error:
            yield f"template.spec.expireAfter: {error}"
    limit = mapping(spec(node_pool).get("limits")).get(GPU_RESOURCE)
    if limit is None:
        yield f'has no limits["{GPU_RESOURCE}"]; set the pool\'s maximum in GPUs ("0" parked)'
    elif not str(limit).isdigit():
        yield f'limits["{GPU_RESOURCE}"] is {limit!r}; use a whole number of GPUs such as "16"'


RULE = PolicyRule(
    name="gpu-node-pools-expire",
    description=(
        "Every Karpenter NodePool that launches GPU nodes has a finite template.spec.expireAfter within the "
        "runtime ceiling and a whole-number nvidia.com/gpu limit."
    ),
    enforcement="mandatory",
    check=per_resource((NODE_POOL,), expiry_problems),
    settings=("max_runtime_ceiling",),
)
