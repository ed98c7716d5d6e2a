"""What ``parkbrake exporter --stack`` reads from AWS: the guardrails' heartbeats, the unmanaged hosts.

Against moto over HTTP: heartbeats written by the guardrails' own ``record_success`` are read back
with one ``GetMetricData`` and served as ``parkbrake_guardrail_last_success_timestamp_seconds``,
only for the exporter's stack; running accelerator hosts without ``parkbrake:managed=true`` are
counted by region and type with the sweep's own listing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from cli.oncall.fleet.metrics import HeartbeatCollector, UnmanagedHostsCollector
from lambdas.aws import heartbeat
from lambdas.clients import client


def scrape(collector: HeartbeatCollector | UnmanagedHostsCollector) -> dict[str, float]:
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


def launch(ec2: object, instance_type: str, count: int, tags: dict[str, str]) -> None:
    specifications = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    ec2.run_instances(  # type: ignore[attr-defined]
        ImageId="ami-12c6146b",
        InstanceType=instance_type,
        MinCount=count,
        MaxCount=count,
        **({"TagSpecifications": specifications} if tags else {}),
    )


def test_running_accelerator_hosts_without_the_managed_tag_are_counted_by_region_and_type(aws: str) -> None:
    ec2 = client("ec2")
    launch(ec2, "g5.xlarge", 2, {})  # nobody's: no parkbrake tags at all
    launch(ec2, "p4d.24xlarge", 1, {"parkbrake:tenant": "research", "parkbrake:managed": "false"})
    launch(ec2, "g5.xlarge", 3, {"parkbrake:managed": "true", "parkbrake:stack": "dev"})  # guarded
    launch(ec2, "t3.large", 1, {})  # not an accelerator

    samples = scrape(UnmanagedHostsCollector(client, regions=["us-east-1"]))

    assert samples == {
        "parkbrake_unmanaged_hosts_up": 1,
        'parkbrake_unmanaged_accelerator_hosts{instance_type="g5.xlarge",region="us-east-1"}': 2,
        'parkbrake_unmanaged_accelerator_hosts{instance_type="p4d.24xlarge",region="us-east-1"}': 1,
    }


def test_an_unreadable_ec2_is_unmanaged_hosts_up_0(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there

    samples = scrape(UnmanagedHostsCollector(client, regions=["us-east-1"]))

    assert samples == {"parkbrake_unmanaged_hosts_up": 0}


def test_managed_hosts_whose_tenant_is_no_declared_tenant_are_counted_by_region_and_type(aws: str) -> None:
    ec2 = client("ec2")
    managed = {"parkbrake:managed": "true", "parkbrake:stack": "dev"}
    launch(ec2, "g5.xlarge", 2, managed | {"parkbrake:tenant": "Research"})
    launch(ec2, "g5.xlarge", 1, managed | {"parkbrake:tenant": "research\u200b"})
    launch(ec2, "p4d.24xlarge", 1, managed | {"parkbrake:tenant": "research"})  # declared
    launch(ec2, "g5.xlarge", 1, {"parkbrake:tenant": "Research"})  # unmanaged: counted as such only

    samples = scrape(UnmanagedHostsCollector(client, regions=["us-east-1"], tenants=frozenset({"research"})))

    assert samples == {
        "parkbrake_unmanaged_hosts_up": 1,
        'parkbrake_unmanaged_accelerator_hosts{instance_type="g5.xlarge",region="us-east-1"}': 1,
        'parkbrake_unknown_tenant_hosts{instance_type="g5.xlarge",region="us-east-1"}': 3,
    }
