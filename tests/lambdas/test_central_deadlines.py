"""Central deadlines (docs/organisation.md) on moto's server: a member account's host, its forwarded
events handled by the hub's deadline Lambda, its schedules armed in the hub's own group, and the
schedule's payload judged by the hub's reaper through the spoke role.

moto's ``sts:AssumeRole`` into another account's role returns credentials acting in that account
(moto/sts/models.py, ``STSBackend.assume_role``), so B's host is B's own: every check of its state is
made through a session of B's (``spoke_ec2``), never the hub's.

The tag change is built from the example of the EventBridge events reference, "Tag Change on
Resource" (docs.aws.amazon.com/eventbridge/latest/ref/events-ref-tag.html, source ``aws.tag``): the
resource named by ARN in ``resources``, ``detail.service`` ``ec2``, ``detail.resource-type``
``instance``, ``detail.changed-tag-keys`` and ``detail.tags`` (the resource's tags after the change).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest
from guardrail_fleet import (
    REGION,
    client_factory,
    create_deadline_group,
    deadline_schedules,
    guardrail_settings,
    launch,
    launch_time,
    managed_tags,
    metric_value,
    minutes,
    published,
    sns_queue,
    state_change,
)

from guardrails import names, tags
from guardrails.settings import Settings
from lambdas import deadline, reaper
from lambdas.aws.deadline_schedules import schedule_expression
from lambdas.aws.environment import ClientFactory
from lambdas.aws.spoke_list import SpokeList, SpokeListError
from tests.lambdas.test_org_sweep import (  # denied_c: the fixture, used by name
    HUB,
    PARAMETER,
    B,
    C,
    OrgFleet,
    denied_c,  # noqa: F401
    spoke_ec2,
    spoke_role,
)
from tests.moto_iam_auth import reset_auth

OTHER_REGION = "eu-west-1"


def hub_settings() -> Settings:
    return replace(guardrail_settings(), spokes_parameter=PARAMETER)


def tag_change(
    instance_id: str, changed: dict[str, str], *, account: str, region: str = REGION
) -> dict[str, Any]:
    """The tagging service's event for an EC2 instance whose tags ``changed`` (see the module's text)."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Tag Change on Resource",
        "source": "aws.tag",
        "account": account,
        "time": datetime.now().astimezone().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:ec2:{region}:{account}:instance/{instance_id}"],
        "detail": {
            "changed-tag-keys": sorted(changed),
            "service": "ec2",
            "resource-type": "instance",
            "version": 3,
            "tags": changed,
        },
    }


@pytest.fixture
def hub(aws: str) -> ClientFactory:
    """The hub's clients, its deadline group, and its spokes: B in us-east-1 only."""
    made = client_factory(aws)
    create_deadline_group(made)
    document = {"form": "stacks", "sweep": "central", "regions": [REGION], "roles": [spoke_role(B, REGION)]}
    made("ssm", None).put_parameter(Name=PARAMETER, Value=json.dumps(document), Type="String")
    return made


def on(event: dict[str, Any], hub: ClientFactory, now: datetime) -> dict[str, Any]:
    return deadline.handle(
        event, settings=hub_settings(), clients=hub, now=now, own_account=HUB, spokes=SpokeList()
    )


def state_in_b(instance_id: str) -> str:
    found = spoke_ec2(B, REGION).describe_instances(InstanceIds=[instance_id])
    return str(found["Reservations"][0]["Instances"][0]["State"]["Name"])


def test_a_members_host_gets_its_deadline_in_the_hub_and_the_hub_reaper_stops_it(
    hub: ClientFactory,
) -> None:
    [host] = launch(spoke_ec2(B, REGION), "g5.xlarge", managed_tags(max_runtime="90m"))
    started = launch_time(spoke_ec2(B, REGION), host)

    result = on(state_change(host, "running", started, account=B), hub, started + minutes(1))

    assert (result["action"], result["account"]) == ("armed", B)
    schedules = deadline_schedules(hub)  # the hub's own group, in the hub account
    armed = schedules[names.deadline_schedule(host)]
    assert armed["ScheduleExpression"] == schedule_expression(started + minutes(90))
    payload = json.loads(armed["Target"]["Input"])
    assert payload == {"instance_ids": [host], "account": B, "region": REGION}
    warning = json.loads(schedules[names.warning_schedule(host)]["Target"]["Input"])
    assert warning == {"warn": [host], "account": B, "region": REGION}

    # Scheduler invokes the hub's reaper with the payload at the deadline.
    stopped = reaper.handle(payload, settings=hub_settings(), clients=hub, now=started + minutes(90))

    assert stopped["stopped"] == [host]
    assert (stopped["account_id"], stopped["region"]) == (B, REGION)
    assert state_in_b(host) in ("stopping", "stopped")  # seen by B itself


