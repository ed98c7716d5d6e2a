"""``parkbrake k8s park --now``: park a Kubernetes stack at once, through the API server.

``parkbrake park`` flips the stack file's switch (and ``pulumi up`` renders GPU limits "0" and every
ClusterQueue ``stopPolicy: Hold``: nothing new is admitted, running work finishes). This is the
emergency brake beside it: every tenant's ClusterQueue to ``HoldAndDrain`` (Kueue evicts what runs) and
every NodeClaim of the stack's NodePools deleted (Karpenter drains and terminates the nodes, and
launches none for a queue that admits nothing). ``--unpark`` restores each ClusterQueue's stopPolicy as
it was before (kept in an annotation on the queue itself); the nodes come back as Kueue admits work.
:func:`park_now` serves this command and ``parkbrake park --now`` on a Kubernetes stack
(cli/oncall/park/cluster.py) alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from cli.k8s.api import CLUSTER_QUEUES, NODE_CLAIMS, ApiError, KubernetesApi
from cli.k8s.controller import api_from_options, with_server_options
from cli.options import output_option, project_dir_option, stack_option

if TYPE_CHECKING:
    from stacks.config import StackConfig

BEFORE_PARK = "parkbrake.dev/stop-policy-before-park"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
Status = Literal["done", "planned", "unchanged", "failed"]


@dataclass(frozen=True)
class ObjectChange:
    """One object the brake changed (or, dry run, would change): kind ``clusterqueue`` or ``nodeclaim``."""

    kind: str
    name: str
    change: str
    status: Status  # planned: a dry run; unchanged: as asked
    error: str | None = None
    before: str | None = None  # a ClusterQueue's stopPolicy before and after
    after: str | None = None


@dataclass
class KubernetesPark:
    parking: bool
    dry_run: bool
    objects: list[ObjectChange] = field(default_factory=list)

    @property
    def queues(self) -> list[dict[str, str]]:
        return [
            {"name": item.name, "before": item.before or "", "after": item.after or ""}
            for item in self.objects
            if item.kind == "clusterqueue" and item.name != "*"
        ]

    @property
    def nodeclaims(self) -> list[str]:
        """Deleted (or, dry run, to delete)."""
        return [item.name for item in self.objects if item.kind == "nodeclaim" and item.name != "*"]

    @property
    def errors(self) -> list[str]:
        return [f"{item.kind} {item.name}: {item.error}" for item in self.objects if item.error]

    def as_dict(self) -> dict[str, Any]:
        return {
            "parking": self.parking,
            "dry_run": self.dry_run,
            "clusterqueues": self.queues,
            "nodeclaims_deleted": self.nodeclaims,
            "errors": self.errors,
        }


def stack_nodepools(config: StackConfig) -> set[str]:
    """The NodePools the stack declares: ``<tenant>-<pool>`` (stacks/kubernetes_config.py names them)."""
    from stacks.kubernetes_config import nodepool_name

    return {nodepool_name(pool.tenant, pool.name) for pool in config.pools.values()}


def park_now(api: KubernetesApi, config: StackConfig, *, parking: bool, dry_run: bool) -> KubernetesPark:
    """The brake on the cluster (``k8s park --now`` and ``park --now`` on a Kubernetes stack both call it).

    One object's API error is recorded against it and the others are still changed; a list that
    cannot be read is recorded as that kind's failure (``name`` ``*``)."""
    result = KubernetesPark(parking, dry_run)
    queues = _listed(api, result, "clusterqueue", CLUSTER_QUEUES)
    for queue in sorted(queues, key=lambda q: str(q["metadata"]["name"])):
        name = str(queue["metadata"]["name"])
        if name in config.tenants:  # another team's queue is left alone
            _brake_queue(api, result, queue)
    if parking:
        pools = stack_nodepools(config)
        claims = _listed(api, result, "nodeclaim", NODE_CLAIMS)
        for claim in sorted(claims, key=lambda c: str(c["metadata"]["name"])):
            if (claim["metadata"].get("labels") or {}).get(NODEPOOL_LABEL) in pools:
                _delete_claim(api, result, str(claim["metadata"]["name"]))
    return result


