"""The Prometheus series parkbrake exports, collected from the code that exports them (never a hand list).

The agent's registry, the ledger exporter's collectors (which republish the guardrails' CloudWatch
heartbeats), the Kubernetes budget controller's registry and the inference service's registry each
describe their families; a scrape shows a
counter ``x`` as ``x_total`` (and ``x_created``). The guardrail Lambdas themselves export nothing to
Prometheus: their counters go to CloudWatch in the embedded metric format.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import boto3
from botocore.config import Config
from prometheus_client.metrics_core import Metric

from cli.exporter import LedgerCollector
from cli.host.nvml_agent import GpuMetrics
from cli.k8s.metrics import ControllerMetrics
from cli.oncall.fleet.metrics import HeartbeatCollector, UnmanagedHostsCollector
from lambdas.ledger.store import LedgerStore
from services.inference.metrics import ServiceMetrics

# Nothing listens on the discard port: the exporter answers `parkbrake_ledger_up 0` and still
# describes every family it serves.
UNREACHABLE_LEDGER = "postgresql://parkbrake@127.0.0.1:9/parkbrake?connect_timeout=2"


def exposed_names(families: Iterable[Metric]) -> set[str]:
    names = set()
    for family in families:
        names |= (
            {f"{family.name}_total", f"{family.name}_created"} if family.type == "counter" else {family.name}
        )
    return names


def ledger_exporter_families() -> list[Metric]:
    store = LedgerStore.connect(UNREACHABLE_LEDGER)
    try:
        return list(LedgerCollector(store, default_cap=timedelta(minutes=90), cache_seconds=0).collect())
    finally:
        store.close()


def aws_exporter_families() -> list[Metric]:
    """The exporter's AWS-side families, described with an AWS that cannot be reached (one fast try each)."""

    def unreachable(service: str, region: str | None = None) -> Any:
        return boto3.session.Session().client(
            service,
            endpoint_url="http://127.0.0.1:9",
            region_name=region or "us-east-1",
            aws_access_key_id="unused",
            aws_secret_access_key="unused",
            config=Config(retries={"total_max_attempts": 1}, connect_timeout=1),
        )

    return [
        *HeartbeatCollector(unreachable("cloudwatch"), stack="any").collect(),
        *UnmanagedHostsCollector(unreachable, regions=["us-east-1"]).collect(),
    ]


def fleet_metrics() -> set[str]:
    """What the agent, the ledger exporter, the guardrails and the Kubernetes budget controller export:
    what alerts and dashboards may read."""
    agent = list(GpuMetrics().registry.collect())
    exporter = [*ledger_exporter_families(), *aws_exporter_families()]
    controller = list(ControllerMetrics().registry.collect())
    return exposed_names([*exporter, *agent, *controller])


def inference_metrics() -> set[str]:
    return exposed_names(ServiceMetrics().registry.collect())
