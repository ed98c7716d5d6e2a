"""The sweep and Karpenter nodes: the cluster reclaims them (expireAfter at the cap, then the budget
controller past cap + terminationGracePeriod); the sweep stops one only past cap + its reclaim grace, as a
node the cluster failed to reclaim."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from guardrails import tags
from guardrails.hosts import Host
from guardrails.karpenter import DEFAULT_RECLAIM_GRACE, is_karpenter_node, reclaim_grace
from guardrails.rules.base import SweepPolicy
from guardrails.sweep import judge

LAUNCH = datetime(2025, 3, 1, 1, 0, tzinfo=UTC)
POLICY = SweepPolicy(stack="eks", default_cap=timedelta(hours=8), max_exemption=timedelta(hours=24))
NODE = {  # what the EC2NodeClass sets, and what Karpenter adds on the instance
    tags.MANAGED: "true",
    tags.STACK: "eks",
    tags.POOL: "training",
    tags.TENANT: "research",
    tags.MAX_RUNTIME: "8h",
    tags.REVISION: "abc123",
    tags.RECLAIM_GRACE: "35m",
    tags.KARPENTER_NODEPOOL: "research-training",
    tags.KARPENTER_NODECLAIM: "research-training-x7k2p",
}


def node(**changes: str | None) -> Host:
    values = {key: value for key, value in {**NODE, **changes}.items() if value is not None}
    return Host("i-0karp", "g5.12xlarge", "running", LAUNCH, values, "us-east-1")


def at(minutes: float) -> datetime:
    return LAUNCH + timedelta(hours=8, minutes=minutes)  # minutes past the 8h cap


@pytest.mark.parametrize(
    ("minutes", "action"), [(-1, "skip"), (0, "skip"), (34.99, "skip"), (35, "stop"), (60, "stop")]
)
def test_a_karpenter_node_is_stopped_only_past_cap_plus_its_reclaim_grace(
    minutes: float, action: str
) -> None:
    verdict = judge(node(), POLICY, at(minutes))
    assert verdict.action == action
    assert verdict.rule == (None if action == "skip" else "karpenter-unreclaimed")


def test_the_stop_tells_a_person_the_cluster_failed_to_reclaim_it() -> None:
    verdict = judge(node(), POLICY, at(40))
    assert verdict.reason.startswith(
        "a Karpenter node (NodeClaim research-training-x7k2p of NodePool research-training) the cluster "
        "failed to reclaim: ran 8h40m, past its 8h cap (tag) by 40m, beyond its 35m reclaim grace"
    )
    assert "check Karpenter and the controller" in verdict.reason


def test_within_the_grace_the_skip_says_it_is_left_to_the_cluster_until_when() -> None:
    verdict = judge(node(), POLICY, at(10))
    assert verdict.reason == (
        "a Karpenter node past its 8h cap (tag) since 2025-03-01T09:00:00Z: left to expireAfter and the "
        "budget controller's reclaim until 2025-03-01T09:35:00Z (+35m: terminationGracePeriod + one sweep)"
    )
    assert judge(node(), POLICY, at(-60)).reason.startswith("within its 8h cap (tag): due at")


def test_an_ec2_host_without_karpenter_tags_is_still_stopped_at_its_cap() -> None:
    plain = node(**{tags.RECLAIM_GRACE: None, tags.KARPENTER_NODEPOOL: None, tags.KARPENTER_NODECLAIM: None})
    verdict = judge(plain, POLICY, at(0))
    assert (verdict.action, verdict.rule) == ("stop", "past-deadline")


@pytest.mark.parametrize(
    "changes",
    [
        {tags.RECLAIM_GRACE: None},  # Karpenter's own tags are enough
        {tags.RECLAIM_GRACE: None, tags.KARPENTER_NODEPOOL: None},
        {tags.KARPENTER_NODEPOOL: None, tags.KARPENTER_NODECLAIM: None},  # parkbrake's EC2NodeClass tag
    ],
)
def test_any_karpenter_tag_makes_a_karpenter_node(changes: dict[str, str | None]) -> None:
    host = node(**changes)
    assert is_karpenter_node(host.tags)
    assert judge(host, POLICY, at(0)).action == "skip"


def test_without_the_grace_tag_the_default_grace_applies() -> None:
    host = node(**{tags.RECLAIM_GRACE: None})
    assert judge(host, POLICY, at(34)).action == "skip"
    assert judge(host, POLICY, at(DEFAULT_RECLAIM_GRACE.total_seconds() / 60)).action == "stop"


def test_a_grace_tag_never_buys_more_than_the_runtime_ceiling_and_a_bad_one_is_reported() -> None:
    problems: list[str] = []
    assert reclaim_grace({tags.RECLAIM_GRACE: "72h"}, timedelta(hours=24), problems) == timedelta(hours=24)
    assert "clamped" in problems[0]
    garbled = judge(node(**{tags.RECLAIM_GRACE: "soon"}), POLICY, at(35))
    assert (garbled.action, garbled.rule) == ("stop", "karpenter-unreclaimed")  # the default, 35m
    assert [finding.rule for finding in garbled.reports] == ["malformed-tags"]
    assert tags.RECLAIM_GRACE in garbled.reports[0].reason


def test_an_exemption_past_the_grace_holds_the_backstop_to_its_end() -> None:
    exempt = node(**{tags.EXEMPT_UNTIL: "2025-03-01T11:00:00Z"})
    assert (
        judge(
            exempt,
            POLICY,
            at(60),
        ).action
        == "skip"
    )
    assert judge(exempt, POLICY, at(120)).action == "stop"
