"""The nightly launcher and the stack's calendar of closed days, against moto: Scheduler's event at a
virtual time, the calendar read from its SSM parameter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from guardrail_fleet import (
    REGION,
    STACK,
    client_factory,
    create_pool,
    guardrail_settings,
    managed_tags,
    metric_value,
)
from holiday_calendar import CHRISTMAS, ics

from guardrails import names
from guardrails.errors import InputError, ParkbrakeError
from lambdas import launcher
from lambdas.aws.environment import ClientFactory
from lambdas.engines import launching

CALENDAR = names.calendar_parameter(STACK)


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    made = client_factory(aws)
    create_pool(made("autoscaling", REGION), made("ec2", REGION), pool="training", instance_type="g5.12xlarge",
                desired=0, max_size=3, group_tags=managed_tags(max_runtime="2h", tenant="research"))  # fmt: skip
    ssm = made("ssm", REGION)
    ssm.put_parameter(Name=names.park_parameter(STACK), Value="false", Type="String")
    ssm.put_parameter(Name=CALENDAR, Value=ics(CHRISTMAS), Type="String")
    return made


def scheduler_event(scheduled_time: str) -> dict[str, Any]:
    """What EventBridge Scheduler delivers: the schedule's Input, its context attribute filled in."""
    return {
        "pool": "training",
        "capacity": 2,
        "calendar": CALENDAR,
        "timezone": "Europe/Berlin",
        "scheduled_time": scheduled_time,
    }


def invoke(clients: ClientFactory, event: dict[str, Any], now: datetime) -> dict[str, Any]:
    return launcher.handle(event, settings=guardrail_settings(), clients=clients, gate=None, now=now)


def desired(clients: ClientFactory) -> int:
    group = names.autoscaling_group(STACK, "training")
    found = clients("autoscaling", REGION).describe_auto_scaling_groups(AutoScalingGroupNames=[group])
    return int(found["AutoScalingGroups"][0]["DesiredCapacity"])


def test_a_closed_day_skips_the_nightly_start_and_counts_it(
    clients: ClientFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    # 23:30 UTC on the 24th is 00:30 on Christmas Day in Berlin: the schedule's day, not UTC's, counts.
    due = datetime(2025, 12, 24, 23, 30, tzinfo=UTC)
    capsys.readouterr()

    result = invoke(clients, scheduler_event("2025-12-24T23:30:00Z"), due + timedelta(seconds=4))

    assert result["started"] == 0
    assert result["refused"] == {
        "kind": "closed",
        "reason": f"2025-12-25 (Europe/Berlin) is a closed day in {CALENDAR}: Christmas",
    }
    assert desired(clients) == 0
    stdout = capsys.readouterr().out
    assert (
        metric_value(stdout, "GuardrailActions", Guardrail="launcher", Action="refuse", Reason="closed") == 1
    )


def test_a_retry_is_judged_on_the_day_the_start_was_due(clients: ClientFactory) -> None:
    # Delivered again after midnight (Scheduler's retries): still the closed day's start.
    result = invoke(
        clients, scheduler_event("2025-12-26T00:30:00Z"), datetime(2025, 12, 27, 0, 10, tzinfo=UTC)
    )

    assert result["refused"]["kind"] == "closed"
    assert desired(clients) == 0


def test_the_next_open_day_starts_the_pool(clients: ClientFactory) -> None:
    result = invoke(
        clients, scheduler_event("2025-12-27T00:30:00Z"), datetime(2025, 12, 27, 0, 30, tzinfo=UTC)
    )

    assert (result["started"], result["refused"]) == (2, None)
    assert desired(clients) == 2


def test_parked_is_reported_before_closed(clients: ClientFactory) -> None:
    clients("ssm", REGION).put_parameter(Name=names.park_parameter(STACK), Value="true", Overwrite=True)

    result = invoke(
        clients, scheduler_event("2025-12-25T00:30:00Z"), datetime(2025, 12, 25, 0, 30, tzinfo=UTC)
    )

    assert result["refused"]["kind"] == "parked"


def test_a_missing_or_broken_calendar_is_an_error_never_an_open_day(clients: ClientFactory) -> None:
    ssm = clients("ssm", REGION)
    ssm.delete_parameter(Name=CALENDAR)
    now = datetime(2025, 12, 25, 0, 30, tzinfo=UTC)

    with pytest.raises(ParkbrakeError, match=f"{CALENDAR} .*does not exist"):
        invoke(clients, scheduler_event("2025-12-25T00:30:00Z"), now)
    ssm.put_parameter(Name=CALENDAR, Value="BEGIN:VCALENDAR\r\nEND:VCALENDAR\r\n", Type="String")
    with pytest.raises(InputError, match="has no VEVENT"):
        invoke(clients, scheduler_event("2025-12-25T00:30:00Z"), now)
    assert desired(clients) == 0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("calendar", "closed-days", "calendar must name an SSM parameter"),
        ("timezone", "Mars/Olympus", "timezone must be an IANA time zone"),
        ("scheduled_time", "<aws.scheduler.scheduled-time>", "scheduled_time must be an ISO-8601 UTC time"),
        ("scheduled_time", "2025-12-25T00:30:00", "scheduled_time must be an ISO-8601 UTC time"),
    ],
)
def test_malformed_calendar_fields_are_refused(field: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        launching.parse_event(scheduler_event("2025-12-25T00:30:00Z") | {field: value})
