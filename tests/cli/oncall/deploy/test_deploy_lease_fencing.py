"""A run that lost its deploy lease never touches the service again: the lease's fence, checked before every
AWS write of a deploy, a rollback and an abort (``cli/oncall/deploy/lease_guard.py``), against moto's server.

The requests a run sends are recorded from botocore's own ``before-send`` event, registered last on the
run's clients: it fires right before each HTTP request leaves, after every other handler (the lease check
among them), so a request the check stopped is never recorded as sent.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.main import parkbrake
from cli.oncall.deploy.lease import LEASE_FOR, STILL_MINE, DeployLease, DeployLocked, LeaseLost
from cli.oncall.deploy.lease_guard import LeaseGuardedClient, guarded_clients, is_write
from cli.oncall.deploy.runtime import AwsClients, Runtime
from guardrails import names
from lambdas.clients import RETRIES
from tests.aws_fault_proxy import FaultProxy, ProxiedRequest
from tests.cli.oncall.deploy.deploy_steps import (
    assert_no_surge,
    assert_serving,
    deployer,
    interrupted,
    lease_holder,
    lease_item,
    run_as_another,
)
from tests.cli.oncall.deploy.inference_fleet import (
    NEW_REVISION,
    OLD_REVISION,
    OTHER_REVISION,
    SERVICE,
    STACK,
    InferenceFleet,
    SimulatedScheduler,
    VirtualClock,
    build_fleet,
)

STALL = timedelta(minutes=6)  # longer than the lease: the run stood still past its expiry


@pytest.fixture
def fleet(aws: str, tmp_path: Path) -> InferenceFleet:
    return build_fleet(tmp_path / "project")


@dataclass
class SentRequests:
    """Every HTTP request one run's clients sent, in order: (service, operation, DynamoDB condition)."""

    sent: list[tuple[str, str, str]] = field(default_factory=list)

    def __call__(self, event_name: str, request: Any, **_: Any) -> None:
        _, service, operation = event_name.split(".", 2)
        condition = ""
        if service == "dynamodb" and request.body:
            condition = json.loads(request.body).get("ConditionExpression", "")
        self.sent.append((service, operation, condition))

    def client(self, service: str, region: str | None = None) -> Any:
        made = boto3.client(service, region_name=region, config=RETRIES)
        made.meta.events.register_last("before-send", self)
        return made

    def clients(self) -> AwsClients:
        return AwsClients(
            self.client("ecs"),
            self.client("elbv2"),
            self.client("autoscaling"),
            lambda region: self.client("ecr", region),
            self.client("dynamodb"),
        )

    def writes(self, since: int = 0) -> list[str]:
        """The service writes sent (the lease's own table aside), from request ``since`` on."""
        return [op for service, op, _ in self.sent[since:] if service != "dynamodb" and is_write(op)]


def cli_run(
    fleet: InferenceFleet, scheduler: SimulatedScheduler, clock: VirtualClock, clients: AwsClients, *args: str
) -> tuple[int, str]:
    """One engineer's ``parkbrake COMMAND inference --stack dev --yes …`` on their own clients."""
    command, *rest = args
    arguments = [command, SERVICE, "--stack", STACK, "--project-dir", str(fleet.stack_file.parent), "--yes"]
    outcome = CliRunner().invoke(parkbrake, [*arguments, *rest], obj=Runtime(clients, scheduler, clock))
    assert "Traceback" not in outcome.output
    return outcome.exit_code, outcome.output


def service_state(fleet: InferenceFleet) -> dict[str, Any]:
    """Everything a run could change, read back from AWS (and the stack file)."""
    group = fleet.group()
    return {
        "weights": fleet.weights(),
        "desired": {colour: fleet.desired(colour) for colour in fleet.services},
        "task_definitions": {colour: fleet.service(colour)["taskDefinition"] for colour in fleet.services},
        "hosts": (group["DesiredCapacity"], sorted(i["InstanceId"] for i in group["Instances"])),
        "surge_mark": fleet.surge_mark(),
        "task_definition_count": fleet.task_definition_count(),
        "stack_file": fleet.stack_file.read_text(),
    }


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Error:")]


# -- every write follows a check ------------------------------------------------------------------------


