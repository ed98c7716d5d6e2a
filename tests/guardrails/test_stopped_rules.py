"""Hosts stopped too long: when they stopped (EC2's StateTransitionReason), the verdict, the storage cost."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from guardrails import tags
from guardrails.hosts import Host, stopped_since
from guardrails.pricing import load_price_table
from guardrails.rules.base import SweepPolicy
from guardrails.storage import Volume, storage_of
from guardrails.sweep import judge

NOW = datetime(2025, 3, 20, 12, 0, tzinfo=UTC)
POLICY = SweepPolicy(stack="prod", default_cap=timedelta(minutes=90), max_exemption=timedelta(hours=24))
MANAGED = {tags.MANAGED: "true", tags.STACK: "prod", tags.POOL: "training", tags.TENANT: "research"}


def stopped_host(reason: str | None, **tag_values: str) -> Host:
    launched = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    return Host(
        "i-0abc", "g5.xlarge", "stopped", launched, tag_values or MANAGED, "us-east-1", state_reason=reason
    )


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("User initiated (2025-03-01 10:00:00 GMT)", datetime(2025, 3, 1, 10, 0, tzinfo=UTC)),
        ("Service initiated (2025-03-12 23:59:59 GMT)", datetime(2025, 3, 12, 23, 59, 59, tzinfo=UTC)),
        ("User initiated", None),
        ("Server.SpotInstanceShutdown: Spot Instance terminated", None),
        ("User initiated (2025-02-31 10:00:00 GMT)", None),  # no such day
        ("", None),
        (None, None),
    ],
)
def test_when_a_host_stopped(reason: str | None, expected: datetime | None) -> None:
    assert stopped_since(reason) == expected


def test_a_host_stopped_past_the_retention_is_reported_with_its_storage_cost() -> None:
    storage = storage_of(
        [Volume("vol-1", 500, "gp3"), Volume("vol-2", 100, "gp3")], load_price_table(), "us-east-1"
    )

    verdict = judge(stopped_host("User initiated (2025-03-01 10:00:00 GMT)"), POLICY, NOW, storage=storage)

    assert verdict.action == "skip"
    (finding,) = verdict.reports
    assert finding.rule == "stopped-too-long"
    assert finding.reason == (
        "stopped 19d2h (since 2025-03-01T10:00:00Z), past the 7d retention; "
        "its 2 volumes (600 GB) cost $48.00 a month; reported only (guardrails.terminate_stopped is off)"
    )


def test_with_terminate_stopped_on_the_host_is_to_be_retired() -> None:
    verdict = judge(
        stopped_host("User initiated (2025-03-01 10:00:00 GMT)"), replace(POLICY, terminate_stopped=True), NOW
    )

    assert (verdict.action, verdict.rule) == ("terminate", "stopped-too-long")


@pytest.mark.parametrize("stopped_days", [1, 7])
def test_within_the_retention_there_is_nothing_to_say(stopped_days: int) -> None:
    moment = NOW - timedelta(days=stopped_days)
    host = stopped_host(f"User initiated ({moment:%Y-%m-%d %H:%M:%S} GMT)")

    verdict = judge(host, replace(POLICY, terminate_stopped=True), NOW)

    assert (verdict.action, verdict.findings) == ("skip", ())


def test_an_unknown_stop_time_is_reported_and_never_terminated() -> None:
    verdict = judge(stopped_host("User initiated"), replace(POLICY, terminate_stopped=True), NOW)

    assert verdict.action == "skip"
    assert [finding.rule for finding in verdict.reports] == ["stopped-since-unknown"]
    assert "stopped since an unknown time (StateTransitionReason 'User initiated')" in verdict.reason


def test_unmanaged_stopped_hosts_and_running_rules_do_not_mix() -> None:
    unmanaged = stopped_host("User initiated (2025-03-01 10:00:00 GMT)", Name="someone's")
    # A stopped managed host long past its cap is not "past its deadline": nothing runs.
    old = stopped_host("User initiated (2025-03-19 10:00:00 GMT)")

    assert judge(unmanaged, replace(POLICY, terminate_stopped=True), NOW).findings == ()
    assert judge(old, POLICY, NOW).findings == ()
    assert judge(old, POLICY, NOW).action == "skip"


def test_storage_names_volume_types_without_a_price() -> None:
    storage = storage_of(
        [Volume("vol-1", 100, "gp3"), Volume("vol-2", 50, "io2")], load_price_table(), "us-east-1"
    )

    assert storage.monthly_usd == Decimal("8.00")
    assert storage.unpriced == ("io2",)
    assert storage.describe() == (
        "2 volumes (150 GB) cost $8.00 a month (plus io2 volumes: no price in the price table)"
    )
