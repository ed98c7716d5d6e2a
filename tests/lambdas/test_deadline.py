"""Per-host deadlines from EC2's native state-change events: arm, move, disarm; duplicates and
out-of-order deliveries are harmless; the schedule's own payload stops the host through the reaper."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy
from guardrail_fleet import (
    REGION,
    ROLE_ARN,
    STACK,
    TARGET_ARN,
    client_factory,
    create_deadline_group,
    create_pool,
    deadline_schedules,
    group_instances,
    guardrail_settings,
    heartbeats,
    launch,
    launch_time,
    managed_tags,
    minutes,
    published,
    sns_queue,
    state_change,
    states,
)

from guardrails import names, tags
from guardrails.settings import SettingsError
from lambdas import deadline, reaper
from lambdas.aws.deadline_schedules import schedule_expression
from lambdas.aws.environment import ClientFactory
from lambdas.engines import sweeping


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    made = client_factory(aws)
    create_deadline_group(made)
    return made


def on(event: dict[str, Any], clients: ClientFactory, now: datetime) -> dict[str, Any]:
    return deadline.handle(event, settings=guardrail_settings(), clients=clients, now=now)


def test_running_arms_a_one_time_schedule_at_the_deadline(clients: ClientFactory) -> None:
    [host] = launch(clients("ec2", REGION), "g5.xlarge", managed_tags(max_runtime="90m"))
    started = launch_time(clients("ec2", REGION), host)

    result = on(state_change(host, "running", started + timedelta(seconds=20)), clients, started + minutes(1))

    assert result["action"] == "armed"
    schedule = deadline_schedules(clients)[names.deadline_schedule(host)]
    assert schedule["ScheduleExpression"] == schedule_expression(started + minutes(90))
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["GroupName"] == names.deadline_schedule_group(STACK)
    assert schedule["Target"]["Arn"] == TARGET_ARN
    assert schedule["Target"]["RoleArn"] == ROLE_ARN
    assert json.loads(schedule["Target"]["Input"]) == {"instance_ids": [host]}
    assert heartbeats(clients)[0]["Dimensions"] == [
        {"Name": "Guardrail", "Value": "deadline"},
        {"Name": "Stack", "Value": STACK},
    ]


def test_a_spokes_deadline_arms_and_disarms_in_its_own_group_only(clients: ClientFactory) -> None:
    """A spoke with sweep: spoke names its group (PARKBRAKE_DEADLINE_GROUP): the hub's group, in the
    same account and region when the hub account is in the OU, is never touched."""
    own = "parkbrake-org-spoke-us-east-1-deadlines"
    clients("scheduler", REGION).create_schedule_group(Name=own)
    spoke = guardrail_settings(deadline_group=own)
    [host] = launch(clients("ec2", REGION), "g5.xlarge", managed_tags(max_runtime="90m"))
    started = launch_time(clients("ec2", REGION), host)
    scheduler = clients("scheduler", REGION)

    def armed(group: str) -> list[str]:
        return sorted(s["Name"] for s in scheduler.list_schedules(GroupName=group)["Schedules"])

    running = state_change(host, "running", started + timedelta(seconds=20))
    result = deadline.handle(running, settings=spoke, clients=clients, now=started + minutes(1))
    assert result["action"] == "armed"
    assert armed(own) == sorted([names.deadline_schedule(host), names.warning_schedule(host)])
    assert armed(names.deadline_schedule_group(STACK)) == []
    stopped = state_change(host, "stopped", started + minutes(2))
    result = deadline.handle(stopped, settings=spoke, clients=clients, now=started + minutes(2))
    assert result["action"] == "disarmed"
    assert armed(own) == []


def test_the_schedule_payload_stops_the_host_through_the_reaper(clients: ClientFactory) -> None:
    ec2, autoscaling = clients("ec2", REGION), clients("autoscaling", REGION)
    group = create_pool(
        autoscaling, ec2, pool="training", desired=1, group_tags=managed_tags(max_runtime="90m")
    )
    [host] = group_instances(autoscaling, group)
    started = launch_time(ec2, host)
    on(state_change(host, "running", started), clients, started)
    payload = json.loads(deadline_schedules(clients)[names.deadline_schedule(host)]["Target"]["Input"])

    # EventBridge Scheduler invokes the reaper with the payload at the deadline, to the second.
    result = reaper.handle(payload, settings=guardrail_settings(), clients=clients, now=started + minutes(90))

    assert result["stopped"] == [host]
    assert group_instances(autoscaling, group) == []  # removed from the group: no replacement


def test_a_cap_extended_after_launch_is_honoured_at_the_deadline(clients: ClientFactory) -> None:
    ec2 = clients("ec2", REGION)
    [host] = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))
    started = launch_time(ec2, host)
    on(state_change(host, "running", started), clients, started)
    ec2.create_tags(Resources=[host], Tags=[{"Key": tags.MAX_RUNTIME, "Value": "3h"}])

    result = reaper.handle(
        {"instance_ids": [host]}, settings=guardrail_settings(), clients=clients, now=started + minutes(90)
    )

    assert result["stopped"] == []
    assert "within its 3h cap (tag)" in result["skipped"][0]["reason"]
    moved = deadline_schedules(clients)[names.deadline_schedule(host)]
    assert moved["ScheduleExpression"] == schedule_expression(started + minutes(180))


def test_duplicate_running_events_leave_one_schedule(clients: ClientFactory) -> None:
    [host] = launch(clients("ec2", REGION), "g5.xlarge", managed_tags())
    started = launch_time(clients("ec2", REGION), host)
    event = state_change(host, "running", started)

    first, second = on(event, clients, started), on(event, clients, started + minutes(2))

    assert (first["action"], second["action"]) == ("armed", "moved")
    assert first["deadline"] == second["deadline"]
    # One deadline, and one warning to its owner before it.
    assert sorted(deadline_schedules(clients)) == [
        names.deadline_schedule(host),
        names.warning_schedule(host),
    ]


def test_stop_disarms_and_duplicates_are_harmless(clients: ClientFactory) -> None:
    ec2 = clients("ec2", REGION)
    [host] = launch(ec2, "g5.xlarge", managed_tags())
    started = launch_time(ec2, host)
    on(state_change(host, "running", started), clients, started)
    ec2.stop_instances(InstanceIds=[host])

    stopping = on(state_change(host, "stopping", started + minutes(30)), clients, started + minutes(30))
    stopped = on(state_change(host, "stopped", started + minutes(31)), clients, started + minutes(31))
    again = on(state_change(host, "stopped", started + minutes(31)), clients, started + minutes(32))

    assert (stopping["action"], stopped["action"], again["action"]) == ("disarmed", "ignored", "ignored")
    assert deadline_schedules(clients) == {}


def test_running_delivered_after_the_stop_arms_nothing(clients: ClientFactory) -> None:
    ec2 = clients("ec2", REGION)
    [host] = launch(ec2, "g5.xlarge", managed_tags())
    started = launch_time(ec2, host)
    ec2.stop_instances(InstanceIds=[host])
    on(state_change(host, "stopped", started + minutes(5)), clients, started + minutes(5))

    late = on(state_change(host, "running", started), clients, started + minutes(6))

    assert late["action"] == "ignored"
    assert "the host is stopped now" in late["reason"]
    assert deadline_schedules(clients) == {}


def test_running_from_an_earlier_start_is_ignored(clients: ClientFactory) -> None:
    ec2 = clients("ec2", REGION)
    [host] = launch(ec2, "g5.xlarge", managed_tags())
    started = launch_time(ec2, host)

    late = on(state_change(host, "running", started - minutes(120)), clients, started + minutes(1))

    assert late["action"] == "ignored"
    assert "earlier start" in late["reason"]
    assert deadline_schedules(clients) == {}


def test_a_stale_stop_does_not_disarm_the_current_run(clients: ClientFactory) -> None:
    ec2 = clients("ec2", REGION)
    [host] = launch(ec2, "g5.xlarge", managed_tags())
    started = launch_time(ec2, host)
    on(state_change(host, "running", started), clients, started)

    stale = on(state_change(host, "stopped", started - minutes(10)), clients, started + minutes(1))

    assert stale["action"] == "ignored"
    # One deadline, and one warning to its owner before it.
    assert sorted(deadline_schedules(clients)) == [
        names.deadline_schedule(host),
        names.warning_schedule(host),
    ]


def test_a_host_already_past_its_deadline_is_judged_at_once(clients: ClientFactory) -> None:
    ec2 = clients("ec2", REGION)
    [host] = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))
    started = launch_time(ec2, host)

    result = on(state_change(host, "running", started), clients, started + minutes(95))

    assert result["action"] == "judged"
    assert states(ec2, [host]) == {host: "stopped"}
    assert deadline_schedules(clients) == {}


def test_exemption_moves_the_schedule_to_its_end(clients: ClientFactory) -> None:
    ec2 = clients("ec2", REGION)
    [host] = launch(ec2, "g5.xlarge", managed_tags(max_runtime="1h"))
    started = launch_time(ec2, host)
    until = (started + minutes(300)).replace(microsecond=0)
    ec2.create_tags(
        Resources=[host], Tags=[{"Key": tags.EXEMPT_UNTIL, "Value": until.strftime("%Y-%m-%dT%H:%M:%SZ")}]
    )

    on(state_change(host, "running", started), clients, started)

    schedule = deadline_schedules(clients)[names.deadline_schedule(host)]
    assert schedule["ScheduleExpression"] == schedule_expression(until)


@pytest.mark.parametrize(
    ("instance_type", "instance_tags", "reason"),
    [
        ("m5.large", managed_tags(), "not an accelerator"),
        ("g5.xlarge", {"Name": "notebook"}, "not managed"),
        ("g5.xlarge", {**managed_tags(), tags.STACK: "other"}, "belongs to stack 'other'"),
    ],
)
def test_hosts_that_are_not_ours_get_no_deadline(
    clients: ClientFactory, instance_type: str, instance_tags: dict[str, str], reason: str
) -> None:
    ec2 = clients("ec2", REGION)
    clients("ssm", REGION).put_parameter(Name=names.park_parameter("other"), Value="false", Type="String")
    [host] = launch(ec2, instance_type, instance_tags)
    result = on(state_change(host, "running", launch_time(ec2, host)), clients, launch_time(ec2, host))
    assert result["action"] == "ignored"
    assert reason in result["reason"]
    assert deadline_schedules(clients) == {}


@pytest.mark.parametrize("stack_tag", ["tset", ""])
def test_an_orphan_gets_a_deadline_under_the_default_cap(clients: ClientFactory, stack_tag: str) -> None:
    """A typo in the stack tag (no such stack in the region), or no stack at all: this stack adopts the
    host under its default cap (90m here), not the 3h its tag asks for."""
    ec2 = clients("ec2", REGION)
    [host] = launch(ec2, "g5.xlarge", {**managed_tags(max_runtime="3h"), tags.STACK: stack_tag})
    started = launch_time(ec2, host)

    result = on(state_change(host, "running", started), clients, started)

    assert result["action"] == "armed"
    assert result["deadline"] == (started + minutes(90)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_deadline_stop_that_fails_raises_after_notifying(aws: str) -> None:
    """The schedule fires, StopInstances is denied: the invocation fails (so Lambda retries it and, in
    the end, its dead-letter queue pages), and the person is told before it does."""
    with FaultProxy(aws) as proxy:
        clients = client_factory(proxy.url)
        topic, queue_url = sns_queue(clients)
        [host] = launch(clients("ec2", REGION), "g5.xlarge", managed_tags(max_runtime="90m"))
        started = launch_time(clients("ec2", REGION), host)
        proxy.fail("StopInstances", "UnauthorizedOperation", "You are not authorized.", status=403)

        with pytest.raises(sweeping.DeadlineStopFailed, match=host):
            reaper.handle(
                {"instance_ids": [host]},
                settings=guardrail_settings(sns_topic_arn=topic),
                clients=clients,
                now=started + minutes(90),
            )

        assert states(clients("ec2", REGION), [host]) == {host: "running"}
        [message] = published(clients, queue_url)
        assert message["Subject"] == f"parkbrake {STACK} sweep: 0 stopped, 1 error(s), 0 finding(s)"
        assert "action: failed to stop: UnauthorizedOperation" in message["Message"]


def test_missing_target_settings_are_named(clients: ClientFactory) -> None:
    [host] = launch(clients("ec2", REGION), "g5.xlarge", managed_tags())
    settings = guardrail_settings(deadline_target_arn=None, scheduler_role_arn=None)
    with pytest.raises(SettingsError) as raised:
        deadline.handle(
            state_change(host, "running", launch_time(clients("ec2", REGION), host)),
            settings=settings,
            clients=clients,
            now=launch_time(clients("ec2", REGION), host),
        )
    assert [problem.split(":")[0] for problem in raised.value.problems] == [
        "PARKBRAKE_DEADLINE_TARGET_ARN",
        "PARKBRAKE_SCHEDULER_ROLE_ARN",
    ]


@pytest.mark.parametrize(
    "event",
    [
        {"detail-type": "Scheduled Event", "source": "aws.events"},
        {"detail-type": "EC2 Instance State-change Notification", "source": "aws.ec2", "detail": {}},
        {
            **state_change("i-0abc", "running", datetime(2025, 1, 1, tzinfo=UTC)),
            "time": "yesterday",
        },
    ],
)
def test_malformed_events_are_refused(event: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="event"):
        deadline.parse_deadline_event(event)


def test_schedule_expression_rounds_up_to_the_second() -> None:
    assert schedule_expression(datetime(2025, 1, 1, 3, 0, 0, tzinfo=UTC)) == "at(2025-01-01T03:00:00)"
    assert schedule_expression(datetime(2025, 1, 1, 3, 0, 0, 1, tzinfo=UTC)) == "at(2025-01-01T03:00:01)"