def assert_each_write_follows_a_check(sent: list[tuple[str, str, str]]) -> None:
    for index, (service, operation, _) in enumerate(sent):
        if service != "dynamodb" and is_write(operation):
            before = sent[index - 1] if index else None
            assert before == ("dynamodb", "UpdateItem", STILL_MINE), (
                operation,
                sent[max(index - 3, 0) : index],
            )


def _deploy(fleet: InferenceFleet, scheduler: SimulatedScheduler) -> tuple[str, ...]:
    return ("deploy", "--image", fleet.image("v1"), "--revision", NEW_REVISION, "--bake", "1m")


def _failing_deploy(fleet: InferenceFleet, scheduler: SimulatedScheduler) -> tuple[str, ...]:
    scheduler.failing.add(NEW_REVISION)
    return ("deploy", "--image", fleet.image("v1"), "--revision", NEW_REVISION, "--timeout", "2m")


def _rollback(fleet: InferenceFleet, scheduler: SimulatedScheduler) -> tuple[str, ...]:
    assert deployer(fleet, scheduler, VirtualClock(scheduler)).run().outcome == "deployed"
    other = deployer(fleet, scheduler, VirtualClock(scheduler), revision=OTHER_REVISION, tag="v2")
    assert other.run().outcome == "deployed"
    return ("rollback", "--bake", "1m")


def _abort(fleet: InferenceFleet, scheduler: SimulatedScheduler) -> tuple[str, ...]:
    interrupted(fleet, scheduler)
    return ("deploy", "--abort")


@pytest.mark.parametrize(
    ("arrange", "exit_code", "writes"),
    [
        (_deploy, 0, {"RegisterTaskDefinition", "CreateOrUpdateTags", "SetDesiredCapacity", "UpdateService",
                      "ModifyListener", "TerminateInstanceInAutoScalingGroup", "DeleteTags", "TagResource"}),
        (_failing_deploy, 1, {"RegisterTaskDefinition", "UpdateService", "TerminateInstanceInAutoScalingGroup"}),
        (_rollback, 0, {"RegisterTaskDefinition", "UpdateService", "ModifyListener", "TagResource"}),
        (_abort, 0, {"ModifyListener", "UpdateService", "TerminateInstanceInAutoScalingGroup", "DeleteTags"}),
    ],
    ids=["deploy", "deploy-rolled-back", "rollback", "abort"],
)  # fmt: skip
def test_every_aws_write_of_a_deploy_rollback_or_abort_is_sent_right_after_a_lease_check(
    fleet: InferenceFleet,
    arrange: Callable[[InferenceFleet, SimulatedScheduler], tuple[str, ...]],
    exit_code: int,
    writes: set[str],
) -> None:
    scheduler = SimulatedScheduler(fleet)
    command = arrange(fleet, scheduler)
    recorder = SentRequests()

    code, output = cli_run(fleet, scheduler, VirtualClock(scheduler), recorder.clients(), *command)

    assert code == exit_code, output
    assert writes <= set(recorder.writes()), recorder.writes()  # the run wrote what its path writes
    assert_each_write_follows_a_check(recorder.sent)
    assert lease_holder(fleet) is None


# -- the stalled run that resumes ------------------------------------------------------------------------


@dataclass
class StallThenTakeOver:
    """A clock hook: once ``when`` holds, the run stands still for :data:`STALL` (its lease lapses), and
    meanwhile another engineer takes the lease over with ``--steal-lock`` and runs ``command`` to the end."""

    fleet: InferenceFleet
    when: Callable[[InferenceFleet], bool]
    command: tuple[str, ...]
    recorder: SentRequests | None = None
    stalled_at: int | None = None  # how many requests the stalled run had sent when it stalled
    after_takeover: dict[str, Any] | None = None
    takeover: tuple[int, str] = (0, "")

    def __call__(self, clock: VirtualClock) -> None:
        if self.stalled_at is not None or not self.when(self.fleet):
            return
        self.stalled_at = len(self.recorder.sent) if self.recorder else 0
        clock.current += STALL
        self.takeover = run_as_another(self.fleet, clock.scheduler, clock, *self.command, "--steal-lock")
        self.after_takeover = service_state(self.fleet)


