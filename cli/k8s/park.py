"""``parkbrake k8s park --now``: park a Kubernetes stack at once, through the API server.

``parkbrake park`` flips the stack file's switch, and ``pulumi up`` renders it parked: every GPU
NodePool's limit "0", every ClusterQueue ``stopPolicy: Hold``, GPU Deployments at no replica. This is
the emergency brake beside it, what Karpenter's maintainers say it takes to stop GPU launches
(karpenter-provider-aws #3539, #7010: a limit of 0 *and* the nodes deleted; a lowered limit alone only
stops new launches, karpenter v1.14.1 ``pkg/controllers/provisioning/provisioner.go`` checks
``Limits.ExceededBy`` before it creates a NodeClaim):

1. every tenant's ClusterQueue to ``HoldAndDrain`` (Kueue evicts what runs and admits nothing,
   kueue v0.19.2 ``apis/kueue/v1beta2/clusterqueue_types.go`` ``StopPolicy``);
2. every NodePool of the stack's to a GPU limit of "0" (Karpenter launches no node for the evicted or
   rescheduled pods);
3. every GPU Deployment of the stack's namespace to 0 replicas (its pods ask Karpenter for no node);
4. every NodeClaim of the stack's NodePools deleted (Karpenter drains and terminates the node,
   karpenter-provider-aws v1.14.1 ``website/content/en/docs/concepts/disruption.md``).

Each object's value before parking is kept in an annotation on the object itself, so ``--unpark``
restores exactly what it found, whoever parked: a value changed by hand since parking is drift, shown
and left as it is. All changes are JSON merge patches (RBAC verb ``patch``). :func:`park_now` serves this
command and ``parkbrake park --now`` on a Kubernetes stack (cli/oncall/park/cluster.py) alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from cli.k8s.api import CLUSTER_QUEUES, NODE_CLAIMS, ApiError, KubernetesApi
from cli.k8s.server_options import api_from_options, with_server_options
from cli.options import output_option, project_dir_option, stack_option

if TYPE_CHECKING:
    from stacks.config import StackConfig

NODE_POOLS = "/apis/karpenter.sh/v1/nodepools"
BEFORE_PARK = "parkbrake.dev/stop-policy-before-park"
GPU_LIMIT_BEFORE_PARK = "parkbrake.dev/gpu-limit-before-park"
REPLICAS_BEFORE_PARK = "parkbrake.dev/replicas-before-park"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
GPU_RESOURCE = "nvidia.com/gpu"
Status = Literal["done", "planned", "unchanged", "failed", "drift"]


def deployments_path(namespace: str) -> str:
    return f"/apis/apps/v1/namespaces/{namespace}/deployments"


@dataclass(frozen=True)
class ObjectChange:
    """One object the brake changed (or, dry run, would change): kind ``clusterqueue``, ``nodepool``,
    ``deployment`` or ``nodeclaim``."""

    kind: str
    name: str
    change: str
    status: Status  # planned: a dry run; unchanged: as asked; drift: changed since parking, left
    error: str | None = None
    before: str | None = None  # the braked value (stopPolicy, GPU limit, replicas) before and after
    after: str | None = None


@dataclass(frozen=True)
class Brake:
    """How one kind of object is parked: the value it holds, the parked value, the patch that sets one."""

    kind: str
    what: str  # the value's name in messages
    annotation: str  # where the value before parking is kept
    parked: str
    read: Callable[[Mapping[str, Any]], str]
    spec_patch: Callable[[str], dict[str, Any]]
    # unparking an object parked without a record: the value to restore (None: leave it, say so)
    unrecorded: str | None = None


def _gpu_limit(pool: Mapping[str, Any]) -> str:
    """The NodePool's GPU limit, "" when it has none (Karpenter then sets no GPU limit)."""
    return str(((pool.get("spec") or {}).get("limits") or {}).get(GPU_RESOURCE, ""))


BRAKES = {
    "clusterqueue": Brake(
        "clusterqueue", "stopPolicy", BEFORE_PARK, "HoldAndDrain",
        lambda queue: str((queue.get("spec") or {}).get("stopPolicy", "None")),
        lambda value: {"stopPolicy": value}, unrecorded="None",
    ),
    "nodepool": Brake(
        "nodepool", "GPU limit", GPU_LIMIT_BEFORE_PARK, "0", _gpu_limit,
        lambda value: {"limits": {GPU_RESOURCE: value or None}},
    ),
    "deployment": Brake(
        "deployment", "replicas", REPLICAS_BEFORE_PARK, "0",
        lambda deployment: str((deployment.get("spec") or {}).get("replicas", 1)),
        lambda value: {"replicas": int(value)},
    ),
}  # fmt: skip


@dataclass
class KubernetesPark:
    parking: bool
    dry_run: bool
    objects: list[ObjectChange] = field(default_factory=list)

    def _values(self, kind: str) -> list[dict[str, str]]:
        return [
            {"name": item.name, "before": item.before or "", "after": item.after or ""}
            for item in self.objects
            if item.kind == kind and item.name != "*"
        ]

    @property
    def queues(self) -> list[dict[str, str]]:
        return self._values("clusterqueue")

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
            "nodepools": self._values("nodepool"),
            "deployments": self._values("deployment"),
            "nodeclaims_deleted": self.nodeclaims,
            "errors": self.errors,
        }


def stack_nodepools(config: StackConfig) -> set[str]:
    """The NodePools the stack declares: ``<tenant>-<pool>`` (stacks/kubernetes_config.py names them)."""
    from stacks.kubernetes_config import nodepool_name

    return {nodepool_name(pool.tenant, pool.name) for pool in config.pools.values()}


