"""``parkbrake extend`` against moto: within the limits the deadline and its schedules move and the host
records who, when and why; beyond either limit, for an unknown or unmanaged host, or without a reason,
nothing changes and the exit is non-zero."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from guardrail_fleet import (
    ACCOUNT,
    REGION,
    ROLE_ARN,
    STACK,
    TARGET_ARN,
    client_factory,
    create_deadline_group,
    deadline_schedules,
    guardrail_settings,
    launch,
    launch_time,
    managed_tags,
    minutes,
    states,
)

from cli.main import parkbrake
from guardrails import names, tags
from guardrails.rules.base import instant
from lambdas import reaper
from lambdas.aws.deadline_schedules import HostPlace, arm_deadline, schedule_expression
from lambdas.aws.environment import ClientFactory
from tests.lambdas.test_org_sweep import B, spoke_ec2

OWNER = "ana@example.com"


@pytest.fixture
def clients(aws: str) -> ClientFactory:
    """A deployed stack: its park parameter and its deadlines' schedule group."""
    made = client_factory(aws)
    made("ssm", REGION).put_parameter(Name=names.park_parameter(STACK), Value="false", Type="String")
    create_deadline_group(made)
    return made


def extend(*args: str, **environ: str) -> Any:
    env = {"PARKBRAKE_STACK": STACK, "PARKBRAKE_REGIONS": REGION, **environ}
    return CliRunner().invoke(parkbrake, ["extend", *args], env=env, catch_exceptions=False)


def host_tags(clients: ClientFactory, instance_id: str) -> dict[str, str]:
    described = clients("ec2", REGION).describe_instances(InstanceIds=[instance_id])
    return {tag["Key"]: tag["Value"] for tag in described["Reservations"][0]["Instances"][0]["Tags"]}


def gpu_host(clients: ClientFactory, **extra: str) -> str:
    return launch(
        clients("ec2", REGION), "g5.xlarge", managed_tags(max_runtime="90m", Name="llm-eval", **extra)
    )[0]


def test_within_the_limits_the_deadline_and_its_schedules_move(clients: ClientFactory) -> None:
    host = gpu_host(clients, **{tags.OWNER: OWNER})
    started = launch_time(clients("ec2", REGION), host)
    before = dict(host_tags(clients, host))

    result = extend(host, "--by", "1h", "--reason", "eval finishing, ETA 40m", "--yes", "--output", "json")

    assert result.exit_code == 0, result.output
    extended = json.loads(result.output)
    new_deadline = started + minutes(150)
    assert extended["previous_deadline"] == instant(started + minutes(90))
    assert extended["deadline"] == instant(new_deadline)
    assert extended["actor"] == f"arn:aws:sts::{ACCOUNT}:user/moto"
    assert extended["warning_at"] == instant(new_deadline - timedelta(minutes=15))
    recorded = host_tags(clients, host)
    assert recorded == {
        **before,
        tags.EXEMPT_UNTIL: instant(new_deadline),
        tags.EXTENDED_BY: f"arn:aws:sts::{ACCOUNT}:user/moto",
        tags.EXTENDED_AT: extended["at"],
        tags.EXTENSION_REASON: "eval finishing, ETA 40m",
    }
    schedules = deadline_schedules(clients)
    deadline, warning = schedules[names.deadline_schedule(host)], schedules[names.warning_schedule(host)]
    assert deadline["ScheduleExpression"] == schedule_expression(new_deadline)
    assert warning["ScheduleExpression"] == schedule_expression(new_deadline - timedelta(minutes=15))
    # The names the Guardrails component gives the reaper and the scheduler role, in the caller's account.
    for schedule in (deadline, warning):
        assert (schedule["Target"]["Arn"], schedule["Target"]["RoleArn"]) == (TARGET_ARN, ROLE_ARN)
    assert json.loads(warning["Target"]["Input"]) == {"warn": [host]}

    # The sweep honours the extension: past the 90m cap the host runs on, and at the new deadline it stops.
    judged = reaper.handle(
        {"instance_ids": [host]}, settings=guardrail_settings(), clients=clients, now=started + minutes(100)
    )
    assert judged["stopped"] == []
    assert f"exempt until {instant(new_deadline)}" in judged["skipped"][0]["reason"]
    stopped = reaper.handle(
        {"instance_ids": [host]}, settings=guardrail_settings(), clients=clients, now=new_deadline
    )
    assert stopped["stopped"] == [host]
    assert states(clients("ec2", REGION), [host]) == {host: "stopped"}


def test_text_output_shows_the_move_and_the_limits(clients: ClientFactory) -> None:
    host = gpu_host(clients)
    started = launch_time(clients("ec2", REGION), host)
    result = extend(host, "--by", "30m", "--reason", "checkpointing", "--yes")
    assert result.exit_code == 0, result.output
    assert (
        f"deadline  {instant(started + minutes(90))} -> {instant(started + minutes(120))} (+30m)"
        in result.output
    )
    assert "limits    1d from now (exemption limit), 1d since its start (ceiling)" in result.output
    assert f"Extended {host} to {instant(started + minutes(120))}" in result.output


