"""The sweep against moto's server: a mixed fleet, Auto Scaling groups, SNS, heartbeat, idempotency."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import datetime
from typing import Any

import pytest
from guardrail_fleet import (
    REGION,
    STACK,
    client_factory,
    create_deadline_group,
    create_pool,
    deadline_schedules,
    group_instances,
    group_of,
    guardrail_settings,
    heartbeats,
    latest_launch,
    launch,
    managed_tags,
    metric_value,
    minutes,
    published,
    sns_queue,
    states,
)

from guardrails import names, tags
from lambdas import reaper
from lambdas.aws.environment import ClientFactory
from lambdas.engines import sweeping


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    return client_factory(aws)


def deploy_stack(clients: ClientFactory, stack: str) -> None:
    """What makes a stack exist in a region: its park parameter."""
    clients("ssm", REGION).put_parameter(Name=names.park_parameter(stack), Value="false", Type="String")


class Fleet:
    """Every kind of host the issue names, all launched now; ``now`` is 100 minutes later."""

    def __init__(self, clients: ClientFactory) -> None:
        ec2, autoscaling = clients("ec2", REGION), clients("autoscaling", REGION)
        self.due = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))[0]
        self.under = launch(ec2, "g5.xlarge", managed_tags(max_runtime="2h"))[0]
        self.spot = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"), spot=True)[0]
        self.malformed = launch(ec2, "p3.2xlarge", managed_tags(max_runtime="90 minutes"))[0]
        self.untagged = launch(ec2, "p3.2xlarge", {"Name": "someones-notebook"})[0]
        self.non_gpu = launch(ec2, "m5.large", managed_tags(max_runtime="1m"))[0]
        self.other_stack = launch(ec2, "g5.xlarge", {**managed_tags(), tags.STACK: "other"})[0]
        deploy_stack(clients, "other")
        self.group = create_pool(
            autoscaling, ec2, pool="training", desired=2, group_tags=managed_tags(max_runtime="90m")
        )
        self.grouped = group_instances(autoscaling, self.group)
        started = latest_launch(
            ec2, [self.due, self.under, self.spot, self.malformed, self.untagged, *self.grouped]
        )
        self.now = started + minutes(100)
        exempt_until = (self.now + minutes(60)).strftime("%Y-%m-%dT%H:%M:%SZ")
        too_far = (self.now + minutes(60 * 48)).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.exempt = launch(ec2, "g5.xlarge", managed_tags(**{tags.EXEMPT_UNTIL: exempt_until}))[0]
        self.exempt_too_far = launch(ec2, "g5.xlarge", managed_tags(**{tags.EXEMPT_UNTIL: too_far}))[0]
        # Launched after `started`, these two are younger than the others by a few milliseconds at most.
        self.now = max(self.now, latest_launch(ec2, [self.exempt, self.exempt_too_far]) + minutes(95))


def test_a_mixed_fleet(clients: ClientFactory, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = Fleet(clients)
    topic, queue_url = sns_queue(clients)
    capsys.readouterr()

    result = reaper.handle(
        {"dry_run": False},
        settings=guardrail_settings(sns_topic_arn=topic),
        clients=clients,
        now=fleet.now,
    )

    stopped = {fleet.due, fleet.malformed, fleet.exempt_too_far}
    assert set(result["stopped"]) == stopped | {fleet.spot, *fleet.grouped}
    assert result["errors"] == []
    skipped = {entry["instance_id"]: entry["reason"] for entry in result["skipped"]}
    assert set(skipped) == {fleet.under, fleet.exempt, fleet.untagged}
    assert "within its 2h cap (tag)" in skipped[fleet.under]
    assert skipped[fleet.exempt].startswith("exempt until")
    assert "untagged accelerator host" in skipped[fleet.untagged]
    # Server-side filters: the non-GPU host and the other stack's host are never judged.
    assert result["checked"] == 9

    ec2, autoscaling = clients("ec2", REGION), clients("autoscaling", REGION)
    now_states = states(ec2, [*stopped, fleet.under, fleet.exempt, fleet.untagged, fleet.non_gpu, fleet.spot])
    assert {i: now_states[i] for i in stopped} == dict.fromkeys(stopped, "stopped")
    assert now_states[fleet.spot] == "terminated"
    assert {now_states[i] for i in (fleet.under, fleet.exempt, fleet.untagged, fleet.non_gpu)} == {"running"}
    assert group_of(autoscaling, fleet.group)["DesiredCapacity"] == 0
    assert group_instances(autoscaling, fleet.group) == []
    assert set(states(ec2, fleet.grouped).values()) == {"terminated"}

    rows = {row["instance_id"]: row for row in result["hosts"]}
    assert rows[fleet.grouped[0]]["action"] == "remove-from-group"
    assert rows[fleet.spot]["action"] == "terminate"
    assert rows[fleet.malformed]["reports"][0]["rule"] == "malformed-tags"
    assert "cap (stack)" in rows[fleet.malformed]["reason"]

    [message] = published(clients, queue_url)
    # Stopped: due, malformed, exempt_too_far, spot, 2 grouped. Findings: the untagged host.
    assert message["Subject"] == f"parkbrake {STACK} sweep: 6 stopped, 0 error(s), 1 finding(s)"
    assert fleet.due in message["Message"]
    assert "past its 1h30m cap" in message["Message"]

    [metric] = heartbeats(clients)
    assert metric["Dimensions"] == [
        {"Name": "Guardrail", "Value": "reaper"},
        {"Name": "Stack", "Value": STACK},
    ]
    out = capsys.readouterr().out
    assert metric_value(out, "GuardrailLastSuccess", Guardrail="reaper", Stack=STACK) == fleet.now.timestamp()
    assert (
        metric_value(
            out, "GuardrailActions", Guardrail="reaper", Action="remove-from-group", Reason="past-deadline"
        )
        == 2
    )
    assert metric_value(out, "GuardrailFindings", Guardrail="reaper", Stack=STACK, Finding="unmanaged") == 1
    assert metric_value(out, "GuardrailFindings", Guardrail="reaper", Stack=STACK, Finding="orphaned") == 0


def test_a_second_run_the_same_minute_does_nothing_new(clients: ClientFactory) -> None:
    fleet = Fleet(clients)
    topic, queue_url = sns_queue(clients)
    settings = guardrail_settings(sns_topic_arn=topic)
    first = reaper.handle({}, settings=settings, clients=clients, now=fleet.now)
    assert len(published(clients, queue_url)) == 1

    second = reaper.handle({}, settings=settings, clients=clients, now=fleet.now + minutes(0.5))

    assert len(first["stopped"]) == 6
    assert second["stopped"] == []
    assert second["errors"] == []
    assert {entry["instance_id"] for entry in second["skipped"]} == {
        fleet.under,
        fleet.exempt,
        fleet.untagged,
    }
    # The untagged host's finding went out with the first sweep; without a notices table it is
    # sent again (a duplicate rather than silence: test_notices covers the once-a-day record).
    [again] = published(clients, queue_url)
    assert again["Subject"] == f"parkbrake {STACK} sweep: 0 stopped, 0 error(s), 1 finding(s)"
    assert group_of(clients("autoscaling", REGION), fleet.group)["DesiredCapacity"] == 0


def test_dry_run_reports_and_changes_nothing(clients: ClientFactory) -> None:
    fleet = Fleet(clients)
    metrics_before = heartbeats(clients)
    result = reaper.handle({"dry_run": True}, settings=guardrail_settings(), clients=clients, now=fleet.now)

    assert result["dry_run"] is True
    assert result["stopped"] == []
    assert set(result["would_stop"]) == {
        fleet.due,
        fleet.malformed,
        fleet.exempt_too_far,
        fleet.spot,
        *fleet.grouped,
    }
    ec2 = clients("ec2", REGION)
    assert set(states(ec2, [fleet.due, fleet.spot, *fleet.grouped]).values()) == {"running"}
    assert group_of(clients("autoscaling", REGION), fleet.group)["DesiredCapacity"] == 2
    assert heartbeats(clients) == metrics_before == []


def test_untagged_gpu_hosts_are_stopped_when_configured(clients: ClientFactory) -> None:
    fleet = Fleet(clients)
    result = reaper.handle(
        {}, settings=guardrail_settings(reap_untagged=True), clients=clients, now=fleet.now
    )
    assert fleet.untagged in result["stopped"]
    assert states(clients("ec2", REGION), [fleet.untagged]) == {fleet.untagged: "stopped"}


def test_spot_hosts_can_be_stopped_instead_of_terminated(clients: ClientFactory) -> None:
    fleet = Fleet(clients)
    reaper.handle({}, settings=guardrail_settings(spot_action="stop"), clients=clients, now=fleet.now)
    assert states(clients("ec2", REGION), [fleet.spot]) == {fleet.spot: "stopped"}


def test_no_replacement_appears_after_the_reaper_removed_group_hosts(clients: ClientFactory) -> None:
    """moto replaces a group's instances whenever it reconciles the group to its desired capacity
    (as AWS does continuously). The reaper decrements desired capacity, so reconciling launches nothing;
    the control group, whose host is terminated without the decrement, gets a replacement at once."""
    ec2, autoscaling = clients("ec2", REGION), clients("autoscaling", REGION)
    group = create_pool(
        autoscaling, ec2, pool="training", desired=2, group_tags=managed_tags(max_runtime="90m")
    )
    control = create_pool(autoscaling, ec2, pool="control", desired=1, group_tags={"Name": "control"})
    hosts = group_instances(autoscaling, group)
    now = latest_launch(ec2, hosts) + minutes(91)

    reaper.handle({}, settings=guardrail_settings(), clients=clients, now=now)
    for name in (group, control):  # ask moto to reconcile both groups with their desired capacity
        autoscaling.set_desired_capacity(
            AutoScalingGroupName=name, DesiredCapacity=group_of(autoscaling, name)["DesiredCapacity"]
        )
    [control_host] = group_instances(autoscaling, control)
    autoscaling.terminate_instance_in_auto_scaling_group(
        InstanceId=control_host, ShouldDecrementDesiredCapacity=False
    )

    assert group_instances(autoscaling, group) == []
    assert group_of(autoscaling, group)["DesiredCapacity"] == 0
    running = ec2.describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": ["running", "pending"]}]
    )
    running_ids = {i["InstanceId"] for r in running["Reservations"] for i in r["Instances"]}
    assert running_ids.isdisjoint(hosts)
    replacement = group_instances(autoscaling, control)
    assert len(replacement) == 1
    assert replacement != [control_host]  # the detector works: moto did replace the control's host


def test_judging_given_ids(clients: ClientFactory) -> None:
    fleet = Fleet(clients)
    create_deadline_group(clients)
    result = reaper.handle(
        {"instance_ids": [fleet.due, fleet.under, fleet.non_gpu, fleet.other_stack, "i-0000000000000dead"]},
        settings=guardrail_settings(),
        clients=clients,
        now=fleet.now,
    )
    assert result["stopped"] == [fleet.due]
    skipped = {entry["instance_id"]: entry["reason"] for entry in result["skipped"]}
    assert skipped[fleet.non_gpu] == "m5.large is not an accelerator instance type"
    assert skipped[fleet.other_stack] == "belongs to stack 'other'"
    assert "i-0000000000000dead" not in skipped  # gone: nothing to judge, and no error
    assert result["errors"] == []
    assert heartbeats(clients) == []  # only a full sweep writes the reaper's heartbeat
    # The host not yet due had its deadline schedule (re-)armed at its own deadline, its warning with it.
    schedules = deadline_schedules(clients)
    assert sorted(schedules) == [names.deadline_schedule(fleet.under), names.warning_schedule(fleet.under)]


@pytest.mark.parametrize(
    "event",
    [
        {"dry_run": "false"},
        {"instance_ids": "i-0abc"},
        {"instance_ids": []},
        {"instance_ids": ["not-an-id"]},
    ],
)
def test_malformed_events_are_refused(event: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"dry_run|instance_ids"):
        sweeping.parse_event(event)


def test_eventbridge_scheduled_event_sweeps() -> None:
    event = {
        "version": "0",
        "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2025-03-01T01:05:00Z",
        "region": REGION,
        "resources": [f"arn:aws:events:{REGION}:123456789012:rule/{names.reaper_schedule(STACK)}"],
        "detail": {},
    }
    assert sweeping.parse_event(event) == (False, None)
    assert sweeping.parse_event(None) == (False, None)


def test_handler_reads_the_environment(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Lambda entry point: settings from PARKBRAKE_*, clients from AWS_ENDPOINT_URL, the real clock."""
    ec2 = client_factory(aws)("ec2", REGION)
    untagged = launch(ec2, "g4dn.xlarge", {"Name": "forgotten"})[0]
    monkeypatch.setenv("PARKBRAKE_STACK", STACK)
    monkeypatch.setenv("PARKBRAKE_REAP_UNTAGGED", "true")
    package_logger = logging.getLogger("lambdas")
    saved = (package_logger.handlers[:], package_logger.propagate, package_logger.level)
    reaper.container_settings.cache_clear()
    try:
        result = reaper.handler({"dry_run": False}, None)
    finally:
        reaper.container_settings.cache_clear()
        # The handler set up the Lambda's JSON logging for this process; later tests get pytest's back.
        reaper.configure_logging.cache_clear()
        package_logger.handlers[:], package_logger.propagate = saved[0], saved[1]
        package_logger.setLevel(saved[2])
    assert result["stopped"] == [untagged]
    assert isinstance(datetime.fromisoformat(result["hosts"][0]["launch_time"]), datetime)


