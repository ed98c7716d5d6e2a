"""What a Kueue Workload asks the budget for: tenant, instance type, hosts and cap (pure).

A Workload (``kueue.x-k8s.io/v1beta2``, as the API server returns it) whose quota is reserved on a
tenant's ClusterQueue names everything the ledger's admission needs:

- the tenant: the ClusterQueue's name (``status.admission.clusterQueue``), one of the stack's tenants;
- the instance type: the ResourceFlavor the admission assigned to ``nvidia.com/gpu``
  (``podSetAssignments[].flavors``), the type with its dots as dashes (``g5-12xlarge``), looked up among
  the types the stack's pools launch;
- the hosts: each pod set's pods packed onto instances of that type (``resourceUsage`` ÷ ``count`` GPUs a
  pod; ``GPUs per instance ÷ GPUs per pod`` pods a node), never fewer than the GPUs ÷ GPUs per instance,
  rounded up;
- the cap: ``spec.maximumExecutionTimeSeconds``, else the pool's ``max_runtime``, and never beyond the
  pool's (its NodePool's ``expireAfter`` ends every node there).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from guardrails.errors import InputError
from guardrails.plurals import counted

if TYPE_CHECKING:
    from guardrails.pricing import PriceTable
    from stacks.config import GpuPoolConfig, StackConfig

GPU = "nvidia.com/gpu"
BUDGET_CHECK = "parkbrake-budget"  # the AdmissionCheck's name (components/k8s/common.py declares it)
KUEUE_API = "kueue.x-k8s.io/v1beta2"


class WorkloadError(InputError):
    """A Workload the budget check cannot read: the message names the field."""


@dataclass(frozen=True)
class WorkloadRequest:
    """One Workload's admission, in the ledger's terms."""

    uid: str
    namespace: str
    name: str
    tenant: str
    instance_type: str
    gpus: int
    gpus_per_instance: int
    hosts: int
    cap: timedelta
    pool: str
    pricing_model: str

    @property
    def subject(self) -> str:
        """How the decision log names the Workload (its ``instance_id`` column)."""
        return f"workload/{self.namespace}/{self.name}"


def _field(document: Any, path: str) -> Any:
    value = document
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise WorkloadError(f"{path}: missing; is this a Workload whose quota Kueue reserved?")
        value = value[part]
    return value


def check_entry(workload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Workload's ``parkbrake-budget`` entry in ``status.admissionChecks`` (None: not gated by it)."""
    for entry in listed(mapping(workload.get("status")).get("admissionChecks")):
        if isinstance(entry, Mapping) and entry.get("name") == BUDGET_CHECK:
            return dict(entry)
    return None


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else an empty one (a schema-invalid Workload is read, not crashed on)."""
    return value if isinstance(value, Mapping) else {}


def listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def condition(workload: Mapping[str, Any], kind: str) -> bool:
    """Whether the Workload's condition ``kind`` (QuotaReserved, Admitted, Finished, Evicted) is True."""
    for entry in listed(mapping(workload.get("status")).get("conditions")):
        if isinstance(entry, Mapping) and entry.get("type") == kind:
            return entry.get("status") == "True"
    return False


def _gpus(value: Any, where: str) -> int:
    text = str(value)
    if isinstance(value, bool) or not text.isdigit():
        raise WorkloadError(f"{where}: {value!r} is not a whole number of GPUs")
    return int(text)


def _pool_of(stack: StackConfig, tenant: str, flavor: str) -> tuple[GpuPoolConfig, str]:
    """The tenant's training pool whose ResourceFlavor ``flavor`` is, and the instance type it selects:
    one flavor per tenant pool, named after its NodePool (stacks/kubernetes_config.py ``flavor_name``),
    so a flavor of another tenant's pool is refused here even where both run the same GPU type."""
    from stacks.kubernetes_config import flavor_name

    pools = {
        flavor_name(pool.tenant, pool.name): pool
        for pool in stack.pools.values()
        if pool.tenant == tenant and pool.role == "training"
    }
    if flavor not in pools:
        raise WorkloadError(
            f"status.admission.podSetAssignments[].flavors[{GPU!r}]: flavor {flavor!r} is none of tenant "
            f"{tenant}'s GPU pools in stack {stack.stack} (its flavors: {', '.join(sorted(pools)) or 'none'})"
        )
    pool = pools[flavor]
    return pool, pool.instance_type


