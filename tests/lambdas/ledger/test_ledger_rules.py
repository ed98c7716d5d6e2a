"""The ledger's rules, one at a time: intervals from transitions, billing, prices, windows, parsing."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from ledger_streams import T0_MS, ms, step, us_east_book, who

from guardrails import tags
from guardrails.ledger import (
    UNATTRIBUTED,
    Attribution,
    MalformedEvent,
    Transition,
    Usage,
    attribution_for,
    billable_ms,
    intervals_from,
    state_change_from_event,
    usage_by_key,
    usd,
)
from guardrails.pricing import PriceNotFound

G5 = Decimal("1.006")
BOOK = us_east_book([("g5.xlarge", None, G5), ("g5.12xlarge", None, Decimal("5.672")),
                     ("p4d.24xlarge", None, Decimal("32.7726")), ("g4dn.xlarge", None, Decimal("0.526"))])  # fmt: skip
KEY = ("research", "training", "g5.xlarge")


def usage_of(events: list[Transition], now_ms: int, **window: int | None) -> Usage:
    return usage_by_key(intervals_from(events), BOOK, now_ms=now_ms, **window)[KEY]


def test_a_host_that_ran_90_seconds_is_90_accelerator_seconds_and_90_billed_seconds() -> None:
    events = [step("e1", "i-1", "running", ms(0)), step("e2", "i-1", "stopped", ms(seconds=90))]
    usage = usage_of(events, ms(60))
    assert usage.accelerator_ms == 90_000
    assert usage.usd_hour_ms == G5 * 90_000
    assert usage.cost_usd == Decimal("0.025150")


def test_a_short_start_is_billed_the_60_second_minimum_but_used_only_as_long_as_it_ran() -> None:
    events = [step("e1", "i-1", "running", ms(0)), step("e2", "i-1", "stopping", ms(seconds=12.5))]
    usage = usage_of(events, ms(60))
    assert usage.accelerator_ms == 12_500
    assert usage.usd_hour_ms == G5 * 60_000


@pytest.mark.parametrize(
    ("elapsed_ms", "billed_ms"),
    [
        (0, 60_000),
        (59_999, 60_000),
        (60_000, 60_000),
        (60_001, 61_000),
        (90_400, 91_000),
        (3_600_000, 3_600_000),
    ],
)
def test_billing_is_per_second_rounded_up_with_a_60_second_minimum(elapsed_ms: int, billed_ms: int) -> None:
    assert billable_ms(elapsed_ms) == billed_ms


def test_a_duplicate_event_id_is_ignored() -> None:
    running = step("e1", "i-1", "running", ms(0))
    stopped = step("e2", "i-1", "stopped", ms(10))
    assert intervals_from([running, running, stopped, stopped]) == intervals_from([running, stopped])


def test_late_events_are_placed_by_their_own_time() -> None:
    in_order = [step("a", "i-1", "running", ms(0)), step("b", "i-1", "stopped", ms(10)),
                step("c", "i-1", "running", ms(20)), step("d", "i-1", "terminated", ms(25))]  # fmt: skip
    reversed_delivery = list(reversed(in_order))
    assert intervals_from(reversed_delivery) == intervals_from(in_order)
    assert usage_of(reversed_delivery, ms(60)).accelerator_ms == 15 * 60_000


def test_a_host_that_never_reports_stopping_is_open_and_runs_to_now() -> None:
    events = [step("e1", "i-1", "running", ms(0))]
    (interval,) = intervals_from(events)
    assert interval.is_open
    assert usage_of(events, ms(30)).accelerator_ms == 30 * 60_000
    assert usage_of(events, ms(45)).accelerator_ms == 45 * 60_000


def test_the_first_stop_closes_the_interval_and_later_stops_change_nothing() -> None:
    events = [step("r", "i-1", "running", ms(0)), step("s1", "i-1", "stopping", ms(10)),
              step("s2", "i-1", "stopped", ms(11))]  # fmt: skip
    (interval,) = intervals_from(events)
    assert (interval.ended_ms, interval.closed_by) == (ms(10), "s1")


def test_a_running_redelivered_under_a_new_id_does_not_open_a_second_interval() -> None:
    events = [step("r1", "i-1", "running", ms(0)), step("r2", "i-1", "running", ms(0)),
              step("r3", "i-1", "running", ms(5)), step("s", "i-1", "stopped", ms(10))]  # fmt: skip
    (interval,) = intervals_from(events)
    assert (interval.opened_by, interval.started_ms, interval.ended_ms) == ("r1", ms(0), ms(10))


def test_stops_without_a_running_and_pending_events_make_no_interval() -> None:
    events = [step("p", "i-1", "pending", ms(0)), step("s", "i-1", "stopped", ms(1))]
    assert intervals_from(events) == []


def test_running_and_stopped_in_the_same_millisecond_is_a_zero_length_start_billed_60_seconds() -> None:
    events = [step("z-stop", "i-1", "stopped", ms(0)), step("a-run", "i-1", "running", ms(0))]
    (interval,) = intervals_from(events)
    assert interval.ended_ms == interval.started_ms
    usage = usage_of(events, ms(5))
    assert (usage.accelerator_ms, usage.usd_hour_ms) == (0, G5 * 60_000)


def test_the_accelerators_and_owner_come_from_the_running_event() -> None:
    big = who("vision", "inference", "p4d.24xlarge")
    events = [step("r", "i-1", "running", ms(0), big), step("s", "i-1", "stopped", ms(1), who())]
    usage = usage_by_key(intervals_from(events), BOOK, now_ms=ms(5))
    assert usage == {("vision", "inference", "p4d.24xlarge"): usage[("vision", "inference", "p4d.24xlarge")]}
    assert usage[("vision", "inference", "p4d.24xlarge")].accelerator_ms == 8 * 60_000


def test_a_price_change_mid_interval_splits_the_cost_and_rewrites_no_history() -> None:
    book = us_east_book([("g5.xlarge", None, Decimal("1.006")), ("g5.xlarge", ms(30), Decimal("2.000"))])
    events = [step("r", "i-1", "running", ms(0)), step("s", "i-1", "stopped", ms(60))]
    usage = usage_by_key(intervals_from(events), book, now_ms=ms(90))[KEY]
    assert usage.usd_hour_ms == Decimal("1.006") * 30 * 60_000 + Decimal("2.000") * 30 * 60_000
    assert usage.cost_usd == Decimal("1.503000")
    earlier = [step("r0", "i-0", "running", ms(-60)), step("s0", "i-0", "stopped", ms(-30))]
    assert usage_by_key(intervals_from(earlier), book, now_ms=ms(90))[KEY].cost_usd == Decimal("0.503000")


def test_the_60_second_minimum_is_priced_at_the_price_in_effect_over_it() -> None:
    book = us_east_book([("g5.xlarge", None, Decimal("1")), ("g5.xlarge", ms(seconds=30), Decimal("3"))])
    events = [step("r", "i-1", "running", ms(0)), step("s", "i-1", "stopped", ms(seconds=10))]
    assert (
        usage_by_key(intervals_from(events), book, now_ms=ms(5))[KEY].usd_hour_ms == 30_000 * 1 + 30_000 * 3
    )


def test_usage_without_a_price_is_an_error_never_free() -> None:
    book = us_east_book([("g5.xlarge", ms(30), G5)])
    events = [step("r", "i-1", "running", ms(0)), step("s", "i-1", "stopped", ms(60))]
    with pytest.raises(PriceNotFound):
        usage_by_key(intervals_from(events), book, now_ms=ms(90))


def test_adjacent_windows_add_up_to_the_whole() -> None:
    events = [step("r", "i-1", "running", ms(0)), step("s", "i-1", "stopped", ms(seconds=20)),
              step("r2", "i-1", "running", ms(50)), step("s2", "i-1", "stopped", ms(110))]  # fmt: skip
    whole = usage_of(events, ms(200))
    cut = ms(seconds=40)  # inside the first start's billed minimum
    first = usage_of(events, ms(200), until_ms=cut)
    second = usage_of(events, ms(200), since_ms=cut)
    assert first + second == whole
    assert first.accelerator_ms == 20_000
    assert first.usd_hour_ms == G5 * 40_000


def test_usd_rounds_half_away_from_zero_to_the_micro_dollar_exactly() -> None:
    assert usd(Decimal("1.8")) == Decimal("0.000001")  # 0.5 µ$
    assert usd(Decimal("1.7999999999999999999999999999999")) == Decimal("0.000000")
    assert usd(Decimal(3_600_000) * Decimal("98.32")) == Decimal("98.320000")


def test_a_native_eventbridge_event_is_read_to_the_millisecond() -> None:
    change = state_change_from_event({
        "version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602",
        "detail-type": "EC2 Instance State-change Notification", "source": "aws.ec2",
        "account": "123456789012", "time": "2036-05-05T10:00:00.123Z", "region": "us-east-1",
        "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"],
        "detail": {"instance-id": "i-abcd1111", "state": "running"},
    })  # fmt: skip
    assert (change.instance_id, change.state, change.at_ms) == ("i-abcd1111", "running", T0_MS + 123)


def test_a_malformed_event_reports_every_problem_at_once() -> None:
    with pytest.raises(MalformedEvent) as caught:
        state_change_from_event({"id": "x", "detail-type": "AWS API Call via CloudTrail", "time": "yesterday",
                                 "detail": {"state": "exploded"}})  # fmt: skip
    message = str(caught.value)
    for problem in ("detail-type", "region: missing", "detail.instance-id: missing", "detail.state", "time:"):
        assert problem in message


def test_attribution_follows_tags_and_the_deadlines_cap_rules() -> None:
    def attribute(instance_type: str, host_tags: dict[str, str], accelerators: int) -> Attribution | None:
        return attribution_for(instance_type, host_tags, accelerators, region="eu-west-1", lifecycle=None,
                               zone="eu-west-1a", pool_caps={"inference": timedelta(hours=12)},
                               default_cap=timedelta(minutes=90))  # fmt: skip

    assert attribute("m5.large", {tags.TENANT: "research"}, 0) is None
    tagged = attribute(
        "p4d.24xlarge", {tags.TENANT: "vision", tags.POOL: "training", tags.MAX_RUNTIME: "2h"}, 8
    )
    assert tagged == Attribution("vision", "training", "p4d.24xlarge", 8, 7_200_000, "eu-west-1")
    typo = attribute("g5.xlarge", {tags.POOL: "inference", tags.MAX_RUNTIME: "2 hours"}, 1)
    assert typo == Attribution(UNATTRIBUTED, "inference", "g5.xlarge", 1, 12 * 3_600_000, "eu-west-1")
