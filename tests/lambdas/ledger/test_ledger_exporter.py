"""``parkbrake exporter`` over real HTTP, its output parsed with prometheus-client's own parser."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import Decimal

from ledger_streams import T0, at, ms, step, who
from prometheus_client.parser import text_string_to_metric_families

from cli.exporter import LedgerCollector, serve_exporter
from guardrails.runway import Budget
from lambdas.ledger.store import LedgerStore

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@contextmanager
def exporter(store: LedgerStore, now: datetime, *, cache_seconds: float = 0) -> Iterator[str]:
    collector = LedgerCollector(store, default_cap=timedelta(minutes=90), clock=lambda: now,
                                cache_seconds=cache_seconds)  # fmt: skip
    server, _thread = serve_exporter(collector, port=0, address="127.0.0.1")
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def seed(store: LedgerStore) -> None:
    store.set_budget(Budget("research", Decimal(200), "month"))
    store.append(
        [
            step("r1", "i-1", "running", ms(0), who("research", "training", "p4d.24xlarge", 90)),
            step("s1", "i-1", "stopped", ms(30), who("research", "training", "p4d.24xlarge", 90)),
            step("r2", "i-2", "running", ms(40), who("research", "training", "g5.xlarge", 90)),
            step("r3", "i-3", "running", ms(0), who("product", "inference", "g5.12xlarge", 600)),
        ],
        source="meter",
        received_at=T0,
    )


def test_the_exporter_serves_usage_running_gpus_budget_and_runway(store: LedgerStore) -> None:
    seed(store)
    with exporter(store, at(60)) as url:
        samples = scrape(url)
    research = (("instance_type", "p4d.24xlarge"), ("pool", "training"), ("tenant", "research"))
    g5 = (("instance_type", "g5.xlarge"), ("pool", "training"), ("tenant", "research"))
    product = (("instance_type", "g5.12xlarge"), ("pool", "inference"), ("tenant", "product"))
    assert samples[("parkbrake_ledger_up", ())] == 1
    assert samples[("parkbrake_gpu_seconds_total", research)] == 8 * 30 * 60
    assert samples[("parkbrake_cost_usd_total", research)] == 16.3863
    # Running hosts are gauges: counters hold closed intervals only.
    assert samples[("parkbrake_gpu_seconds_total", g5)] == 0
    assert samples[("parkbrake_open_gpu_seconds", g5)] == 20 * 60
    assert samples[("parkbrake_gpu_seconds_total", product)] == 0
    assert samples[("parkbrake_open_gpu_seconds", product)] == 4 * 60 * 60
    assert samples[("parkbrake_running_gpus", research)] == 0
    assert samples[("parkbrake_running_gpus", g5)] == 1
    assert samples[("parkbrake_running_gpus", product)] == 4
    # research: $16.3863 + 20 min of g5 ($0.335333) spent, 70 more minutes committed ($1.173667)
    assert samples[("parkbrake_budget_spent_usd", (("tenant", "research"),))] == 16.721633
    assert samples[("parkbrake_budget_committed_usd", (("tenant", "research"),))] == 1.173667
    assert samples[("parkbrake_budget_remaining_usd", (("tenant", "research"),))] == 182.1047
    assert samples[("parkbrake_burn_rate_usd_per_hour", (("tenant", "research"),))] == 1.006
    runway = samples[("parkbrake_runway_seconds", (("tenant", "research"),))]
    assert runway == 651666.918  # $182.1047 at $1.006 an hour
    assert ("parkbrake_runway_seconds", (("tenant", "product"),)) not in samples  # no budget, no runway


def test_an_unreachable_database_is_ledger_up_0_not_a_failed_scrape() -> None:
    store = LedgerStore.connect("postgresql://parkbrake@127.0.0.1:9/ledger")
    with exporter(store, at(0)) as url:
        samples = scrape(url)
    assert samples[("parkbrake_ledger_up", ())] == 0
    assert not any(name.startswith("parkbrake_gpu_seconds") for name, _ in samples)


def test_scrapes_within_the_cache_window_reuse_one_read(store: LedgerStore) -> None:
    seed(store)
    key = (
        "parkbrake_running_gpus",
        (("instance_type", "g5.xlarge"), ("pool", "training"), ("tenant", "research")),
    )
    with exporter(store, at(60), cache_seconds=3600) as url:
        assert scrape(url)[key] == 1
        store.append([step("s2", "i-2", "stopped", ms(61), who())], source="meter", received_at=T0)
        assert scrape(url)[key] == 1  # cached
    with exporter(store, at(62)) as url:
        assert scrape(url)[key] == 0


def counters(samples: Samples) -> Samples:
    return {key: value for key, value in samples.items() if key[0].endswith("_total")}


def test_a_late_stop_between_scrapes_never_lowers_a_counter(store: LedgerStore) -> None:
    seed(store)
    collector = LedgerCollector(store, default_cap=timedelta(minutes=90), cache_seconds=0, clock=lambda: now)
    now = at(60)
    server, _thread = serve_exporter(collector, port=0, address="127.0.0.1")
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    try:
        before = scrape(url)
        # i-2 stopped at minute 41, but the event arrives after the scrape at minute 60.
        store.append([step("s2", "i-2", "stopped", ms(41), who())], source="meter", received_at=T0)
        now = at(61)
        after = scrape(url)
        # i-1 really stopped at 20, not 30: a `stopping` delivered after its `stopped` shortens it.
        research = who("research", "training", "p4d.24xlarge", 90)
        store.append([step("s0", "i-1", "stopping", ms(20), research)], source="meter", received_at=T0)
        corrected = scrape(url)
    finally:
        server.shutdown()
        server.server_close()
    g5 = (("instance_type", "g5.xlarge"), ("pool", "training"), ("tenant", "research"))
    assert before[("parkbrake_open_gpu_seconds", g5)] == 20 * 60
    assert after[("parkbrake_gpu_seconds_total", g5)] == 60  # the closed interval, counted once
    for key, value in counters(before).items():
        assert after[key] >= value, key
    for key, value in counters(after).items():
        assert corrected[key] >= value, key
    p4d = (("instance_type", "p4d.24xlarge"), ("pool", "training"), ("tenant", "research"))
    assert corrected[("parkbrake_gpu_seconds_total", p4d)] == 8 * 30 * 60  # held, not lowered
    assert corrected[
        ("parkbrake_ledger_counter_corrections_total", (("counter", "parkbrake_gpu_seconds"),))
    ] == (8 * 10 * 60)
