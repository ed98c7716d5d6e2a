"""Kueue v1beta2 Workloads as the API server returns them, for the budget check's tests (each one
validates against the vendored Workload CRD: tests/cli/k8s/test_workload_request.py)."""

from __future__ import annotations

import uuid
from typing import Any

CHECK = "parkbrake-budget"
STAMP = "2026-12-02T05:00:00Z"


def workload(
    name: str = "job-train-1",
    *,
    namespace: str = "research",
    queue: str = "research",
    flavor: str = "research-training",  # the ResourceFlavor of research's pool "training"
    pods: int = 1,
    gpus_per_pod: int = 4,
    max_seconds: int | None = 3600,
    uid: str | None = None,
    check_state: str = "Pending",
    conditions: tuple[str, ...] = ("QuotaReserved",),
    reserved: bool = True,
) -> dict[str, Any]:
    """A Workload of one pod set, its quota reserved on ``queue`` with ``flavor`` for the GPUs."""
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [
            {
                "name": "main",
                "count": pods,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "train",
                                "image": "public.ecr.aws/parkbrake/train:1",
                                "resources": {"requests": {"nvidia.com/gpu": str(gpus_per_pod)}},
                            }
                        ],
                    }
                },
            }
        ],
    }
    if max_seconds is not None:
        spec["maximumExecutionTimeSeconds"] = max_seconds
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": kind,
                "status": "True",
                "reason": kind,
                "message": f"{kind} by the test",
                "lastTransitionTime": STAMP,
            }
            for kind in conditions
        ],
        "admissionChecks": [
            {"name": CHECK, "state": check_state, "message": "", "lastTransitionTime": STAMP}
        ],
    }
    if reserved:
        status["admission"] = {
            "clusterQueue": queue,
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": pods,
                    "flavors": {"nvidia.com/gpu": flavor},
                    "resourceUsage": {"nvidia.com/gpu": str(pods * gpus_per_pod)},
                }
            ],
        }
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or str(uuid.uuid4()),
            "resourceVersion": "1",
            "creationTimestamp": STAMP,
        },
        "spec": spec,
        "status": status,
    }
