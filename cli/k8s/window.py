"""``parkbrake k8s window``: the nightly schedule of a Kubernetes stack, as its pool's NodePool window.

The stack's ``parkbrake-window`` CronJob (components/k8s/nightly_window.py) runs it every few minutes
as the ``parkbrake-park`` account; it sets the nightly pool's NodePool to what the window says now
(guardrails/nightly_window.py): open, a GPU limit of the nightly ``capacity`` nodes; closed, a limit of
"0" and the pool's NodeClaims deleted (Karpenter's maintainers' recipe for a scheduled stop:
karpenter-provider-aws #3539, #7010). Each run sets the whole state, so a missed run is made good by
the next. A NodePool parked by ``park --now`` (its ``parkbrake.dev/gpu-limit-before-park`` record) is
left alone: the brake outranks the schedule until ``unpark --now``; a parked stack suspends the CronJob.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.k8s.api import NODE_CLAIMS, ApiError, KubernetesApi
from cli.k8s.park import (
    GPU_LIMIT_BEFORE_PARK,
    GPU_RESOURCE,
    NODE_POOLS,
    NODEPOOL_LABEL,
    KubernetesPark,
    ObjectChange,
    Status,
    delete_claim,
    echo_changes,
    listed,
)
from cli.k8s.server_options import api_from_options, with_server_options
from cli.options import output_option, project_dir_option, stack_option
from guardrails.errors import InputError

if TYPE_CHECKING:
    from guardrails.nightly_window import Window
    from guardrails.pricing import PriceTable
    from stacks.config import StackConfig


def nightly_window(config: StackConfig, now: datetime) -> tuple[str, Window]:
    """The nightly pool's NodePool and its window at ``now``."""
    from guardrails.closed_days import parse_closed_days
    from guardrails.nightly_window import window_at
    from stacks.kubernetes_config import nodepool_name

    nightly = config.nightly
    if nightly is None:
        raise InputError(f"stack {config.stack!r} has no parkbrake:nightly section: it has no window")
    pool = config.pools[nightly.pool]
    closed = parse_closed_days(nightly.calendar, "nightly.calendar") if nightly.calendar else None
    window = window_at(nightly.cron, nightly.timezone, pool.max_runtime, now, closed)
    return nodepool_name(pool.tenant, pool.name), window


def apply_window(
    api: KubernetesApi, config: StackConfig, prices: PriceTable, now: datetime, *, dry_run: bool
) -> tuple[Window, KubernetesPark]:
    """Set the nightly pool's NodePool as its window is at ``now``; the window and what changed."""
    node_pool, window = nightly_window(config, now)
    assert config.nightly is not None  # nightly_window refused a stack without one
    pool = config.pools[config.nightly.pool]
    wanted = (
        str(config.nightly.capacity * (prices.accelerators(pool.instance_type) or 0)) if window.open else "0"
    )
    result = KubernetesPark(parking=not window.open, dry_run=dry_run)
    pools = listed(api, result, "nodepool", NODE_POOLS)
    found = [item for item in pools if item["metadata"]["name"] == node_pool]
    if not found and not result.errors:
        error = "no such NodePool on the cluster: apply the stack (pulumi up)"
        result.objects.append(
            ObjectChange("nodepool", node_pool, "set the window's GPU limit", "failed", error)
        )
    for item in found:
        _set_limit(api, result, item, wanted)
    if found and not window.open and not _parked(found[0]):
        for claim in sorted(
            listed(api, result, "nodeclaim", NODE_CLAIMS), key=lambda c: str(c["metadata"]["name"])
        ):
            if (claim["metadata"].get("labels") or {}).get(NODEPOOL_LABEL) == node_pool:
                delete_claim(api, result, str(claim["metadata"]["name"]))
    return window, result


def _parked(item: dict[str, Any]) -> bool:
    return GPU_LIMIT_BEFORE_PARK in (item["metadata"].get("annotations") or {})


def _set_limit(api: KubernetesApi, result: KubernetesPark, item: dict[str, Any], wanted: str) -> None:
    name = str(item["metadata"]["name"])
    current = str(((item.get("spec") or {}).get("limits") or {}).get(GPU_RESOURCE, ""))
    if _parked(item):
        change = f"GPU limit {current or 'none'}: parked by park --now, left until unpark --now"
        result.objects.append(ObjectChange("nodepool", name, change, "unchanged", None, current, current))
        return
    if current == wanted or result.dry_run:
        status: Status = "unchanged" if current == wanted else "planned"
        change = f"GPU limit {current or 'none'}" + ("" if current == wanted else f" → {wanted}")
        result.objects.append(ObjectChange("nodepool", name, change, status, None, current, wanted))
        return
    change = f"GPU limit {current or 'none'} → {wanted}"
    try:
        api.merge_patch(f"{NODE_POOLS}/{name}", {"spec": {"limits": {GPU_RESOURCE: wanted}}})
    except (ApiError, OSError) as error:
        result.objects.append(ObjectChange("nodepool", name, change, "failed", str(error), current, wanted))
    else:
        result.objects.append(ObjectChange("nodepool", name, change, "done", None, current, wanted))


@click.command()
@stack_option
@project_dir_option
@with_server_options
@click.option("--dry-run", is_flag=True, help="Say what the window is and what would change; change nothing.")
@output_option
def window(
    *, stack: str, project_dir: Path, server: str | None, token_file: Path | None, ca_file: Path | None,
    dry_run: bool, output: str,
) -> None:  # fmt: skip
    """Open or close the nightly pool's NodePool as the nightly schedule's window is now.

    Run by the stack's parkbrake-window CronJob every few minutes; open: the GPU limit of the nightly
    capacity; closed (or a closed day of the calendar): limit 0 and the pool's nodes deleted. A
    NodePool parked by park --now is left alone. Exit 1 when an object could not be changed.

    \b
    Example:
      parkbrake k8s window --stack eks --dry-run \\
        --server https://127.0.0.1:6443 --token-file t --ca-file ca.crt
    """
    from cli.k8s.check import kubernetes_stack

    config, prices = kubernetes_stack(stack, project_dir)
    api = api_from_options(server, token_file, ca_file)
    state, result = apply_window(api, config, prices, datetime.now(UTC), dry_run=dry_run)
    if output == "json":
        click.echo(json.dumps({"open": state.open, "reason": state.reason, **result.as_dict()}, indent=2))
    else:
        click.echo(f"window {'open' if state.open else 'closed'}: {state.reason}")
    echo_changes(result, output=output)
