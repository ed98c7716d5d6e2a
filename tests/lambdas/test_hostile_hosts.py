"""For any tag values on one host and any event shape, the sweep and the deadlines return, judge every
other host, and judge the hostile host under the default cap, reporting it (moto in server mode).

Each example launches two fresh hosts in the same emulated account: the hostile one, with the tag
values hypothesis draws, and a well-tagged one past its cap. Examples are few (each is a sweep).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from guardrail_fleet import (
    REGION,
    client_factory,
    create_deadline_group,
    create_pool,
    deadline_schedules,
    guardrail_settings,
    latest_launch,
    launch,
    launch_time,
    managed_tags,
    minutes,
    sns_queue,
    state_change,
    states,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from guardrails import names, tags
from guardrails.deadlines import parse_instant
from guardrails.durations import DurationError, parse_duration
from lambdas import deadline, reaper
from lambdas.aws.environment import ClientFactory

NIGHT = datetime(2025, 3, 1, 1, 0, tzinfo=UTC)
FEW = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# What a tag can carry through EC2's XML: any character but surrogates and control characters.
tag_text = st.text(st.characters(exclude_categories=("Cs", "Cc")), max_size=60) | st.sampled_from(
    ["9999999999d", "1" * 200 + "h", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "٣h", "-1h"]
)


def unusable_cap(text: str) -> bool:
    try:
        parse_duration(text)
    except DurationError:
        return True
    return False


def unusable_instant(text: str) -> bool:
    try:
        parse_instant(text)
    except ValueError:
        return True
    return False


hostile_tags = st.fixed_dictionaries(
    {
        tags.MAX_RUNTIME: tag_text.filter(unusable_cap),
        tags.EXEMPT_UNTIL: tag_text.filter(unusable_instant),
        tags.POOL: tag_text,
        tags.TENANT: tag_text,
        tags.OWNER: tag_text,
        "Name": tag_text,
    }
)


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    made = client_factory(aws)
    made("ssm", REGION).put_parameter(Name=names.park_parameter("test"), Value="false", Type="String")
    create_deadline_group(made)
    return made


def hosts_pair(clients: ClientFactory, hostile: dict[str, str]) -> tuple[str, str, Any]:
    ec2 = clients("ec2", REGION)
    bad = launch(ec2, "g5.xlarge", managed_tags(max_runtime=None) | hostile)[0]
    good = launch(ec2, "g5.xlarge", managed_tags(max_runtime="1h"))[0]
    return bad, good, latest_launch(ec2, [bad, good])


@FEW
@given(hostile=hostile_tags)
def test_the_sweep_stops_the_others_and_the_hostile_host_under_the_default_cap(
    clients: ClientFactory, hostile: dict[str, str]
) -> None:
    bad, good, started = hosts_pair(clients, hostile)
    topic, _queue = sns_queue(clients)
    now = started + minutes(100)  # past the good host's 1h and the default 90m

    result = reaper.handle({}, settings=guardrail_settings(sns_topic_arn=topic), clients=clients, now=now)

    assert {bad, good} <= set(result["stopped"]), result["errors"]
    assert states(clients("ec2", REGION), [bad, good]) == {bad: "stopped", good: "stopped"}
    [row] = [row for row in result["hosts"] if row["instance_id"] == bad]
    assert any(tags.MAX_RUNTIME in finding["reason"] for finding in row["reports"]), row
    assert row["deadline"] is not None


@FEW
@given(hostile=hostile_tags)
def test_the_deadline_arms_the_hostile_host_at_the_default_cap(
    clients: ClientFactory, hostile: dict[str, str]
) -> None:
    bad, _good, _started = hosts_pair(clients, hostile)
    started = launch_time(clients("ec2", REGION), bad)

    result = deadline.handle(
        state_change(bad, "running", started), settings=guardrail_settings(), clients=clients, now=started
    )

    assert result["action"] == "armed"
    assert result["deadline"] == (started + timedelta(minutes=90)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert names.deadline_schedule(bad) in deadline_schedules(clients)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | tag_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)


@FEW
@given(
    overrides=st.dictionaries(
        st.sampled_from(["time", "region", "detail", "detail-type", "id"]), json_values, min_size=1
    ),
    detail=st.dictionaries(st.sampled_from(["instance-id", "state"]), json_values),
)
def test_a_deadline_event_of_any_shape_is_refused_or_handled_never_raised(
    clients: ClientFactory, overrides: dict[str, Any], detail: dict[str, Any]
) -> None:
    bad, _good, started = hosts_pair(clients, {})
    event = state_change(bad, "running", started) | overrides
    if isinstance(event.get("detail"), dict):
        event["detail"] = event["detail"] | detail

    result = deadline.handle(event, settings=guardrail_settings(), clients=clients, now=started)

    assert result["action"] in {"armed", "moved", "ignored", "refused", "disarmed", "judged"}
    if result["action"] == "refused":
        assert result["reason"]


@FEW
@given(
    event=st.one_of(
        json_values, st.dictionaries(st.sampled_from(["dry_run", "instance_ids", "warn"]), json_values)
    )
)
def test_a_reaper_event_of_any_shape_is_refused_or_swept_never_raised(
    clients: ClientFactory, event: Any
) -> None:
    _bad, good, started = hosts_pair(clients, {})
    result = reaper.handle(event, settings=guardrail_settings(), clients=clients, now=started + minutes(100))
    if "refused" in result:
        assert result["refused"]
        assert states(clients("ec2", REGION), [good]) == {good: "running"}  # a refused event acts on nothing
    else:
        assert "checked" in result or "warned" in result


@FEW
@given(
    hostile=st.fixed_dictionaries({tags.MAX_RUNTIME: tag_text.filter(unusable_cap), tags.TENANT: tag_text}),
    event=st.one_of(
        st.just({"pool": "training"}),
        json_values,
        st.dictionaries(
            st.sampled_from(["pool", "capacity", "calendar", "timezone", "report_wait_s", "scheduled_time"]),
            json_values,
        ),
    ),
)
@example(hostile={tags.MAX_RUNTIME: "9999999999d", tags.TENANT: "research"}, event={"pool": "training"})
def test_the_launcher_caps_a_pool_of_hostile_tags_at_the_default_and_refuses_bad_events(
    clients: ClientFactory, hostile: dict[str, str], event: Any
) -> None:
    from test_launcher import Gate

    from lambdas import launcher

    autoscaling = clients("autoscaling", REGION)
    group = names.autoscaling_group("test", "training")
    if not autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"]:
        create_pool(autoscaling, clients("ec2", REGION), pool="training", instance_type="g5.xlarge",
                    desired=0, max_size=1, group_tags=managed_tags())  # fmt: skip
    autoscaling.create_or_update_tags(
        Tags=[
            {
                "ResourceId": group,
                "ResourceType": "auto-scaling-group",
                "Key": key,
                "Value": value,
                "PropagateAtLaunch": True,
            }
            for key, value in hostile.items()
        ]
    )
    autoscaling.update_auto_scaling_group(AutoScalingGroupName=group, DesiredCapacity=0)
    gate = Gate()

    result = launcher.handle(event, settings=guardrail_settings(), clients=clients, gate=gate, now=NIGHT)

    if result["pool"] is None:
        assert result["refused"]["kind"] == "malformed-event"
        return
    assert result["pool"] in ("training", event.get("pool"))
    if event == {"pool": "training"} and hostile[tags.TENANT] == "research":
        assert result["started"] == 1
        assert gate.caps == [timedelta(minutes=90)]  # the cost admitted is the default cap's
    assert all(cap == timedelta(minutes=90) for cap in gate.caps)