def in_canary(fleet: InferenceFleet) -> bool:
    return fleet.weights() == {"blue": 90, "green": 10}


@pytest.mark.parametrize(
    ("revision", "tag", "stopped_before"),
    [(OTHER_REVISION, "v2", "rolling back"), (NEW_REVISION, "v1", "the done step")],
    ids=["another-revision", "the-same-revision"],
)
def test_a_deploy_stalled_past_its_lease_while_another_completes_exits_1_and_leaves_the_service_as_it_is(
    fleet: InferenceFleet, revision: str, tag: str, stopped_before: str
) -> None:
    """The reported run: A stalls 6 minutes mid-canary, B takes the lapsed lease and completes, A resumes.
    Deploying another revision, B rolls A's canary back and puts its own on green; A, resuming, finds its
    canary gone and (before the fence) "rolled back" to blue, which B had scaled to zero."""
    scheduler = SimulatedScheduler(fleet)
    recorder = SentRequests()
    other = ("deploy", SERVICE, "--image", fleet.image(tag), "--revision", revision, "--bake", "1m")
    stall = StallThenTakeOver(fleet, in_canary, other, recorder)
    clock = VirtualClock(scheduler, stall)

    code, output = cli_run(
        fleet, scheduler, clock, recorder.clients(),
        "deploy", "--image", fleet.image("v1"), "--revision", NEW_REVISION, "--bake", "2m",
    )  # fmt: skip

    assert stall.takeover[0] == 0, stall.takeover[1]  # B completed: green serves its revision
    assert_serving(fleet, "green", revision)
    assert_no_surge(fleet)
    assert code == 1, output
    assert error_lines(output) == [error_lines(output)[0]]  # one line says why
    line = error_lines(output)[0]
    assert "lost the deploy lease on inference of stack dev (lease #1)" in line
    assert "took it over as lease #2" in line
    assert f"stopped before {stopped_before}" in line
    assert "still serves" not in output
    assert "Rolled back" not in output
    # Nothing A did after it stalled reached the service: it is exactly as B left it.
    assert stall.stalled_at is not None
    assert recorder.writes(since=stall.stalled_at) == []
    assert service_state(fleet) == stall.after_takeover
    assert lease_holder(fleet) is None  # B released it; A's release did not touch B's


def test_a_lapsed_lease_nobody_took_still_stops_the_run_and_the_same_command_resumes(
    fleet: InferenceFleet,
) -> None:
    scheduler = SimulatedScheduler(fleet)
    stood_still: list[bool] = []

    def stall_once(clock: VirtualClock) -> None:
        if not stood_still and in_canary(fleet):
            stood_still.append(True)
            clock.current += STALL

    command = ("deploy", "--image", fleet.image("v1"), "--revision", NEW_REVISION, "--bake", "2m")
    code, output = cli_run(fleet, scheduler, VirtualClock(scheduler, stall_once), fleet.clients, *command)

    assert code == 1, output
    assert "lapsed at 2026-03-02T09:" in error_lines(output)[0]
    assert "run the same command again to resume" in error_lines(output)[0]
    assert fleet.weights() == {"blue": 90, "green": 10}  # stopped in the canary, still serving
    assert lease_holder(fleet) is None  # its own lapsed lease released on the way out

    code, output = cli_run(fleet, scheduler, VirtualClock(scheduler), fleet.clients, *command)
    assert code == 0, output
    assert_serving(fleet, "green", NEW_REVISION)
    assert lease_item(fleet)["fence"] == {"N": "2"}


def test_an_abort_that_lost_its_lease_while_waiting_for_an_idle_host_changes_nothing_more(
    fleet: InferenceFleet,
) -> None:
    scheduler = SimulatedScheduler(fleet)
    interrupted(fleet, scheduler)  # a canary left behind: blue 90, green 10, an extra host
    recorder = SentRequests()
    redeploy = ("deploy", SERVICE, "--image", fleet.image("v1"), "--revision", NEW_REVISION, "--bake", "1m")
    # The abort's one wait is for an idle host to remove, after it sent traffic back and scaled green in.
    stall = StallThenTakeOver(fleet, lambda fleet: fleet.desired("green") == 0, redeploy, recorder)

    code, output = cli_run(
        fleet, scheduler, VirtualClock(scheduler, stall), recorder.clients(), "deploy", "--abort"
    )

    assert stall.takeover[0] == 0, stall.takeover[1]
    assert_serving(fleet, "green", NEW_REVISION)  # B's deploy, started after the abort stalled, stands
    assert code == 1, output
    assert "lost the deploy lease" in error_lines(output)[0]
    assert "Aborted" not in output
    assert "alone again" not in output
    assert stall.stalled_at is not None
    assert recorder.writes(since=stall.stalled_at) == []
    assert service_state(fleet) == stall.after_takeover


