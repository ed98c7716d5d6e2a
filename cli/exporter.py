"""``parkbrake exporter``: the ledger as Prometheus metrics.

A custom prometheus-client collector answers each scrape with two queries (all-time usage by tenant,
pool and instance type, from the ledger's rollup; budget and runway by tenant), cached for
``--cache-seconds`` so that several scrapers cost one query pair. A database that cannot be reached
is ``parkbrake_ledger_up 0``, never a failed scrape.

Counters only go up: ``parkbrake_gpu_seconds_total`` and ``parkbrake_cost_usd_total`` count closed
intervals only (a late stop adds the interval it closes; it never takes back time a scrape already
counted); what running hosts have used so far is the gauges ``parkbrake_open_gpu_seconds`` and
``parkbrake_open_cost_usd``. A late event can still shorten a closed interval (a ``stopping``
delivered after its ``stopped``): the collector then keeps serving the highest value it served and
counts the difference in ``parkbrake_ledger_counter_corrections_total``, so ``increase()`` never
reads a reset.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import click

from cli.options import output_option
from guardrails import settings_table
from guardrails.errors import ParkbrakeError

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import Collector

    from guardrails.runway import TenantRunway
    from lambdas.ledger.store import LedgerStore, UsageRow

log = logging.getLogger(__name__)
USAGE_LABELS = ["tenant", "pool", "instance_type"]


@dataclass(frozen=True)
class Snapshot:
    usage: list[UsageRow] = field(default_factory=list)
    runways: list[TenantRunway] = field(default_factory=list)
    up: bool = True
    seconds: float = 0.0  # how long the queries took


class LedgerCollector:
    """Reads the ledger at scrape time (at most once per ``cache_seconds``)."""

    def __init__(
        self,
        store: LedgerStore,
        *,
        default_cap: timedelta,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        cache_seconds: float = 15.0,
    ) -> None:
        self._store = store
        self._default_cap = default_cap
        self._clock = clock
        self._cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._cached: tuple[float, Snapshot] | None = None
        self._served: dict[tuple[str, tuple[str, ...]], float] = {}  # the highest counter values served
        self._corrections: dict[str, float] = {}

    def snapshot(self) -> Snapshot:
        with self._lock:
            if self._cached is not None and time.monotonic() - self._cached[0] < self._cache_seconds:
                return self._cached[1]
            started = time.monotonic()
            now = self._clock()
            try:
                snapshot = Snapshot(
                    usage=self._store.usage_totals(now=now),
                    runways=self._store.runways(now=now, default_cap=self._default_cap),
                )
            except ParkbrakeError as error:
                log.error("cannot read the ledger: %s", error)
                snapshot = Snapshot(up=False)
            snapshot = Snapshot(snapshot.usage, snapshot.runways, snapshot.up, time.monotonic() - started)
            self._cached = (time.monotonic(), snapshot)
            return snapshot

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        snapshot = self.snapshot()
        yield GaugeMetricFamily(
            "parkbrake_ledger_up", "1 when the last read of the ledger succeeded.", value=int(snapshot.up)
        )
        yield GaugeMetricFamily(
            "parkbrake_ledger_query_seconds", "How long the ledger's queries took.", value=snapshot.seconds
        )
        gpu_seconds = CounterMetricFamily(
            "parkbrake_gpu_seconds",
            "Accelerator-seconds of closed intervals, from the ledger.",
            labels=USAGE_LABELS,
        )
        cost = CounterMetricFamily(
            "parkbrake_cost_usd",
            "On-demand cost billed for closed intervals (60 s minimum per start), USD.",
            labels=USAGE_LABELS,
        )
        open_seconds = GaugeMetricFamily(
            "parkbrake_open_gpu_seconds",
            "Accelerator-seconds the running hosts used so far.",
            labels=USAGE_LABELS,
        )
        open_cost = GaugeMetricFamily(
            "parkbrake_open_cost_usd", "What the running hosts cost so far, USD.", labels=USAGE_LABELS
        )
        running = GaugeMetricFamily(
            "parkbrake_running_gpus", "Accelerators running now.", labels=USAGE_LABELS
        )
        for row in snapshot.usage:
            labels = [row.tenant, row.pool, row.instance_type]
            gpu_seconds.add_metric(
                labels, self._monotonic(gpu_seconds.name, labels, row.usage.accelerator_seconds)
            )
            cost.add_metric(labels, self._monotonic(cost.name, labels, row.usage.cost_usd))
            open_seconds.add_metric(labels, float(row.open_usage.accelerator_seconds))
            open_cost.add_metric(labels, float(row.open_usage.cost_usd))
            running.add_metric(labels, row.running_accelerators)
        corrections = CounterMetricFamily(
            "parkbrake_ledger_counter_corrections",
            "How much late events lowered closed usage below what a counter had already served.",
            labels=["counter"],
        )
        for name, amount in sorted(self._corrections.items()):
            corrections.add_metric([name], amount)
        yield from (gpu_seconds, cost, open_seconds, open_cost, running, corrections)
        yield from self._budget_metrics(snapshot.runways)

    def _monotonic(self, name: str, labels: list[str], value: Decimal) -> float:
        """``value``, or the highest value served before when a late event lowered it."""
        key = (name, tuple(labels))
        with self._lock:
            served = self._served.get(key, 0.0)
            if float(value) < served:
                self._corrections[name] = self._corrections.get(name, 0.0) + served - float(value)
                log.warning("%s%s went down from %s to %s: serving %s", name, labels, served, value, served)
                return served
            self._served[key] = float(value)
            return float(value)

    @staticmethod
    def _budget_metrics(runways: list[TenantRunway]) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        def gauge(name: str, documentation: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, documentation, labels=["tenant"])

        limit = gauge("parkbrake_budget_limit_usd", "The tenant's budget for its current period.")
        spent = gauge("parkbrake_budget_spent_usd", "Billed since the start of the tenant's budget period.")
        committed = gauge("parkbrake_budget_committed_usd", "What running hosts will cost up to their caps.")
        remaining = gauge("parkbrake_budget_remaining_usd", "Budget minus spent minus committed.")
        runway = gauge("parkbrake_runway_seconds", "Time until the budget is gone at the current burn rate.")
        burn = gauge("parkbrake_burn_rate_usd_per_hour", "What the tenant's running hosts cost per hour now.")
        reserved = gauge(
            "parkbrake_budget_reserved_usd", "Set aside by admissions for hosts not yet running."
        )
        unpriced = gauge(
            "parkbrake_unpriced_hosts", "Running hosts the ledger has no price for (burn unknown)."
        )
        for status in runways:
            tenant = [status.tenant]
            spent.add_metric(tenant, float(status.spent_usd))
            committed.add_metric(tenant, float(status.committed_usd))
            burn.add_metric(tenant, float(status.totals.burn_usd_per_hour))
            reserved.add_metric(tenant, float(status.reserved_usd))
            unpriced.add_metric(tenant, status.totals.unpriced_hosts)
            if status.budget.limit_usd is None or status.remaining_usd is None:
                continue  # no budget: nothing remains or runs out
            limit.add_metric(tenant, float(status.budget.limit_usd))
            remaining.add_metric(tenant, float(status.remaining_usd))
            left = status.runway
            runway.add_metric(tenant, float("inf") if left is None else left.total_seconds())
        yield from (limit, spent, committed, remaining, runway, burn, reserved, unpriced)


def serve_exporter(
    collector: LedgerCollector, *, port: int, address: str, fleet: Sequence[Collector] = ()
) -> tuple[Any, threading.Thread]:
    """Serve ``/metrics`` on a background thread; returns the server (``server_port``) and the thread."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(collector)
    for extra in fleet:
        registry.register(extra)
    server, thread = start_http_server(port, addr=address, registry=registry)
    return server, thread