def test_beyond_the_exemption_limit_is_refused_naming_it(clients: ClientFactory) -> None:
    host = gpu_host(clients)
    before = host_tags(clients, host)

    result = extend(host, "--by", "3h", "--reason", "long eval", "--yes", PARKBRAKE_MAX_EXEMPTION="2h")

    assert result.exit_code == 1
    assert "beyond the stack's exemption limit of 2h (PARKBRAKE_MAX_EXEMPTION, guardrails.max_exemption)" in (
        result.output
    )
    assert "the most allowed now is --by " in result.output
    assert "Traceback" not in result.output
    assert host_tags(clients, host) == before
    assert deadline_schedules(clients) == {}


def test_beyond_the_runtime_ceiling_is_refused_naming_it(clients: ClientFactory) -> None:
    host = gpu_host(clients)
    before = host_tags(clients, host)

    result = extend(host, "--by", "1h", "--reason", "long eval", "--yes", PARKBRAKE_MAX_RUNTIME_CEILING="2h")

    assert result.exit_code == 1
    assert (
        "beyond the stack's runtime ceiling of 2h (PARKBRAKE_MAX_RUNTIME_CEILING, guardrails.max_runtime_ceiling);"
        " the most allowed is --by 30m" in result.output
    )
    assert "exemption limit" not in result.output
    assert host_tags(clients, host) == before


def test_an_unknown_instance_is_refused(clients: ClientFactory) -> None:
    result = extend("i-0000000000000dead", "--by", "1h", "--reason", "why not", "--yes")
    assert result.exit_code == 1
    assert (
        f"i-0000000000000dead: no such instance in {REGION}; check the id and --region (a member account's host: --account)"
        in result.output
    )


def test_an_unmanaged_instance_is_refused(clients: ClientFactory) -> None:
    [host] = launch(clients("ec2", REGION), "g5.xlarge", {"Name": "notebook"})
    result = extend(host, "--by", "1h", "--reason", "mine", "--yes")
    assert result.exit_code == 1
    assert f"{host} is not managed by parkbrake (parkbrake:managed is not 'true')" in result.output
    assert tags.EXEMPT_UNTIL not in host_tags(clients, host)


def test_another_stacks_host_is_refused_naming_the_stack(clients: ClientFactory) -> None:
    clients("ssm", REGION).put_parameter(Name=names.park_parameter("prod"), Value="false", Type="String")
    [host] = launch(clients("ec2", REGION), "g5.xlarge", managed_tags(**{tags.STACK: "prod"}))
    result = extend(host, "--by", "1h", "--reason", "mine", "--yes")
    assert result.exit_code == 1
    assert f"{host} belongs to stack 'prod'; run this with --stack prod" in result.output


@pytest.mark.parametrize(
    ("reason", "expected"),
    [(None, "Error: missing option --reason — pass --reason TEXT"), ("  ", "--reason: required")],
)
def test_a_reason_is_required(clients: ClientFactory, reason: str | None, expected: str) -> None:
    host = gpu_host(clients)
    result = extend(host, "--by", "1h", "--yes", *(["--reason", reason] if reason is not None else []))
    assert result.exit_code == 2
    assert expected in result.output
    assert tags.EXEMPT_UNTIL not in host_tags(clients, host)


def test_dry_run_and_no_terminal_change_nothing(clients: ClientFactory) -> None:
    host = gpu_host(clients)
    started = launch_time(clients("ec2", REGION), host)
    before = host_tags(clients, host)

    dry = extend(host, "--by", "1h", "--reason", "eval", "--dry-run", "--output", "json")
    unasked = extend(host, "--by", "1h", "--reason", "eval")

    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["deadline"] == instant(started + minutes(150))
    assert json.loads(dry.output)["dry_run"] is True
    assert unasked.exit_code == 2
    assert "Refusing without --yes" in unasked.output
    assert host_tags(clients, host) == before
    assert deadline_schedules(clients) == {}