def test_a_rollback_that_lost_its_lease_mid_canary_rolls_nothing_back(fleet: InferenceFleet) -> None:
    scheduler = SimulatedScheduler(fleet)
    _rollback(fleet, scheduler)  # blue serves OTHER_REVISION; NEW_REVISION was verified before it
    recorder = SentRequests()
    # B deploys the serving revision again: it finds A's canary foreign, rolls it back, and is done.
    again = ("deploy", SERVICE, "--image", fleet.image("v2"), "--revision", OTHER_REVISION)
    stall = StallThenTakeOver(fleet, in_canary, again, recorder)

    code, output = cli_run(
        fleet, scheduler, VirtualClock(scheduler, stall), recorder.clients(), "rollback", "--bake", "2m"
    )

    assert stall.takeover[0] == 0, stall.takeover[1]
    assert_serving(fleet, "blue", OTHER_REVISION)
    assert code == 1, output
    assert "lost the deploy lease" in error_lines(output)[0]
    assert "Rolled back" not in output
    assert stall.stalled_at is not None
    assert recorder.writes(since=stall.stalled_at) == []
    assert service_state(fleet) == stall.after_takeover


def test_a_write_through_the_gateway_after_a_take_over_is_never_sent_and_reads_still_pass(
    fleet: InferenceFleet,
) -> None:
    clock = VirtualClock(SimulatedScheduler(fleet))
    recorder = SentRequests()
    clients = recorder.clients()
    mine = DeployLease(clients.dynamodb, stack=STACK, service=SERVICE, operation="deploy",
                       revision=NEW_REVISION, now=clock.now, holder="ana@laptop (pid 1)")  # fmt: skip
    mine.acquire()
    guarded = guarded_clients(clients, mine)
    group = fleet.autoscaling_group
    guarded.autoscaling.set_desired_capacity(AutoScalingGroupName=group, DesiredCapacity=2)
    assert recorder.sent[-2:] == [
        ("dynamodb", "UpdateItem", STILL_MINE), ("auto-scaling", "SetDesiredCapacity", ""),
    ]  # fmt: skip

    clock.current += STALL
    theirs = DeployLease(fleet.clients.dynamodb, stack=STACK, service=SERVICE, operation="rollback",
                         revision=OLD_REVISION, now=clock.now, holder="bob@desk (pid 2)")  # fmt: skip
    theirs.acquire(steal=True)
    sent = len(recorder.sent)

    with pytest.raises(LeaseLost) as lost:
        guarded.autoscaling.set_desired_capacity(AutoScalingGroupName=group, DesiredCapacity=3)

    assert str(lost.value).startswith(
        "lost the deploy lease on inference of stack dev (lease #1): bob@desk (pid 2) took it over as lease #2 "
        "for rollback of 3f2c1ab at 2026-03-02T09:06:00Z; stopped before SetDesiredCapacity"
    )
    assert recorder.writes(since=sent) == []  # the check failed, the write never left
    assert fleet.group()["DesiredCapacity"] == 2
    # Reads pass unchecked; the same client objects under the new holder's lease write, and so does
    # the plain client (not every user of a client is a run holding a lease).
    assert guarded.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])[
        "AutoScalingGroups"
    ]
    guarded_clients(clients, theirs).autoscaling.set_desired_capacity(
        AutoScalingGroupName=group, DesiredCapacity=1
    )
    clients.autoscaling.set_desired_capacity(AutoScalingGroupName=group, DesiredCapacity=2)
    assert recorder.writes(since=sent) == ["SetDesiredCapacity", "SetDesiredCapacity"]
    assert fleet.group()["DesiredCapacity"] == 2