@click.command()
@click.option(
    "--port",
    default=9108,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to serve /metrics on.",
)
@click.option("--address", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option(
    "--cache-seconds",
    default=15.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Reuse a read this long.",
)
@click.option(
    "--stack",
    envvar=settings_table.STACK,
    help="Also serve this stack's guardrail heartbeats (read back from CloudWatch: the Lambdas cannot be "
    "scraped) and the running accelerator hosts of PARKBRAKE_REGIONS without parkbrake:managed=true or "
    "whose parkbrake:tenant is none of PARKBRAKE_TENANTS. "
    "Also $PARKBRAKE_STACK; without it, the exporter reads only the ledger.",
)
@output_option
def exporter(port: int, address: str, cache_seconds: float, stack: str | None, output: str) -> None:
    """Serve the ledger's metrics for Prometheus: GPU-seconds, cost, running GPUs, budget remaining, runway.

    \b
    Example:
      parkbrake exporter --port 9108
    """
    from cli.oncall.fleet.metrics import HeartbeatCollector, UnmanagedHostsCollector
    from cli.usage.budgets import metering_settings
    from guardrails.settings import settings_from_environment
    from lambdas.clients import client
    from lambdas.ledger.store import store_from_environment

    store = store_from_environment(pooled=True)
    collector = LedgerCollector(
        store, default_cap=metering_settings(os.environ).default_max_runtime, cache_seconds=cache_seconds
    )
    fleet: list[Collector] = []
    if stack:
        guarded = settings_from_environment(os.environ)
        fleet = [
            HeartbeatCollector(client("cloudwatch"), stack=stack, cache_seconds=cache_seconds),
            UnmanagedHostsCollector(
                client, regions=guarded.regions, tenants=guarded.tenants, cache_seconds=cache_seconds
            ),
        ]
    server, thread = serve_exporter(collector, port=port, address=address, fleet=fleet)
    url = f"http://{address}:{server.server_port}/metrics"
    click.echo(
        json.dumps({"listening": url}) if output == "json" else f"serving the ledger's metrics on {url}"
    )
    try:
        while thread.is_alive():
            thread.join(timeout=1.0)
    except KeyboardInterrupt:
        server.shutdown()
    finally:
        store.close()