def asks_for_gpus(deployment: Mapping[str, Any]) -> bool:
    """A Deployment whose pods ask for ``nvidia.com/gpu`` (requests or limits): Karpenter launches GPU
    nodes for its replicas."""
    pod = (((deployment.get("spec") or {}).get("template") or {}).get("spec")) or {}
    return any(
        GPU_RESOURCE in ((container.get("resources") or {}).get(kind) or {})
        for container in pod.get("containers") or []
        for kind in ("requests", "limits")
    )


def park_now(api: KubernetesApi, config: StackConfig, *, parking: bool, dry_run: bool) -> KubernetesPark:
    """The brake on the cluster (``k8s park --now`` and ``park --now`` on a Kubernetes stack both call it).

    One object's API error is recorded against it and the others are still changed; a list that
    cannot be read is recorded as that kind's failure (``name`` ``*``)."""
    from stacks.kubernetes_config import kubernetes_config

    namespace = kubernetes_config(config).namespace
    pools = stack_nodepools(config)
    result = KubernetesPark(parking, dry_run)
    # Parking: admit nothing, launch nothing, scale to nothing, then take the nodes; unparking the reverse.
    steps: list[tuple[str, str, Callable[[Mapping[str, Any]], bool]]] = [
        ("clusterqueue", CLUSTER_QUEUES, lambda queue: _name(queue) in config.tenants),
        ("nodepool", NODE_POOLS, lambda pool: _name(pool) in pools),
        ("deployment", deployments_path(namespace), asks_for_gpus),
    ]
    for kind, path, ours in steps if parking else reversed(steps):
        for item in sorted(listed(api, result, kind, path), key=_name):
            if ours(item):  # another team's objects are left alone
                _brake(api, result, BRAKES[kind], f"{path}/{_name(item)}", item)
    if parking:
        for claim in sorted(listed(api, result, "nodeclaim", NODE_CLAIMS), key=_name):
            if (claim["metadata"].get("labels") or {}).get(NODEPOOL_LABEL) in pools:
                delete_claim(api, result, _name(claim))
    return result


def _name(item: Mapping[str, Any]) -> str:
    return str(item["metadata"]["name"])


def listed(api: KubernetesApi, result: KubernetesPark, kind: str, path: str) -> list[dict[str, Any]]:
    try:
        items, _ = api.list(path)
    except (ApiError, OSError) as error:  # OSError: the API server does not answer
        result.objects.append(ObjectChange(kind, "*", "could not list", "failed", str(error)))
        return []
    return items


def _target(
    brake: Brake, item: Mapping[str, Any], parking: bool
) -> tuple[str, dict[str, str | None], Status | None]:
    """The value to set, the annotation patch, and a status when nothing is to be done."""
    annotations = item["metadata"].get("annotations") or {}
    current = brake.read(item)
    if parking:
        remembered = annotations.get(brake.annotation, current)
        settled = current == brake.parked and brake.annotation in annotations
        return brake.parked, {brake.annotation: remembered}, "unchanged" if settled else None
    if brake.annotation not in annotations:
        if current == brake.parked and brake.unrecorded is not None:
            return brake.unrecorded, {}, None
        return current, {}, "unchanged"
    if current != brake.parked:  # changed by hand since parking: never overwritten
        return current, {}, "drift"
    after = annotations[brake.annotation]
    return after, {brake.annotation: None}, None


def _brake(
    api: KubernetesApi, result: KubernetesPark, brake: Brake, path: str, item: Mapping[str, Any]
) -> None:
    name, current = _name(item), brake.read(item)
    after, annotations, status = _target(brake, item, result.parking)
    change = f"{brake.what} {current or 'none'} → {after or 'none'}"
    if status == "unchanged":
        change = f"{brake.what} {current or 'none'} (as asked)"
    elif status == "drift":
        change = f"{brake.what} {current or 'none'}: changed since parking, left as it is"
    if status is None and result.dry_run:
        status = "planned"
    if status is not None:
        error = None
        if status == "drift":
            error = f"{brake.what} is {current or 'none'}, not the parked {brake.parked}: set it by hand"
        result.objects.append(ObjectChange(brake.kind, name, change, status, error, current, after))
        return
    patch: dict[str, Any] = {"spec": brake.spec_patch(after)}
    if annotations:
        patch["metadata"] = {"annotations": annotations}
    try:
        api.merge_patch(path, patch)
    except (ApiError, OSError) as error:
        result.objects.append(ObjectChange(brake.kind, name, change, "failed", str(error), current, after))
    else:
        result.objects.append(ObjectChange(brake.kind, name, change, "done", None, current, after))


def delete_claim(api: KubernetesApi, result: KubernetesPark, name: str) -> None:
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
@click.option(
    "--unpark", is_flag=True, help="Restore each queue, NodePool and Deployment as it was before parking."
)
@click.option("--dry-run", is_flag=True, help="List what would change and change nothing.")
@output_option
def park(
    *, stack: str, project_dir: Path, server: str | None, token_file: Path | None, ca_file: Path | None,
    now: bool, unpark: bool, dry_run: bool, output: str,
) -> None:  # fmt: skip
    """Park a Kubernetes stack now: queues HoldAndDrain, GPU limits 0, GPU Deployments 0, nodes deleted.

    --unpark restores each object as it was before parking (a value changed since is left, as drift).

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
    echo_changes(result, output=output)


def echo_changes(result: KubernetesPark, *, output: str) -> None:
    """What changed, an object a line (text), and every failure on stderr; exit 1 if any failed."""
    if output != "json":
        for item in result.objects:
            if item.name != "*" and not item.error:
                click.echo(f"{item.kind} {item.name}: {item.change} ({item.status})")
        for error in result.errors:
            click.echo(f"failed: {error}", err=True)
    if result.errors:
        click.get_current_context().exit(1)
