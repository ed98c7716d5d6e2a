"""Reading a Workload: tenant from the ClusterQueue, type from the flavor, hosts packed, cap; bad
fields named. The fixtures themselves validate against Kueue's Workload CRD."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cli.k8s.workload import WorkloadError, workload_request
from guardrails.pricing import PriceTable
from stacks.config import StackConfig
from stacks.kubernetes_validation import validate_object
from tests.cli.k8s.workloads import workload

SERVER_SET = ("uid", "resourceVersion", "creationTimestamp")


@pytest.mark.parametrize(
    "document",
    [
        workload(),
        workload(pods=3, gpus_per_pod=3, check_state="Ready", conditions=("QuotaReserved", "Admitted")),
        workload(conditions=("QuotaReserved", "Admitted", "Finished"), max_seconds=None),
        workload(reserved=False, conditions=(), check_state="Retry"),
    ],
)
def test_the_fixtures_are_valid_workloads(document: dict[str, Any]) -> None:
    # The vendored schema checks what a client writes: the fields the server sets are set aside.
    document["metadata"] = {k: v for k, v in document["metadata"].items() if k not in SERVER_SET}
    verdict = validate_object(document, "1.33")
    assert verdict.valid, verdict.errors


def test_a_misspelt_field_fails_the_crd_so_the_fixtures_are_really_checked() -> None:
    document = workload()
    document["metadata"] = {"name": "x", "namespace": "research"}
    document["status"]["admissionChecks"][0]["state"] = "Admitted"
    assert not validate_object(document, "1.33").valid


def test_tenant_type_hosts_and_cap(eks: StackConfig, prices: PriceTable) -> None:
    request = workload_request(workload(pods=3, gpus_per_pod=3, max_seconds=7200), eks, prices)
    # three pods of 3 GPUs: one a g5.12xlarge (4 GPUs) — 3 hosts, more than 9 / 4 rounded up
    assert (request.tenant, request.instance_type, request.gpus, request.hosts) == (
        "research", "g5.12xlarge", 9, 3,
    )  # fmt: skip
    assert request.cap == timedelta(hours=2)
    assert workload_request(workload(pods=2, gpus_per_pod=2), eks, prices).hosts == 1
    assert workload_request(workload(pods=5, gpus_per_pod=3), eks, prices).hosts == 5  # not 15 / 4 → 4
    assert workload_request(workload(pods=1, gpus_per_pod=1), eks, prices).hosts == 1
    # no limit of its own: the pool's cap; a longer limit is cut to it (expireAfter ends the node)
    assert workload_request(workload(max_seconds=None), eks, prices).cap == timedelta(hours=8)
    assert workload_request(workload(max_seconds=86_400), eks, prices).cap == timedelta(hours=8)
    large = workload_request(workload(flavor="research-large", pods=2, gpus_per_pod=8), eks, prices)
    assert (large.instance_type, large.hosts, large.pool, large.cap) == (
        "p4d.24xlarge", 2, "large", timedelta(hours=1),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda w: w.update(kind="Job"), "apiVersion/kind"),
        (
            lambda w: w["status"]["admission"].update(clusterQueue="marketing"),
            "status.admission.clusterQueue",
        ),
        (lambda w: w["status"].pop("admission"), "status.admission.clusterQueue: missing"),
        (
            lambda w: w["status"]["admission"]["podSetAssignments"][0]["flavors"].update(
                {"nvidia.com/gpu": "g4dn-xlarge"}
            ),
            "flavor 'g4dn-xlarge'",
        ),
        (  # another tenant's pool: one flavor per tenant pool, so research's Workload cannot land there
            lambda w: w["status"]["admission"]["podSetAssignments"][0]["flavors"].update(
                {"nvidia.com/gpu": "product-inference"}
            ),
            "flavor 'product-inference' is none of tenant research's GPU pools",
        ),
        (  # a flavor named after the instance type alone (before one flavor per tenant pool)
            lambda w: w["status"]["admission"]["podSetAssignments"][0]["flavors"].update(
                {"nvidia.com/gpu": "g5-12xlarge"}
            ),
            "its flavors: research-large, research-training",
        ),
        (
            lambda w: w["status"]["admission"]["podSetAssignments"][0]["resourceUsage"].update(
                {"nvidia.com/gpu": "2.5"}
            ),
            "resourceUsage['nvidia.com/gpu']",
        ),
        (
            lambda w: w["status"]["admission"]["podSetAssignments"][0]["resourceUsage"].pop("nvidia.com/gpu"),
            "no nvidia.com/gpu",
        ),
        (lambda w: w["spec"].update(maximumExecutionTimeSeconds="1h"), "spec.maximumExecutionTimeSeconds"),
        (lambda w: w["metadata"].pop("uid"), "metadata.uid"),
    ],
)
def test_bad_workloads_name_the_field(eks: StackConfig, prices: PriceTable, change: Any, field: str) -> None:
    document = workload()
    change(document)
    with pytest.raises(
        WorkloadError, match=field.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")
    ):
        workload_request(document, eks, prices)


def test_a_pod_larger_than_any_node_and_two_gpu_types_are_refused(
    eks: StackConfig, prices: PriceTable
) -> None:
    with pytest.raises(WorkloadError, match=r"fits no g5\.12xlarge"):
        workload_request(workload(gpus_per_pod=8), eks, prices)
    document = workload()
    assignments = document["status"]["admission"]["podSetAssignments"]
    assignments.append({**assignments[0], "name": "big", "flavors": {"nvidia.com/gpu": "research-large"}})
    with pytest.raises(WorkloadError, match="two GPU types"):
        workload_request(document, eks, prices)
    with pytest.raises(WorkloadError, match="not a JSON object"):
        workload_request([document], eks, prices)