def test_the_warning_payload_warns_the_owner_of_a_members_host_from_the_hub(hub: ClientFactory) -> None:
    topic, queue_url = sns_queue(hub)
    settings = replace(hub_settings(), sns_topic_arn=topic)
    [host] = launch(
        spoke_ec2(B, REGION), "g5.xlarge", managed_tags(max_runtime="90m", **{tags.OWNER: "ana@example.com"})
    )
    started = launch_time(spoke_ec2(B, REGION), host)
    on(state_change(host, "running", started, account=B), hub, started)
    warning = deadline_schedules(hub)[names.warning_schedule(host)]
    payload = json.loads(warning["Target"]["Input"])

    result = reaper.handle(
        payload, settings=settings, clients=hub, now=started + minutes(90) - settings.warn_before
    )

    assert result["warned"] == [host]
    [message] = published(hub, queue_url)  # from the hub's topic
    assert host in message["Message"]
    assert state_in_b(host) == "running"


def test_a_cap_extended_in_a_member_account_moves_the_hubs_schedule_at_the_deadline(
    hub: ClientFactory,
) -> None:
    ec2 = spoke_ec2(B, REGION)
    [host] = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))
    started = launch_time(ec2, host)
    on(state_change(host, "running", started, account=B), hub, started)
    ec2.create_tags(Resources=[host], Tags=[{"Key": tags.MAX_RUNTIME, "Value": "3h"}])
    payload = json.loads(deadline_schedules(hub)[names.deadline_schedule(host)]["Target"]["Input"])

    result = reaper.handle(payload, settings=hub_settings(), clients=hub, now=started + minutes(90))

    assert result["stopped"] == []
    moved = deadline_schedules(hub)[names.deadline_schedule(host)]
    assert moved["ScheduleExpression"] == schedule_expression(started + minutes(180))
    assert json.loads(moved["Target"]["Input"]) == payload  # still naming B's place
    assert state_in_b(host) == "running"


def test_a_stop_in_a_member_account_disarms_the_hubs_schedules(hub: ClientFactory) -> None:
    ec2 = spoke_ec2(B, REGION)
    [host] = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))
    started = launch_time(ec2, host)
    on(state_change(host, "running", started, account=B), hub, started)
    ec2.stop_instances(InstanceIds=[host])

    result = on(state_change(host, "stopping", started + minutes(5), account=B), hub, started + minutes(5))

    assert result["action"] == "disarmed"
    assert deadline_schedules(hub) == {}


@pytest.mark.parametrize(("account", "region"), [(C, REGION), (B, OTHER_REGION)])
def test_an_event_of_an_account_that_is_no_spoke_arms_nothing(
    hub: ClientFactory, account: str, region: str, caplog: pytest.LogCaptureFixture
) -> None:
    [host] = launch(spoke_ec2(account, region), "g5.xlarge", managed_tags(max_runtime="90m"))
    started = launch_time(spoke_ec2(account, region), host)

    result = on(state_change(host, "running", started, account=account, region=region), hub, started)

    assert result["action"] == "refused"
    assert f"account {account} {region}, which is neither the hub's own" in result["reason"]
    assert deadline_schedules(hub) == {}
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("deadline refused")]
    assert PARAMETER in line


def test_the_hubs_own_host_keeps_its_own_payload(hub: ClientFactory) -> None:
    [host] = launch(hub("ec2", REGION), "g5.xlarge", managed_tags(max_runtime="90m"))
    started = launch_time(hub("ec2", REGION), host)
    on(state_change(host, "running", started, account=HUB), hub, started)
    payload = json.loads(deadline_schedules(hub)[names.deadline_schedule(host)]["Target"]["Input"])
    assert payload == {"instance_ids": [host]}