def workload_request(workload: Any, stack: StackConfig, prices: PriceTable) -> WorkloadRequest:
    """Read ``workload``; a WorkloadError names the first field that is missing or wrong."""
    if not isinstance(workload, Mapping):
        raise WorkloadError("the document is not a JSON object; give a Workload as the API server returns it")
    if workload.get("apiVersion") != KUEUE_API or workload.get("kind") != "Workload":
        raise WorkloadError(
            f"apiVersion/kind: {workload.get('apiVersion')!r}/{workload.get('kind')!r} is not a "
            f"{KUEUE_API} Workload"
        )
    uid, namespace, name = (str(_field(workload, f"metadata.{key}")) for key in ("uid", "namespace", "name"))
    tenant = _field(workload, "status.admission.clusterQueue")
    if not isinstance(tenant, str) or tenant not in stack.tenants:
        raise WorkloadError(
            f"status.admission.clusterQueue: {tenant!r} is not a tenant of stack {stack.stack} "
            f"(its ClusterQueues: {', '.join(sorted(stack.tenants))})"
        )
    assignments = _field(workload, "status.admission.podSetAssignments")
    if not isinstance(assignments, list):
        raise WorkloadError("status.admission.podSetAssignments: must be a list")
    flavors: set[str] = set()
    per_pod: list[tuple[int, int]] = []  # (pods, GPUs each) of every pod set that uses GPUs
    for index, assignment in enumerate(assignments):
        where = f"status.admission.podSetAssignments[{index}]"
        usage = mapping(mapping(assignment).get("resourceUsage"))
        if GPU not in usage:
            continue
        total = _gpus(usage[GPU], f"{where}.resourceUsage[{GPU!r}]")
        if total == 0:
            continue
        flavor = mapping(assignment.get("flavors")).get(GPU)
        if not isinstance(flavor, str):
            raise WorkloadError(
                f"{where}.flavors[{GPU!r}]: missing; Kueue assigns a flavor to every resource"
            )
        count = _gpus(assignment.get("count", 1), f"{where}.count") or 1
        if total % count:
            raise WorkloadError(
                f"{where}: {counted(total, 'GPU')} do not divide among {counted(count, 'pod')}"
            )
        flavors.add(flavor)
        per_pod.append((count, total // count))
    if not per_pod:
        raise WorkloadError(
            f"status.admission.podSetAssignments[].resourceUsage: no {GPU}; the budget check gates GPU work only"
        )
    if len(flavors) > 1:
        raise WorkloadError(
            f"status.admission.podSetAssignments[].flavors[{GPU!r}]: {', '.join(sorted(flavors))}: one "
            "Workload on two GPU types is not admitted as one reservation; split it"
        )
    pool, instance_type = _pool_of(stack, tenant, flavors.pop())
    per_instance = prices.accelerators(instance_type)
    if not per_instance:
        raise WorkloadError(f"instance type {instance_type}: the price table knows no GPU count for it")
    hosts = 0
    for count, each in per_pod:
        if each > per_instance:
            raise WorkloadError(
                f"status.admission.podSetAssignments[]: a pod of {counted(each, 'GPU')} fits no {instance_type} "
                f"({counted(per_instance, 'GPU')})"
            )
        hosts += math.ceil(count / (per_instance // each))
    gpus = sum(count * each for count, each in per_pod)
    hosts = max(hosts, math.ceil(gpus / per_instance))
    cap = pool.max_runtime
    limit = mapping(workload.get("spec")).get("maximumExecutionTimeSeconds")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise WorkloadError(f"spec.maximumExecutionTimeSeconds: {limit!r} is not a positive integer")
        cap = min(cap, timedelta(seconds=limit))
    return WorkloadRequest(
        uid, namespace, name, tenant, instance_type, gpus, per_instance, hosts, cap, pool.name,
        pool.capacity_type,
    )  # fmt: skip


def subject_of(workload: Mapping[str, Any]) -> WorkloadRequest | None:
    """Enough of a Workload to find its reservation (uid, name, tenant), however little else it says."""
    meta = workload.get("metadata") or {}
    status = mapping(workload.get("status"))
    admission, spec = mapping(status.get("admission")), mapping(workload.get("spec"))
    tenant = admission.get("clusterQueue") or spec.get("queueName")
    if not isinstance(meta, Mapping) or not meta.get("uid"):
        return None
    return WorkloadRequest(
        str(meta["uid"]), str(meta.get("namespace")), str(meta.get("name")), str(tenant or "-"),
        "", 0, 0, 0, timedelta(0), "", "",
    )  # fmt: skip
