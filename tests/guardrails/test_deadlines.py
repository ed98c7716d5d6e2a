"""Deadlines: last start + cap (tag, else pool, else stack), postponed only by a bounded exemption."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from guardrails import tags
from guardrails.deadlines import Deadline, deadline_for, parse_instant
from guardrails.hosts import Host

LAUNCH = datetime(2025, 3, 1, 1, 0, tzinfo=UTC)
POOL_CAPS = {"training": timedelta(hours=2)}
DEFAULT_CAP = timedelta(minutes=90)
CEILING = timedelta(hours=24)


def host(**tag_values: str) -> Host:
    return Host(
        instance_id="i-0abc",
        instance_type="g5.xlarge",
        state="running",
        launch_time=LAUNCH,
        tags={tags.MANAGED: "true", **tag_values},
        region="us-east-1",
    )


def deadline(h: Host, now: datetime = LAUNCH, max_exemption: timedelta = timedelta(hours=24)) -> Deadline:
    return deadline_for(
        h, pool_caps=POOL_CAPS, default_cap=DEFAULT_CAP, max_exemption=max_exemption, ceiling=CEILING, now=now
    )


def test_cap_from_tag_wins() -> None:
    d = deadline(host(**{tags.MAX_RUNTIME: "45m", tags.POOL: "training"}))
    assert (d.cap, d.cap_source, d.deadline, d.problems) == (
        timedelta(minutes=45),
        "tag",
        LAUNCH + timedelta(minutes=45),
        (),
    )


def test_cap_falls_back_to_pool_then_stack() -> None:
    assert deadline(host(**{tags.POOL: "training"})).cap_source == "pool"
    assert deadline(host(**{tags.POOL: "training"})).cap == timedelta(hours=2)
    d = deadline(host(**{tags.POOL: "adhoc"}))
    assert (d.cap, d.cap_source) == (timedelta(minutes=90), "stack")


@pytest.mark.parametrize("bad", ["90 minutes", "", "0", "-5m", "forever", "900h"])
def test_malformed_cap_tag_falls_back_and_is_reported(bad: str) -> None:
    d = deadline(host(**{tags.MAX_RUNTIME: bad, tags.POOL: "training"}))
    assert d.cap == timedelta(hours=2)
    assert d.cap_source == "pool"
    assert len(d.problems) == 1
    assert d.problems[0].startswith(tags.MAX_RUNTIME)


def test_due_exactly_at_the_deadline_not_a_second_before() -> None:
    d = deadline(host(**{tags.MAX_RUNTIME: "90m"}))
    at = LAUNCH + timedelta(minutes=90)
    assert not d.due(at - timedelta(seconds=1))
    assert d.due(at)
    assert d.due(at + timedelta(seconds=1))
    assert d.overrun(at - timedelta(seconds=1)) == timedelta(0)
    assert d.overrun(at + timedelta(minutes=3)) == timedelta(minutes=3)


def test_exemption_postpones_enforcement_not_the_deadline() -> None:
    now = LAUNCH + timedelta(minutes=95)
    d = deadline(host(**{tags.EXEMPT_UNTIL: "2025-03-01T05:00:00Z"}), now=now)
    assert d.deadline == LAUNCH + timedelta(minutes=90)
    assert d.exempt_until == datetime(2025, 3, 1, 5, 0, tzinfo=UTC)
    assert d.enforce_at == d.exempt_until
    assert not d.due(now)
    assert d.due(d.exempt_until)
    assert d.problems == ()


def test_expired_exemption_leaves_the_deadline_in_force() -> None:
    d = deadline(host(**{tags.EXEMPT_UNTIL: "2025-03-01T01:30:00+00:00"}), now=LAUNCH + timedelta(hours=3))
    assert d.enforce_at == d.deadline
    assert d.due(LAUNCH + timedelta(hours=3))


def test_exemption_in_another_zone_is_read_as_that_instant() -> None:
    d = deadline(host(**{tags.EXEMPT_UNTIL: "2025-03-01T06:00:00+02:00"}))
    assert d.exempt_until == datetime(2025, 3, 1, 4, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("tomorrow", "not an ISO-8601 instant"),
        ("2025-03-01T05:00:00", "no timezone"),
        ("2025-13-01T05:00:00Z", "not an ISO-8601 instant"),
        ("", "not an ISO-8601 instant"),
    ],
)
def test_malformed_exemption_is_ignored_and_reported(value: str, problem: str) -> None:
    d = deadline(host(**{tags.EXEMPT_UNTIL: value}))
    assert d.exempt_until is None
    assert d.enforce_at == d.deadline
    assert problem in d.problems[0]


def test_exemption_beyond_the_policy_horizon_is_ignored_and_reported() -> None:
    now = LAUNCH
    just_inside = (now + timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ")
    too_far = (now + timedelta(hours=24, seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert deadline(host(**{tags.EXEMPT_UNTIL: just_inside}), now=now).exempt_until is not None
    d = deadline(host(**{tags.EXEMPT_UNTIL: too_far}), now=now)
    assert d.exempt_until is None
    assert d.enforce_at == d.deadline
    assert "more than 1d ahead" in d.problems[0]


def test_both_tags_malformed_report_both() -> None:
    d = deadline(host(**{tags.MAX_RUNTIME: "2 hours", tags.EXEMPT_UNTIL: "soon"}))
    assert len(d.problems) == 2
    assert d.cap_source == "stack"


def test_parse_instant_accepts_lowercase_z_and_offsets() -> None:
    assert parse_instant("2025-03-01t05:00:00z") == datetime(2025, 3, 1, 5, tzinfo=UTC)
    assert parse_instant("2025-03-01T05:00:00-01:00") == datetime(2025, 3, 1, 6, tzinfo=UTC)


def test_a_cap_above_the_ceiling_is_clamped_to_it() -> None:
    d = deadline(host(**{tags.MAX_RUNTIME: "31d"}))
    assert (d.cap, d.cap_source, d.clamped_from) == (CEILING, "ceiling", timedelta(days=31))
    assert d.deadline == LAUNCH + CEILING
    assert d.problems == ()


def test_a_cap_at_the_ceiling_is_not_clamped() -> None:
    d = deadline(host(**{tags.MAX_RUNTIME: "24h"}))
    assert (d.cap, d.cap_source, d.clamped_from) == (CEILING, "tag", None)


@pytest.mark.parametrize(
    ("max_runtime", "cap"),
    [("3h", DEFAULT_CAP), ("30m", timedelta(minutes=30)), ("31d", DEFAULT_CAP), (None, DEFAULT_CAP)],
)
def test_an_orphan_runs_under_the_default_cap_or_its_own_if_shorter(
    max_runtime: str | None, cap: timedelta
) -> None:
    values = {tags.POOL: "training"} | ({tags.MAX_RUNTIME: max_runtime} if max_runtime else {})
    d = deadline_for(
        host(**values),
        pool_caps=POOL_CAPS,
        default_cap=DEFAULT_CAP,
        max_exemption=timedelta(hours=24),
        ceiling=CEILING,
        now=LAUNCH,
        orphan=True,
    )
    assert d.cap == cap
