"""``parkbrake exporter --stack`` republishes the guardrails' CloudWatch heartbeats for Prometheus.

Against moto's CloudWatch over HTTP: heartbeats written by the guardrails' own ``record_success``
are read back with one ``GetMetricData`` and served as
``parkbrake_guardrail_last_success_timestamp_seconds{guardrail}``, only for the exporter's stack.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from cli.exporter import HeartbeatCollector
from lambdas.aws import heartbeat
from lambdas.aws.clients import client


def scrape(collector: HeartbeatCollector) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(collector)
    samples = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_each_guardrails_last_success_of_the_stack_is_served_to_the_minute(aws: str) -> None:
    cloudwatch = client("cloudwatch")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    reaper_runs = [now - timedelta(minutes=minutes) for minutes in (25, 20, 15)]
    for when in reaper_runs:
        heartbeat.record_success(heartbeat.REAPER, stack="dev", cloudwatch=cloudwatch, now=when)
    heartbeat.record_success("budget", stack="dev", cloudwatch=cloudwatch, now=now - timedelta(seconds=90))
    # Another stack's sweep, later: it must not hide that this stack's sweep went quiet.
    heartbeat.record_success(heartbeat.REAPER, stack="prod", cloudwatch=cloudwatch, now=now)

    samples = scrape(HeartbeatCollector(cloudwatch, stack="dev", clock=lambda: now + timedelta(minutes=1)))

    assert samples["parkbrake_guardrail_heartbeats_up"] == 1
    last = heartbeat.LAST_SUCCESS_METRIC
    assert samples[f'{last}{{guardrail="reaper"}}'] == reaper_runs[-1].timestamp()
    assert samples[f'{last}{{guardrail="budget"}}'] == (now - timedelta(minutes=2)).timestamp()  # its minute
    assert not any("deadline" in name or "launcher" in name for name in samples)  # never ran: not served


def test_an_unreadable_cloudwatch_is_heartbeats_up_0_not_a_failed_scrape(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    samples = scrape(HeartbeatCollector(client("cloudwatch"), stack="dev"))

    assert samples == {"parkbrake_guardrail_heartbeats_up": 0}