def test_the_lambda_logs_structured_json_at_info(aws: str) -> None:
    """The handler as Lambda runs it, in a fresh interpreter: every line it logs is one JSON object,
    and INFO lines (dropped at Lambda's default WARNING level) are there."""
    ec2 = client_factory(aws)("ec2", REGION)
    launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))
    environment = {
        **os.environ,
        "PARKBRAKE_STACK": STACK,
        "PARKBRAKE_REGIONS": REGION,
        "AWS_ENDPOINT_URL": aws,
    }
    done = subprocess.run(
        [sys.executable, "-c", "from lambdas import reaper; reaper.handler({'dry_run': True}, None)"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines, done.stderr
    assert {line["service"] for line in lines} == {"parkbrake-reaper"}
    [result] = [line for line in lines if line["message"] == "reaper result"]
    assert result["level"] == "INFO"
    assert result["name"] == "lambdas.engines.sweeping"  # an engine's logger, set up by its handler
    assert (result["result"]["checked"], result["result"]["dry_run"]) == (1, True)


def karpenter_tags(**extra: str) -> dict[str, str]:
    """A Karpenter node's instance: the EC2NodeClass's tags (parkbrake's, with the reclaim grace) and
    the NodePool and NodeClaim tags Karpenter itself adds."""
    return managed_tags(
        max_runtime="90m",
        **{
            tags.RECLAIM_GRACE: "35m",
            tags.KARPENTER_NODEPOOL: "research-training",
            tags.KARPENTER_NODECLAIM: "research-training-x7k2p",
            **extra,
        },
    )


def test_a_karpenter_node_is_left_to_the_cluster_until_cap_plus_grace_then_stopped_and_reported(
    clients: ClientFactory,
) -> None:
    ec2 = clients("ec2", REGION)
    node = launch(ec2, "g5.12xlarge", karpenter_tags())[0]
    plain = launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))[0]
    started = latest_launch(ec2, [node, plain])
    topic, queue_url = sns_queue(clients)
    settings = guardrail_settings(sns_topic_arn=topic)

    within = reaper.handle({"dry_run": False}, settings=settings, clients=clients, now=started + minutes(124))

    assert within["stopped"] == [plain]  # an EC2 host stops at its cap; the Karpenter node does not
    skipped = {entry["instance_id"]: entry["reason"] for entry in within["skipped"]}
    assert "left to expireAfter and the budget controller's reclaim until" in skipped[node]
    assert states(ec2, [node]) == {node: "running"}
    published(clients, queue_url)  # the first sweep's notice, read off the queue

    past = reaper.handle({"dry_run": False}, settings=settings, clients=clients, now=started + minutes(126))

    assert past["stopped"] == [node]
    assert states(ec2, [node]) == {node: "stopped"}
    row = next(host for host in past["hosts"] if host["instance_id"] == node)
    assert row["rule"] == "karpenter-unreclaimed"
    assert "the cluster failed to reclaim" in row["reason"]
    [message] = [m for m in published(clients, queue_url) if node in m["Message"]]
    assert "NodeClaim research-training-x7k2p of NodePool research-training" in message["Message"]
    assert "check Karpenter and the controller" in message["Message"]