def _listed(api: KubernetesApi, result: KubernetesPark, kind: str, path: str) -> list[dict[str, Any]]:
    try:
        items, _ = api.list(path)
    except (ApiError, OSError) as error:  # OSError: the API server does not answer
        result.objects.append(ObjectChange(kind, "*", "could not list", "failed", str(error)))
        return []
    return items


def _brake_queue(api: KubernetesApi, result: KubernetesPark, queue: dict[str, Any]) -> None:
    name = str(queue["metadata"]["name"])
    annotations = queue["metadata"].get("annotations") or {}
    current = str((queue.get("spec") or {}).get("stopPolicy", "None"))
    if result.parking:
        after, remembered = "HoldAndDrain", annotations.get(BEFORE_PARK, current)
        patch_annotations: dict[str, str | None] = {BEFORE_PARK: remembered}
        settled = current == after and BEFORE_PARK in annotations
    else:
        after, patch_annotations = annotations.get(BEFORE_PARK, "None"), {BEFORE_PARK: None}
        if after == "HoldAndDrain":
            after = "None"
        settled = BEFORE_PARK not in annotations and current != "HoldAndDrain"
        after = current if settled else after
    change = f"stopPolicy {current} → {after}" if not settled else f"stopPolicy {current} (as asked)"
    if result.dry_run or settled:
        status: Status = "unchanged" if settled else "planned"
        result.objects.append(ObjectChange("clusterqueue", name, change, status, None, current, after))
        return
    try:
        api.merge_patch(
            f"{CLUSTER_QUEUES}/{name}",
            {"metadata": {"annotations": patch_annotations}, "spec": {"stopPolicy": after}},
        )
    except (ApiError, OSError) as error:
        result.objects.append(
            ObjectChange("clusterqueue", name, change, "failed", str(error), current, after)
        )
    else:
        result.objects.append(ObjectChange("clusterqueue", name, change, "done", None, current, after))


def _delete_claim(api: KubernetesApi, result: KubernetesPark, name: str) -> None:
    change = "delete (Karpenter drains and terminates the node)"
    if result.dry_run:
        result.objects.append(ObjectChange("nodeclaim", name, change, "planned"))
        return
    try:
        api.delete(f"{NODE_CLAIMS}/{name}")
    except ApiError as error:
        if error.status != 404:  # already gone: what was asked
            result.objects.append(ObjectChange("nodeclaim", name, change, "failed", str(error)))
            return
    except OSError as error:
        result.objects.append(ObjectChange("nodeclaim", name, change, "failed", str(error)))
        return
    result.objects.append(ObjectChange("nodeclaim", name, change, "done"))


@click.command()
@stack_option
@project_dir_option
@with_server_options
@click.option(
    "--now", is_flag=True, required=True, help="Act on the cluster at once (required: it is the brake)."
)
@click.option("--unpark", is_flag=True, help="Restore each ClusterQueue's stopPolicy as it was before.")
@click.option("--dry-run", is_flag=True, help="List what would change and change nothing.")
@output_option
def park(
    *, stack: str, project_dir: Path, server: str | None, token_file: Path | None, ca_file: Path | None,
    now: bool, unpark: bool, dry_run: bool, output: str,
) -> None:  # fmt: skip
    """Park a Kubernetes stack now: ClusterQueues HoldAndDrain, its NodeClaims deleted; --unpark restores.

    The Kubernetes-only piece of `parkbrake park --now --stack eks` (which also parks the stack's AWS
    side, with this in the same table): for a person without AWS credentials. Exit 1 when any object
    could not be changed.

    \b
    Example:
      parkbrake k8s park --stack eks --now \\
        --server https://127.0.0.1:6443 --token-file t --ca-file ca.crt
    """
    from cli.k8s.check import kubernetes_stack

    config, _ = kubernetes_stack(stack, project_dir)
    result = park_now(
        api_from_options(server, token_file, ca_file), config, parking=not unpark, dry_run=dry_run
    )
    if output == "json":
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        verb = "would set" if dry_run else "set"
        for queue in result.queues:
            click.echo(
                f"clusterqueue {queue['name']}: {verb} stopPolicy {queue['before']} → {queue['after']}"
            )
        for claim in result.nodeclaims:
            click.echo(f"nodeclaim {claim}: {'would delete' if dry_run else 'deleted'}")
        for error in result.errors:
            click.echo(f"failed: {error}", err=True)
    if result.errors:
        click.get_current_context().exit(1)