def test_a_denied_spoke_role_refuses_the_deadline_with_one_line_and_a_count(
    aws: str,
    denied_c: OrgFleet,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """C's us-east-1 role may not be assumed: its host's deadline is refused and logged, nothing is
    armed (the central sweep judges that host within one interval, tests/lambdas/test_org_sweep.py)."""
    hub = client_factory(aws)  # made now, with the hub's restricted key
    create_deadline_group(hub)
    host = denied_c.within[C, REGION]

    result = on(state_change(host, "running", denied_c.now, account=C), hub, denied_c.now)

    assert result["action"] == "refused"
    assert result["reason"].startswith(f"cannot assume {spoke_role(C, REGION)}: AccessDenied")
    reset_auth(aws, "inf")  # moto's authorisation knows no Scheduler reads: look with it off
    assert deadline_schedules(client_factory(aws)) == {}
    assert [r for r in caplog.records if r.getMessage().startswith("deadline refused: cannot assume")]
    out = capsys.readouterr().out
    assert (
        metric_value(out, "GuardrailActions", Guardrail="deadline", Action="refused", Reason="assume-role")
        == 1
    )


def test_a_lowered_cap_moves_the_schedule_earlier_and_one_already_past_stops_the_host(
    hub: ClientFactory,
) -> None:
    ec2 = spoke_ec2(B, REGION)
    [host] = launch(ec2, "g5.xlarge", managed_tags(max_runtime="4h"))
    started = launch_time(ec2, host)
    on(state_change(host, "running", started, account=B), hub, started)
    ec2.create_tags(Resources=[host], Tags=[{"Key": tags.MAX_RUNTIME, "Value": "2h"}])

    moved = on(tag_change(host, {tags.MAX_RUNTIME: "2h"}, account=B), hub, started + minutes(30))

    assert moved["action"] == "moved"
    schedule = deadline_schedules(hub)[names.deadline_schedule(host)]
    assert schedule["ScheduleExpression"] == schedule_expression(started + minutes(120))
    ec2.create_tags(Resources=[host], Tags=[{"Key": tags.MAX_RUNTIME, "Value": "1h"}])

    judged = on(tag_change(host, {tags.MAX_RUNTIME: "1h"}, account=B), hub, started + minutes(75))

    assert judged["action"] == "judged"
    assert state_in_b(host) in ("stopping", "stopped")


def test_a_tag_change_of_the_stacks_own_host_rejudges_it(aws: str) -> None:
    """A stack without a hub: its own host's tag change moves its own schedule."""
    clients = client_factory(aws)
    create_deadline_group(clients)
    ec2 = clients("ec2", REGION)
    [host] = launch(ec2, "g5.xlarge", managed_tags(max_runtime="4h"))
    started = launch_time(ec2, host)
    settings = guardrail_settings()
    deadline.handle(state_change(host, "running", started), settings=settings, clients=clients, now=started)
    ec2.create_tags(Resources=[host], Tags=[{"Key": tags.MAX_RUNTIME, "Value": "1h"}])

    result = deadline.handle(
        tag_change(host, {tags.MAX_RUNTIME: "1h"}, account=HUB),
        settings=settings,
        clients=clients,
        now=started,
    )

    assert (result["action"], result["state"]) == ("moved", "tags-changed")
    schedule = deadline_schedules(clients)[names.deadline_schedule(host)]
    assert schedule["ScheduleExpression"] == schedule_expression(started + minutes(60))


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"instance_ids": ["i-0abc"], "account": "22222222222", "region": REGION}, "account"),
        ({"instance_ids": ["i-0abc"], "account": B, "region": "Mars"}, "region"),
        ({"instance_ids": ["i-0abc"], "account": B}, "region"),
        ({"account": B, "region": REGION}, "account and region"),
    ],
)
def test_a_bad_place_in_a_deadline_payload_is_refused_naming_the_field(
    hub: ClientFactory, payload: dict[str, Any], field: str
) -> None:
    result = reaper.handle(payload, settings=hub_settings(), clients=hub, now=datetime.now().astimezone())
    assert result["refused"].startswith(field)
    assert result["checked"] == 0


@pytest.mark.parametrize(
    "event",
    [
        {**tag_change("i-0abc", {}, account=B), "resources": ["arn:aws:s3:::bucket"]},
        {**tag_change("i-0abc", {}, account=B), "account": C},
        {**tag_change("i-0abc", {}, account=B), "account": "2222"},
        {**state_change("i-0abc", "running", datetime(2025, 1, 1).astimezone()), "account": 222222222222},
    ],
)
def test_malformed_tag_changes_and_accounts_are_refused(event: dict[str, Any]) -> None:
    result = deadline.handle(
        event,
        settings=hub_settings(),
        clients=client_factory("http://127.0.0.1:9"),  # never called: the event is refused first
        now=datetime.now().astimezone(),
    )
    assert result["action"] == "refused"
    assert "malformed" in result["reason"]


def test_an_unreadable_spokes_list_fails_the_delivery_so_it_is_retried_and_pages(hub: ClientFactory) -> None:
    """Not a refusal of the event (nothing would retry it): the hub's own failure, raised, as the
    meter raises it, so Lambda delivers the event again and the deadline's errors alarm counts it."""
    [host] = launch(spoke_ec2(B, REGION), "g5.xlarge", managed_tags(max_runtime="90m"))
    started = launch_time(spoke_ec2(B, REGION), host)
    hub("ssm", None).put_parameter(Name=PARAMETER, Value="{not json", Type="String", Overwrite=True)

    with pytest.raises(SpokeListError, match=PARAMETER):
        on(state_change(host, "running", started, account=B), hub, started + minutes(1))
    assert deadline_schedules(hub) == {}
