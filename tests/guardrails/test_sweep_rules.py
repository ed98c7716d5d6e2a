"""The sweep's verdicts: which hosts stop, which are skipped, and the reasons people read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from guardrails import tags
from guardrails.hosts import Host
from guardrails.rules.base import Rule, SweepPolicy, always
from guardrails.rules.registry import RULES
from guardrails.sweep import judge, owner_stack

LAUNCH = datetime(2025, 3, 1, 1, 0, tzinfo=UTC)
POLICY = SweepPolicy(stack="prod", default_cap=timedelta(minutes=90), max_exemption=timedelta(hours=24))
MANAGED = {
    tags.MANAGED: "true",
    tags.STACK: "prod",
    tags.POOL: "training",
    tags.TENANT: "research",
    tags.MAX_RUNTIME: "90m",
    tags.REVISION: "abc123",
}


def host(instance_type: str = "g5.xlarge", state: str = "running", **tag_values: str) -> Host:
    return Host("i-0abc", instance_type, state, LAUNCH, tag_values, "us-east-1")


def at(minutes: float) -> datetime:
    return LAUNCH + timedelta(minutes=minutes)


def test_registry_lists_each_rule_once_by_name() -> None:
    assert [rule.name for rule in RULES] == [
        "past-deadline",
        "karpenter-unreclaimed",
        "untagged-accelerator",
        "orphaned",
        "cap-above-ceiling",
        "malformed-tags",
        "stopped-too-long",
        "stopped-since-unknown",
    ]


@pytest.mark.parametrize(("minutes", "action"), [(89.99, "skip"), (90, "stop"), (91, "stop")])
def test_just_under_at_and_past_the_deadline(minutes: float, action: str) -> None:
    verdict = judge(host(**MANAGED), POLICY, at(minutes))
    assert verdict.action == action


def test_stop_reason_says_how_long_and_by_how_much() -> None:
    verdict = judge(host(**MANAGED), POLICY, at(95))
    assert verdict.rule == "past-deadline"
    assert verdict.reason == "ran 1h35m since its last start, past its 1h30m cap (tag) by 5m"


def test_skip_reason_says_when_it_is_due() -> None:
    verdict = judge(host(**MANAGED), POLICY, at(60))
    assert verdict.action == "skip"
    assert verdict.reason == "within its 1h30m cap (tag): due at 2025-03-01T02:30:00Z, in 30m"


def test_exempt_host_is_skipped_until_its_exemption_ends() -> None:
    exempt = host(**MANAGED, **{tags.EXEMPT_UNTIL: "2025-03-01T04:00:00Z"})
    skipped = judge(exempt, POLICY, at(120))
    assert skipped.action == "skip"
    assert skipped.reason.startswith("exempt until 2025-03-01T04:00:00Z")
    stopped = judge(exempt, POLICY, at(180))
    assert stopped.action == "stop"
    assert "its exemption ended at 2025-03-01T04:00:00Z" in stopped.reason


def test_too_far_exemption_stops_the_host_and_is_reported() -> None:
    too_far = host(**MANAGED, **{tags.EXEMPT_UNTIL: "2025-03-05T00:00:00Z"})
    verdict = judge(too_far, POLICY, at(100))
    assert verdict.action == "stop"
    assert [finding.rule for finding in verdict.reports] == ["malformed-tags"]
    assert "beyond the policy's limit" in verdict.reports[0].reason


def test_typo_in_the_cap_never_lets_a_host_run_longer() -> None:
    typo = host(**{**MANAGED, tags.MAX_RUNTIME: "90 mins"})
    verdict = judge(typo, POLICY, at(90))
    assert verdict.action == "stop"
    assert "cap (stack)" in verdict.reason
    assert "not a duration" in verdict.reports[0].reason


def test_missing_required_tags_are_reported_on_a_host_within_its_cap() -> None:
    bare = host(**{tags.MANAGED: "true"})
    verdict = judge(bare, POLICY, at(10))
    assert verdict.action == "skip"
    assert "missing tags: parkbrake:stack, parkbrake:pool, parkbrake:tenant" in verdict.reason
    assert "within its 1h30m cap (stack)" in verdict.reason


@pytest.mark.parametrize("managed", [None, "yes", "false"])
def test_untagged_accelerator_is_reported_not_stopped(managed: str | None) -> None:
    values = {} if managed is None else {tags.MANAGED: managed}
    verdict = judge(host("p3.2xlarge", **values), POLICY, at(5000))
    assert verdict.action == "skip"
    assert verdict.deadline is None
    assert "untagged accelerator host" in verdict.reason
    assert "reported only" in verdict.reason


def test_managed_tag_is_read_without_regard_to_case_or_spaces() -> None:
    verdict = judge(host(**{**MANAGED, tags.MANAGED: " True "}), POLICY, at(91))
    assert (verdict.action, verdict.rule) == ("stop", "past-deadline")


def test_untagged_accelerator_is_stopped_when_configured() -> None:
    policy = SweepPolicy(
        stack="prod", default_cap=timedelta(minutes=90), max_exemption=timedelta(hours=24), reap_untagged=True
    )
    verdict = judge(host("p3.2xlarge"), policy, at(1))
    assert (verdict.action, verdict.rule) == ("stop", "untagged-accelerator")


def test_non_accelerator_and_not_running_hosts_are_skipped() -> None:
    assert (
        judge(host("m5.large", **MANAGED), POLICY, at(500)).reason
        == "m5.large is not an accelerator instance type"
    )
    assert judge(host(state="stopping", **MANAGED), POLICY, at(500)).reason == "not running (stopping)"
    # Stopped hosts are judged by the stopped rules only (tests/guardrails/test_stopped_rules.py).
    stopped = judge(host(state="stopped", **MANAGED), POLICY, at(500))
    assert stopped.action == "skip"
    assert [finding.rule for finding in stopped.findings] == ["stopped-since-unknown"]


def test_other_stacks_hosts_are_left_to_their_own_sweep() -> None:
    theirs = host(**{**MANAGED, tags.STACK: "dev"})
    assert owner_stack(theirs, POLICY) == "dev"
    assert judge(theirs, POLICY, at(500)).reason == "belongs to stack 'dev'"
    # Without a stack tag every stack's sweep judges it, so a missing tag hides it from none.
    untagged_stack = host(**{k: v for k, v in MANAGED.items() if k != tags.STACK})
    assert owner_stack(untagged_stack, POLICY) is None
    assert judge(untagged_stack, POLICY, at(500)).action == "stop"


def test_a_host_of_a_stack_that_exists_is_left_to_it() -> None:
    theirs = host(**{**MANAGED, tags.STACK: "dev"})
    verdict = judge(theirs, POLICY, at(500), live_stacks={"prod", "dev"})
    assert verdict.reason == "belongs to stack 'dev'"


@pytest.mark.parametrize("stack_tag", ["dve", None])
def test_an_orphan_is_adopted_under_the_default_cap_and_reported(stack_tag: str | None) -> None:
    values = {k: v for k, v in MANAGED.items() if k != tags.STACK} | {tags.MAX_RUNTIME: "3h"}
    if stack_tag:
        values[tags.STACK] = stack_tag
    orphan = host(**values)
    assert owner_stack(orphan, POLICY, {"prod", "dev"}) is None
    before = judge(orphan, POLICY, at(89), live_stacks={"prod", "dev"})
    assert before.action == "skip"
    [finding] = [f for f in before.reports if f.rule == "orphaned"]
    why = (
        "no parkbrake:stack tag" if stack_tag is None else "parkbrake:stack 'dve' names no stack in us-east-1"
    )
    assert why in finding.reason
    after = judge(orphan, POLICY, at(90), live_stacks={"prod", "dev"})
    if stack_tag is None:  # a host of no stack: adopted (tagged as prod's) and stopped
        assert "adopted by stack 'prod' under a 1h30m cap" in finding.reason
        assert (after.action, after.rule) == ("stop", "past-deadline")
    else:  # a host naming another stack: IAM cannot tell it from a live one, so prod's roles may not stop it
        assert "judged by stack 'prod' under a 1h30m cap, but stopped only once retagged" in finding.reason
        assert after.action == "skip"
        assert "not stopped: its parkbrake:stack is 'dve'" in after.reason


def test_a_cap_above_the_ceiling_is_clamped_and_reported() -> None:
    long_cap = host(**{**MANAGED, tags.MAX_RUNTIME: "31d"})
    verdict = judge(long_cap, POLICY, at(60 * 23))
    assert verdict.action == "skip"
    [finding] = verdict.reports
    assert finding.rule == "cap-above-ceiling"
    assert finding.reason == (
        "parkbrake:max-runtime '31d' (31d) is above the ceiling; clamped to 1d (PARKBRAKE_MAX_RUNTIME_CEILING)"
    )
    stopped = judge(long_cap, POLICY, at(60 * 24))
    assert (stopped.action, stopped.rule) == ("stop", "past-deadline")
    assert "past its 1d cap (ceiling)" in stopped.reason


def test_a_rule_set_is_composable() -> None:
    never_on_fridays = Rule(
        "keep-everything",
        "a rule that reports every host",
        lambda subject: "always reported",
        always("report"),
    )
    verdict = judge(host(**MANAGED), POLICY, at(10), rules=(never_on_fridays,))
    assert verdict.action == "skip"
    assert verdict.reports[0].rule == "keep-everything"
