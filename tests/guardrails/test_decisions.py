"""The decision records, pure: their idempotency keys, reading them back from a relayed event, and
what a sweep's verdicts decide."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from guardrails import tags
from guardrails.decisions import Decision, decision_from_dict, sweep_decisions
from guardrails.hosts import Host
from guardrails.rules.base import SweepPolicy
from guardrails.sweep import judge

STARTED = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
POLICY = SweepPolicy(stack="dev", default_cap=timedelta(hours=3), max_exemption=timedelta(hours=24))


def host(instance_id: str = "i-0a1b2c3d4e5f67890", **extra: str) -> Host:
    return Host(
        instance_id=instance_id,
        instance_type="p4d.24xlarge",
        state="running",
        launch_time=STARTED,
        tags={
            tags.MANAGED: "true",
            tags.STACK: "dev",
            tags.POOL: "training",
            tags.TENANT: "research",
            tags.MAX_RUNTIME: "3h",
            tags.REVISION: "4f2c9e1",
            **extra,
        },
        region="us-east-1",
    )


def decided(subject: Host, now: datetime, *, stopped: bool = False) -> dict[str, str]:
    verdict = judge(subject, POLICY, now)
    acted = {subject.instance_id: "stop"} if stopped else {}
    decisions = sweep_decisions([verdict], actor="reaper", now=now, acted=acted, failed={}, full_sweep=True)
    return {decision.kind: decision.reason for decision in decisions}


def test_outcomes_of_one_decision_share_a_key_and_times_never_enter_it() -> None:
    stop = Decision("stop", "reaper", "past its cap", STARTED, "i-1", "research", {"rule": "past-deadline"})
    skip = Decision("skip", "reaper", "not running (stopped)", STARTED + timedelta(minutes=1), "i-1")
    assert stop.key("req-1") == skip.key("req-1") == "req-1:verdict:i-1"
    finding = Decision("finding", "reaper", "x", STARTED, "i-1", details={"rule": "orphaned"})
    assert finding.key("req-1") == "req-1:finding:i-1:orphaned"
    assert (
        Decision("budget-deny", "budget", "spent", STARTED, tenant="research").key("o")
        == "o:budget-deny:research"
    )


def test_a_relayed_record_reads_back_as_it_was_written() -> None:
    decision = Decision(
        "extend", "arn:aws:sts::1:assumed-role/r/ana", "eval", STARTED, "i-1", "research", {"by": "1h"}
    )
    assert decision_from_dict(decision.as_dict()) == decision


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"kind": "stop", "actor": "reaper", "at": "2026-03-02T09:00:00Z"}, "reason: must be a non-empty string"),
        ({"kind": "stop", "actor": "reaper", "reason": "r", "at": "today"}, "at: 'today' is not an ISO-8601"),
        ({"kind": "stop", "actor": "reaper", "reason": "r", "at": "2026-03-02T09:00:00"}, "has no timezone"),
        ({"kind": "stop", "actor": "reaper", "reason": "r", "at": "2026-03-02T09:00:00Z", "details": []},
         "details: must be an object"),
        ({"kind": "stop", "actor": "reaper", "reason": "r", "at": "2026-03-02T09:00:00Z", "instance_id": 7},
         "instance_id: must be a string or null"),
        ({"kind": "nap", "actor": "reaper", "reason": "r", "at": "2026-03-02T09:00:00Z"}, "'nap' is not one of"),
    ],
)  # fmt: skip
def test_a_malformed_record_is_refused_naming_the_field(record: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decision_from_dict(record)


def test_an_exemption_is_honoured_while_it_keeps_the_host_running_and_not_after() -> None:
    exempt = host(**{tags.EXEMPT_UNTIL: "2026-03-02T13:00:00Z"})
    during = decided(exempt, STARTED + timedelta(hours=3, minutes=30))
    assert set(during) == {"exemption-honoured", "skip"}
    assert during["exemption-honoured"] == (
        "exempt until 2026-03-02T13:00:00Z, past its cap's deadline 2026-03-02T12:00:00Z"
    )
    after = decided(exempt, STARTED + timedelta(hours=4, minutes=5), stopped=True)
    assert set(after) == {"stop"}
    assert "its exemption ended at 2026-03-02T13:00:00Z" in after["stop"]


def test_a_refused_exemption_is_one_decision_not_also_a_malformed_tags_finding() -> None:
    too_far = host(**{tags.EXEMPT_UNTIL: "2026-03-09T00:00:00Z"})
    logged = decided(too_far, STARTED + timedelta(hours=1))
    assert set(logged) == {"exemption-refused", "skip"}
    assert "beyond the policy's limit" in logged["exemption-refused"]
    # Another bad tag besides: the malformed-tags finding says both.
    both = decided(host(**{tags.EXEMPT_UNTIL: "2026-03-09T00:00:00Z", tags.MAX_RUNTIME: "soon"}), STARTED)
    assert set(both) == {"exemption-refused", "finding", "skip"}