def test_denied_tagging_is_one_line_and_changes_nothing(
    aws: str, clients: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As under the guard policy: CreateTags of parkbrake:* refused to a role it does not name."""
    from aws_fault_proxy import FaultProxy

    host = gpu_host(clients)
    before = host_tags(clients, host)
    with FaultProxy(aws) as proxy:
        proxy.fail(
            "CreateTags", "UnauthorizedOperation", "explicit deny in a service control policy", status=403
        )
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        result = CliRunner().invoke(
            parkbrake,
            ["extend", host, "--by", "1h", "--reason", "eval", "--yes"],
            env={"PARKBRAKE_STACK": STACK, "PARKBRAKE_REGIONS": REGION},
        )
    assert result.exit_code == 1
    assert "explicit deny in a service control policy" in result.output
    assert "Traceback" not in result.output
    assert host_tags(clients, host) == before
    assert deadline_schedules(clients) == {}


def member_host(at_region: str = REGION) -> tuple[str, Any]:
    """A managed GPU host in member account B (through a session of B's own), and B's EC2 client."""
    ec2 = spoke_ec2(B, at_region)
    return launch(ec2, "g5.xlarge", managed_tags(max_runtime="90m"))[0], ec2


def test_a_member_hosts_extension_keeps_its_place_in_the_hubs_schedules(clients: ClientFactory) -> None:
    """Central deadlines: the hub armed B's host's deadline with B's place; extending it from the hub
    tags the host in B and moves both schedules in the hub, the place still in their payloads."""
    host, ec2 = member_host()
    started = launch_time(ec2, host)
    place = HostPlace(B, REGION)
    arm_deadline(
        clients("scheduler", REGION), group=names.deadline_schedule_group(STACK), instance_id=host,
        at=started + minutes(90), target_arn=TARGET_ARN, role_arn=ROLE_ARN, dead_letter_arn=None, place=place,
    )  # fmt: skip

    result = extend(host, "--by", "1h", "--reason", "eval finishing", "--yes", "--output", "json")

    assert result.exit_code == 0, result.output
    new_deadline = started + minutes(150)
    assert json.loads(result.output)["account"] == B
    described = ec2.describe_instances(InstanceIds=[host])["Reservations"][0]["Instances"][0]
    assert {t["Key"]: t["Value"] for t in described["Tags"]}[tags.EXEMPT_UNTIL] == instant(new_deadline)
    schedules = deadline_schedules(clients)
    deadline, warning = schedules[names.deadline_schedule(host)], schedules[names.warning_schedule(host)]
    assert deadline["ScheduleExpression"] == schedule_expression(new_deadline)
    assert json.loads(deadline["Target"]["Input"]) == {"instance_ids": [host], "account": B, "region": REGION}
    assert json.loads(warning["Target"]["Input"]) == {"warn": [host], "account": B, "region": REGION}
    assert (
        clients("ec2", REGION).describe_instances(Filters=[{"Name": "instance-id", "Values": [host]}])[
            "Reservations"
        ]
        == []
    )  # never the hub's own host


def test_account_names_a_member_host_with_no_deadline_armed_yet(clients: ClientFactory) -> None:
    host, ec2 = member_host()
    result = extend(host, "--by", "30m", "--reason", "checkpointing", "--account", B, "--yes")
    assert result.exit_code == 0, result.output
    payload = json.loads(deadline_schedules(clients)[names.deadline_schedule(host)]["Target"]["Input"])
    assert payload == {"instance_ids": [host], "account": B, "region": REGION}
    described = ec2.describe_instances(InstanceIds=[host])["Reservations"][0]["Instances"][0]
    assert tags.EXTENSION_REASON in {t["Key"] for t in described["Tags"]}  # tagged in B


@pytest.mark.parametrize("account", ["12345", "12345678901x", "1234567890123"])
def test_a_bad_account_is_one_line_and_exit_2(clients: ClientFactory, account: str) -> None:
    host = gpu_host(clients)
    result = extend(host, "--by", "30m", "--reason", "checkpointing", "--account", account, "--yes")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"Error: --account: {account!r} is not a 12-digit AWS account id; give the host's account"
    ]
    assert tags.EXEMPT_UNTIL not in host_tags(clients, host)


def test_an_account_other_than_the_armed_deadlines_is_refused(clients: ClientFactory) -> None:
    host, ec2 = member_host()
    arm_deadline(
        clients("scheduler", REGION), group=names.deadline_schedule_group(STACK), instance_id=host,
        at=launch_time(ec2, host) + minutes(90), target_arn=TARGET_ARN, role_arn=ROLE_ARN,
        dead_letter_arn=None, place=HostPlace(B, REGION),
    )  # fmt: skip
    result = extend(host, "--by", "30m", "--reason", "x", "--account", "444444444444", "--yes")
    assert result.exit_code == 2
    assert f"--account: the deadline of {host} names account {B}, not 444444444444" in result.output


@pytest.mark.parametrize("garbage", ["not json", "[1, 2]", '"text"'])
def test_an_armed_deadline_whose_input_is_garbage_is_one_line_and_changes_nothing(
    clients: ClientFactory, garbage: str
) -> None:
    """The hub reads a member host's place from its armed deadline: an input edited into something
    else is said, never a traceback, and never read as "the hub's own host"."""
    host, ec2 = member_host()
    clients("scheduler", REGION).create_schedule(
        Name=names.deadline_schedule(host), GroupName=names.deadline_schedule_group(STACK),
        ScheduleExpression="at(2036-05-05T10:00:00)", FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": TARGET_ARN, "RoleArn": ROLE_ARN, "Input": garbage},
    )  # fmt: skip
    result = extend(host, "--by", "30m", "--reason", "checkpointing", "--yes")
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert f"the deadline schedule {names.deadline_schedule(host)}" in line
    assert "holds no JSON object" in line
    described = ec2.describe_instances(InstanceIds=[host])["Reservations"][0]["Instances"][0]
    assert tags.EXEMPT_UNTIL not in {t["Key"] for t in described.get("Tags", [])}
