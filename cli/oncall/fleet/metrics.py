"""What ``parkbrake exporter --stack`` reads from AWS for Prometheus, beside the ledger.

- The guardrails' heartbeats: the Lambdas cannot be scraped, so their last successes are read back
  from CloudWatch (``lambdas.aws.heartbeat.last_successes``).
- The running accelerator hosts without ``parkbrake:managed=true``, by region and instance type:
  the sweep's own listing (``lambdas.aws.ec2_hosts.list_hosts``), so Prometheus sees what ``status`` and
  ``reap`` report; and the managed ones whose ``parkbrake:tenant`` names no declared tenant (the meter
  bills them to ``unattributed``: ``guardrails.tenants.unknown_tenant``).

Each collector reads at most once per ``cache_seconds`` and never fails a scrape: an AWS error is a
``..._up 0`` gauge and a log line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)


class _Cached:
    """One read shared by the scrapes of ``cache_seconds``; None when the read failed."""

    def __init__(self, read: Callable[[], Any], cache_seconds: float) -> None:
        self._read = read
        self._cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._cached: tuple[float, Any] | None = None

    def get(self) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        with self._lock:
            if self._cached is not None and time.monotonic() - self._cached[0] < self._cache_seconds:
                return self._cached[1]
            try:
                value = self._read()
            except (BotoCoreError, ClientError) as error:
                log.error("cannot read AWS for the exporter: %s", error)
                value = None
            self._cached = (time.monotonic(), value)
            return value


class HeartbeatCollector:
    """The guardrails' last successes, read back from CloudWatch: Lambda cannot be scraped, this can.

    Serves ``parkbrake_guardrail_last_success_timestamp_seconds{guardrail}`` (to the minute) for each
    guardrail with a heartbeat in the last day, and ``parkbrake_guardrail_heartbeats_up`` (0 when
    CloudWatch could not be read), at most one ``GetMetricData`` per ``cache_seconds``.
    """

    def __init__(
        self,
        cloudwatch: Any,
        *,
        stack: str,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        cache_seconds: float = 15.0,
    ) -> None:
        from lambdas.aws.heartbeat import last_successes

        self._reads = _Cached(lambda: last_successes(cloudwatch, stack=stack, now=clock()), cache_seconds)

    def last_successes(self) -> dict[str, datetime] | None:
        """By guardrail; None when CloudWatch could not be read."""
        found: dict[str, datetime] | None = self._reads.get()
        return found

    def describe(self) -> list[Metric]:
        return []  # registering must not call AWS

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        from lambdas.aws.heartbeat import LAST_SUCCESS_METRIC

        found = self.last_successes()
        yield GaugeMetricFamily(
            "parkbrake_guardrail_heartbeats_up",
            "1 when the last read of the guardrails' heartbeats from CloudWatch succeeded.",
            value=int(found is not None),
        )
        last = GaugeMetricFamily(
            LAST_SUCCESS_METRIC,
            "When the guardrail last completed without an error (Unix time, to the minute; from CloudWatch).",
            labels=["guardrail"],
        )
        for guardrail, when in sorted((found or {}).items()):
            last.add_metric([guardrail], when.timestamp())
        yield last


UNMANAGED = "unmanaged"
UNKNOWN_TENANT = "unknown-tenant"


class UnmanagedHostsCollector:
    """``parkbrake_unmanaged_accelerator_hosts{region, instance_type}``: running accelerator hosts
    without ``parkbrake:managed=true``; ``parkbrake_unknown_tenant_hosts{region, instance_type}``: managed
    ones whose ``parkbrake:tenant`` names none of ``tenants`` (the stack's; None: any valid tenant name);
    and ``parkbrake_unmanaged_hosts_up``, 0 when EC2 could not be read.
    """

    def __init__(
        self,
        clients: Callable[[str, str | None], Any],
        *,
        regions: Sequence[str],
        tenants: frozenset[str] | None = None,
        cache_seconds: float = 15.0,
    ) -> None:
        self._clients = clients
        self._regions = tuple(regions)
        self._tenants = tenants
        self._reads = _Cached(self._count, cache_seconds)

    def _count(self) -> Counter[tuple[str, str, str]]:
        from guardrails.ledger import tenant_refused
        from lambdas.aws.ec2_hosts import list_hosts

        counts: Counter[tuple[str, str, str]] = Counter()
        for region in self._regions:
            for host in list_hosts(self._clients("ec2", region), region):
                if not host.managed:
                    counts[(UNMANAGED, region, host.instance_type)] += 1
                elif tenant_refused(host.tags, self._tenants) is not None:
                    counts[(UNKNOWN_TENANT, region, host.instance_type)] += 1
        return counts

    def describe(self) -> list[Metric]:
        return []  # registering must not call AWS

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        counts: Counter[tuple[str, str, str]] | None = self._reads.get()
        yield GaugeMetricFamily(
            "parkbrake_unmanaged_hosts_up",
            "1 when the last listing of the running accelerator hosts succeeded.",
            value=int(counts is not None),
        )
        unmanaged = GaugeMetricFamily(
            "parkbrake_unmanaged_accelerator_hosts",
            "Running accelerator hosts without parkbrake:managed=true (outside every guardrail's cap).",
            labels=["region", "instance_type"],
        )
        unknown = GaugeMetricFamily(
            "parkbrake_unknown_tenant_hosts",
            "Running managed accelerator hosts whose parkbrake:tenant names no declared tenant (billed to unattributed).",
            labels=["region", "instance_type"],
        )
        for (kind, region, instance_type), count in sorted((counts or {}).items()):
            (unmanaged if kind == UNMANAGED else unknown).add_metric([region, instance_type], count)
        yield unmanaged
        yield unknown