def test_a_retried_write_is_checked_again_and_not_resent_once_the_lease_is_lost(
    aws: str, fleet: InferenceFleet
) -> None:
    """AWS throttles the write's first attempt; while botocore backs off, the run's lease is taken over.
    The retry's own check fails, so the retry never leaves (botocore retries the throttle by itself)."""
    clock = VirtualClock(SimulatedScheduler(fleet))
    mine = DeployLease(fleet.clients.dynamodb, stack=STACK, service=SERVICE, operation="deploy",
                       revision=NEW_REVISION, now=clock.now, holder="ana@laptop (pid 1)")  # fmt: skip
    theirs = DeployLease(fleet.clients.dynamodb, stack=STACK, service=SERVICE, operation="deploy",
                         revision=OTHER_REVISION, now=clock.now, holder="bob@desk (pid 2)")  # fmt: skip
    mine.acquire()

    def stall_and_take_over(request: ProxiedRequest) -> bool:
        clock.current += STALL
        theirs.acquire(steal=True)
        return True

    with FaultProxy(aws) as proxy:
        proxy.fail("SetDesiredCapacity", "Throttling", "Rate exceeded", status=400, times=1,
                   matches=stall_and_take_over)  # fmt: skip
        autoscaling = boto3.client("autoscaling", endpoint_url=proxy.url, config=RETRIES)
        guarded = LeaseGuardedClient(autoscaling, mine)
        with pytest.raises(LeaseLost, match=r"took it over as lease #2 .* stopped before SetDesiredCapacity"):
            guarded.set_desired_capacity(AutoScalingGroupName=fleet.autoscaling_group, DesiredCapacity=2)
        attempts = proxy.calls["SetDesiredCapacity"]

    assert attempts == 1  # the throttled attempt only: its retry was stopped by the check
    assert fleet.group()["DesiredCapacity"] == 1


# -- the lease's rules, for any sequence of takes, checks and releases --------------------------------------

RUNS = 3
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.integers(0, RUNS - 1), st.booleans()),
        st.tuples(st.just("check"), st.integers(0, RUNS - 1), st.just(False)),
        st.tuples(st.just("release"), st.integers(0, RUNS - 1), st.just(False)),
        st.tuples(st.just("wait"), st.integers(0, 7), st.just(False)),
    ),
    max_size=12,
)


TABLES = itertools.count(1)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS)
def test_only_the_latest_taker_confirms_the_lease_while_it_lasts_and_the_fence_only_grows(
    aws: str, actions: list[tuple[str, int, bool]]
) -> None:
    """Against a model: a take wins when nobody holds the lease (or, stealing, when it lapsed), and each
    win writes a higher fence; a check passes only for the latest taker, before its lease lapses."""
    dynamodb = boto3.client("dynamodb")
    stack = f"fence{next(TABLES)}"  # a table per example: the aws fixture resets moto once per test
    dynamodb.create_table(
        TableName=names.notices_table(stack), KeySchema=[{"AttributeName": "notice", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "notice", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
    )  # fmt: skip
    clock = [datetime(2026, 3, 2, 9, 0, tzinfo=UTC)]
    leases = [
        DeployLease(dynamodb, stack=stack, service=SERVICE, operation="deploy", revision=str(n),
                    now=lambda: clock[0], holder=f"run-{n}")
        for n in range(RUNS)
    ]  # fmt: skip
    holder: int | None = None  # the model: who holds the lease, until when, the fences written
    expires = clock[0]
    fences: list[int] = []
    for action, which, steal in actions:
        now, lease = clock[0], leases[which % RUNS]
        if action == "wait":
            clock[0] += timedelta(minutes=which)
        elif action == "take":
            free = holder is None or (steal and now >= expires)
            try:
                lease.acquire(steal=steal)
            except DeployLocked:
                assert not free
                continue
            assert free, (holder, which)
            assert lease.fence is not None
            assert lease.fence > max(fences, default=0)
            fences.append(lease.fence)
            holder, expires = which, now + LEASE_FOR
        elif action == "check":
            valid = holder == which and now < expires
            try:
                lease.check("a write")
            except LeaseLost:
                assert not valid
            else:
                assert valid
                expires = now + LEASE_FOR
        else:
            lease.release()
            holder = None if holder == which else holder
