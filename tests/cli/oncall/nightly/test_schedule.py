"""``parkbrake schedule``: list, pause/resume keeping the whole definition, run-now through the launcher."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from aws_fault_proxy import FaultProxy
from click.testing import CliRunner, Result
from guardrail_fleet import client_factory

from cli.main import parkbrake
from cli.oncall.nightly.schedules import closed_days_of, get_schedule, next_occurrence, run_now
from guardrails import names
from guardrails.launch import Admission, AdmissionRequest, required_cost
from tests.cli.oncall.ops_fleet import (
    BERLIN,
    REGION,
    STACK,
    aws_client,
    capacity,
    close_days,
    project_copy,
    schedule,
    seed,
)

GROUP = names.schedule_group(STACK)
NIGHTLY = names.nightly_schedule(STACK, "training")
REAPER = names.reaper_schedule(STACK)
TRAINING = names.autoscaling_group(STACK, "training")


@pytest.fixture
def fleet(aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(project_copy(tmp_path))  # the stack file gives the region, as in a checkout
    return seed(aws)


def invoke(*arguments: str) -> Result:
    return CliRunner().invoke(parkbrake, ["schedule", *arguments])


def without_modification_time(definition: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in definition.items() if key not in ("State", "LastModificationDate")}


def test_list_shows_kinds_states_and_the_next_nightly_run(aws: str, fleet: Any) -> None:
    result = invoke("list", "--stack", STACK, "--output", "json")

    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["group"] == GROUP
    assert document["region"] == REGION
    by_name = {item["name"]: item for item in document["schedules"]}
    assert by_name[NIGHTLY]["kind"] == "nightly"
    assert by_name[NIGHTLY]["pool"] == "training"
    assert by_name[NIGHTLY]["payload"] == {"pool": "training", "capacity": 1}
    assert by_name[REAPER]["kind"] == "reaper"
    # rate(5 minutes): the next whole period after now, counted from the schedule's creation.
    reaper_next = datetime.fromisoformat(by_name[REAPER]["next_run"])
    assert timedelta(0) < reaper_next - datetime.now(UTC) <= timedelta(minutes=5)
    next_run = datetime.fromisoformat(by_name[NIGHTLY]["next_run"])
    assert next_run.astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M") == "01:00"


def test_pause_and_resume_keep_every_other_field(aws: str, fleet: Any) -> None:
    before = schedule(aws, GROUP, NIGHTLY)

    paused = invoke("pause", NIGHTLY, "--stack", STACK, "--yes")

    assert paused.exit_code == 0, paused.output
    after = schedule(aws, GROUP, NIGHTLY)
    assert after["State"] == "DISABLED"
    assert without_modification_time(after) == without_modification_time(before)
    assert after["Target"]["RetryPolicy"] == {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 2}
    assert "already DISABLED" in invoke("pause", NIGHTLY, "--stack", STACK, "--yes").output

    resumed = invoke("resume", NIGHTLY, "--stack", STACK, "--yes", "--output", "json")

    assert json.loads(resumed.stdout) == {
        "schedule": NIGHTLY,
        "before": "DISABLED",
        "after": "ENABLED",
        "changed": True,
        "dry_run": False,
    }
    assert without_modification_time(schedule(aws, GROUP, NIGHTLY)) == without_modification_time(before)
    assert schedule(aws, GROUP, NIGHTLY)["State"] == "ENABLED"


def test_pause_dry_run_and_refusals_change_nothing(aws: str, fleet: Any) -> None:
    dry = invoke("pause", NIGHTLY, "--stack", STACK, "--dry-run")
    reaper = invoke("pause", REAPER, "--stack", STACK, "--yes")
    unknown = invoke("pause", "nosuch", "--stack", STACK, "--yes")
    unconfirmed = invoke("pause", NIGHTLY, "--stack", STACK)

    assert dry.exit_code == 0
    assert "Would change" in dry.output
    assert reaper.exit_code == 2
    assert "guardrails are never paused" in reaper.output
    assert unknown.exit_code == 2
    assert "no schedule 'nosuch'" in unknown.output
    assert unconfirmed.exit_code == 2
    assert "Refusing without --yes" in unconfirmed.output
    assert schedule(aws, GROUP, NIGHTLY)["State"] == schedule(aws, GROUP, REAPER)["State"] == "ENABLED"


def test_run_now_starts_the_pool_with_the_schedules_payload_then_refuses_at_capacity(
    aws: str, fleet: Any
) -> None:
    aws_client(aws, "autoscaling").update_auto_scaling_group(AutoScalingGroupName=TRAINING, DesiredCapacity=0)

    started = invoke("run-now", NIGHTLY, "--stack", STACK, "--yes", "--output", "json")

    assert started.exit_code == 0, started.output
    report = json.loads(started.stdout)
    assert report["payload"] == {"pool": "training", "capacity": 1}
    assert (report["started"], report["refused"], report["budget"]) == (1, None, "not checked")
    assert capacity(aws, TRAINING) == (0, 1, 2)

    again = invoke("run-now", NIGHTLY, "--stack", STACK, "--yes")

    assert again.exit_code == 1
    assert "Refused (at-capacity)" in again.output
    assert capacity(aws, TRAINING) == (0, 1, 2)


def test_run_now_refuses_when_the_stack_is_parked(aws: str, fleet: Any) -> None:
    aws_client(aws, "autoscaling").update_auto_scaling_group(AutoScalingGroupName=TRAINING, DesiredCapacity=0)
    park = CliRunner().invoke(parkbrake, ["park", "--now", "--yes", "--stack", STACK])
    assert park.exit_code == 0, park.output

    result = invoke("run-now", NIGHTLY, "--stack", STACK, "--yes", "--output", "json")

    assert result.exit_code == 1
    assert json.loads(result.stdout)["refused"]["kind"] == "parked"
    assert capacity(aws, TRAINING) == (0, 0, 2)


class RefusingGate:
    """The ledger's budget gate, as the launcher sees it, for a tenant whose runway is spent."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Decimal]] = []

    def admit(self, request: AdmissionRequest, now: datetime) -> Admission:
        self.asked.append((request.tenant, required_cost(request.hosts, Decimal("5.672"), request.cap)))
        return Admission(False, Decimal(1), Decimal(0), reason="runway 0s: the month's budget is spent")

    def release(self, reservation_id: int, now: datetime) -> None:
        raise AssertionError("a refused admission holds nothing")


def test_run_now_obeys_the_runway_refusal_of_the_budget_gate(aws: str, fleet: Any) -> None:
    aws_client(aws, "autoscaling").update_auto_scaling_group(AutoScalingGroupName=TRAINING, DesiredCapacity=0)
    gate = RefusingGate()

    result = run_now(
        aws_client(aws, "scheduler"),
        STACK,
        NIGHTLY,
        region=REGION,
        clients=client_factory(aws),
        environ={},
        gate=gate,
        now=datetime.now(UTC),
        dry_run=False,
    )

    assert result.refused
    assert result.decision is not None
    assert result.decision.refusal is not None
    assert result.decision.refusal.kind == "budget"
    assert gate.asked
    assert gate.asked[0][0] == "research"
    assert gate.asked[0][1] == Decimal("5.672") * 4  # one g5.12xlarge for its 4h cap
    assert capacity(aws, TRAINING) == (0, 0, 2)


def test_run_now_only_runs_nightly_starts_and_dry_run_calls_nothing(aws: str, fleet: Any) -> None:
    aws_client(aws, "autoscaling").update_auto_scaling_group(AutoScalingGroupName=TRAINING, DesiredCapacity=0)

    reaper = invoke("run-now", REAPER, "--stack", STACK, "--yes")
    dry = invoke("run-now", NIGHTLY, "--stack", STACK, "--dry-run", "--output", "json")

    assert reaper.exit_code == 2
    assert "parkbrake reap" in reaper.output
    assert dry.exit_code == 0
    assert json.loads(dry.stdout)["dry_run"] is True
    assert json.loads(dry.stdout)["started"] == 1  # what it would do, decided by the launcher's checks
    assert capacity(aws, TRAINING) == (0, 0, 2)


def test_run_now_dry_run_goes_through_the_refusals_and_reports_once(aws: str, fleet: Any) -> None:
    aws_client(aws, "ssm").put_parameter(Name=names.park_parameter(STACK), Value="true", Overwrite=True)

    dry = invoke("run-now", NIGHTLY, "--stack", STACK, "--dry-run")

    assert dry.exit_code == 1
    refusals = [line for line in dry.output.splitlines() if "refused" in line.lower()]
    assert len(refusals) == 1, dry.output
    assert refusals[0].startswith("Would be refused (parked)")
    assert capacity(aws, TRAINING) == (0, 1, 2)


def test_list_of_an_unknown_stack_is_an_error(aws: str, fleet: Any) -> None:
    result = invoke("list", "--stack", "nosuch", "--region", REGION)

    assert result.exit_code == 2
    assert "stack 'nosuch' has no schedule group parkbrake-nosuch in us-east-1 — " in result.output


@pytest.mark.parametrize(
    ("expression", "timezone", "now", "expected"),
    [
        # 00:30 on weeknights in Los Angeles: EventBridge counts weekdays from Sunday = 1.
        (
            "cron(30 0 ? * 2-6 *)",
            "America/Los_Angeles",
            "2026-01-02T09:00:00+00:00",
            "2026-01-05T08:30:00+00:00",
        ),
        ("cron(0 1 * * ? *)", "Europe/Berlin", "2026-07-01T00:30:00+00:00", "2026-07-01T23:00:00+00:00"),
        ("at(2026-03-01T12:00:00)", "UTC", "2026-02-01T00:00:00+00:00", "2026-03-01T12:00:00+00:00"),
        ("at(2026-03-01T12:00:00)", "UTC", "2026-04-01T00:00:00+00:00", None),
        ("rate(5 minutes)", "UTC", "2026-02-01T00:00:00+00:00", "2026-02-01T00:02:00+00:00"),
        ("rate(1 day)", "UTC", "2026-02-01T00:00:00+00:00", "2026-02-01T23:57:00+00:00"),
    ],
)
def test_next_occurrence(expression: str, timezone: str, now: str, expected: str | None) -> None:
    anchor = datetime.fromisoformat("2026-01-31T23:57:00+00:00")  # when the schedule was created
    moment = next_occurrence(expression, timezone, datetime.fromisoformat(now), anchor=anchor)

    assert (moment.isoformat() if moment else None) == expected


# --- the calendar of closed days ------------------------------------------------------------------------


def test_list_shows_the_next_run_on_an_open_day_and_the_closed_days_skipped(aws: str, fleet: Any) -> None:
    today = datetime.now(BERLIN).date()
    # Yesterday to the day after tomorrow: whatever the hour, the next 01:00 start falls in the closure.
    close_days(aws, today - timedelta(days=1), 4)

    result = invoke("list", "--stack", STACK, "--output", "json")
    table = invoke("list", "--stack", STACK)

    assert result.exit_code == 0, result.output
    nightly = {item["name"]: item for item in json.loads(result.stdout)["schedules"]}[NIGHTLY]
    assert nightly["calendar"] == names.calendar_parameter(STACK)
    next_run = datetime.fromisoformat(nightly["next_run"]).astimezone(BERLIN)
    assert (next_run.date(), next_run.strftime("%H:%M")) == (today + timedelta(days=3), "01:00")
    skipped = [date.fromisoformat(item["day"]) for item in nightly["skipped_closed_days"]]
    assert skipped[-2:] == [today + timedelta(days=1), today + timedelta(days=2)]
    assert {item["reason"] for item in nightly["skipped_closed_days"]} == {"Year-end freeze"}
    assert table.exit_code == 0, table.output
    assert f"{NIGHTLY} skips {today + timedelta(days=2)} (closed: Year-end freeze)" in table.output


def test_next_open_run_in_virtual_time(aws: str, fleet: Any) -> None:
    close_days(aws, date(2025, 12, 24), 3)
    nightly = get_schedule(aws_client(aws, "scheduler"), STACK, NIGHTLY)
    closed = closed_days_of([nightly], aws_client(aws, "ssm"))[names.calendar_parameter(STACK)]

    upcoming, skipped = nightly.next_open_run(datetime(2025, 12, 23, 12, tzinfo=UTC), closed)

    # 01:00 in Berlin on the 27th (UTC+1): the 24th, 25th and 26th are skipped.
    assert upcoming == datetime(2025, 12, 27, 0, 0, tzinfo=UTC)
    assert [day for day, _reason in skipped] == [date(2025, 12, 24), date(2025, 12, 25), date(2025, 12, 26)]
    assert nightly.next_open_run(datetime(2025, 12, 27, 12, tzinfo=UTC), closed) == (
        datetime(2025, 12, 28, 0, 0, tzinfo=UTC),
        [],
    )


def test_run_now_on_a_closed_day_refuses_unless_forced(aws: str, fleet: Any) -> None:
    aws_client(aws, "autoscaling").update_auto_scaling_group(AutoScalingGroupName=TRAINING, DesiredCapacity=0)
    today = datetime.now(BERLIN).date()
    close_days(aws, today - timedelta(days=1), 3)

    refused = invoke("run-now", NIGHTLY, "--stack", STACK, "--yes")

    assert refused.exit_code == 1
    assert "Refused (closed): " in refused.output
    assert "Year-end freeze" in refused.output
    assert "--force" in refused.output
    assert capacity(aws, TRAINING) == (0, 0, 2)

    forced = invoke("run-now", NIGHTLY, "--stack", STACK, "--yes", "--force", "--output", "json")

    assert forced.exit_code == 0, forced.output
    assert (json.loads(forced.stdout)["started"], json.loads(forced.stdout)["refused"]) == (1, None)
    assert capacity(aws, TRAINING) == (0, 1, 2)


def test_force_never_starts_a_parked_stack(aws: str, fleet: Any) -> None:
    aws_client(aws, "autoscaling").update_auto_scaling_group(AutoScalingGroupName=TRAINING, DesiredCapacity=0)
    aws_client(aws, "ssm").put_parameter(Name=names.park_parameter(STACK), Value="true", Overwrite=True)
    close_days(aws, datetime.now(BERLIN).date() - timedelta(days=1), 3)

    result = invoke("run-now", NIGHTLY, "--stack", STACK, "--yes", "--force", "--output", "json")

    assert result.exit_code == 1
    assert json.loads(result.stdout)["refused"]["kind"] == "parked"
    assert capacity(aws, TRAINING) == (0, 0, 2)


def test_run_now_records_its_start_in_the_decision_log_as_the_launcher_does(
    aws: str, fleet: Any, caplog: pytest.LogCaptureFixture
) -> None:
    aws_client(aws, "autoscaling").update_auto_scaling_group(AutoScalingGroupName=TRAINING, DesiredCapacity=0)
    caplog.set_level("INFO", logger="lambdas.decisions")

    started = invoke("run-now", NIGHTLY, "--stack", STACK, "--yes")

    assert started.exit_code == 0, started.output
    recorded = [record.decision for record in caplog.records if hasattr(record, "decision")]
    assert [(item["kind"], item["tenant"], item["details"]["started"]) for item in recorded] == [
        ("launch-start", "research", 1)
    ]
    assert recorded[0]["actor"].startswith("arn:aws:")  # the person who ran it, as STS names them


def test_run_now_reports_a_decision_it_could_not_attribute_and_the_start_stands(aws: str, fleet: Any) -> None:
    aws_client(aws, "autoscaling").update_auto_scaling_group(AutoScalingGroupName=TRAINING, DesiredCapacity=0)
    with FaultProxy(aws) as proxy:
        proxy.fail("GetCallerIdentity", "AccessDenied", "not allowed", status=403)

        result = run_now(
            aws_client(aws, "scheduler"),
            STACK,
            NIGHTLY,
            region=REGION,
            clients=client_factory(proxy.url, max_attempts=1),
            environ={},
            gate=None,
            now=datetime.now(UTC),
            dry_run=False,
        )

    assert result.decision.start == 1
    assert result.errors == (
        {"action": "record-decisions", "error": "who ran it: AccessDenied: not allowed"},
    )
    assert result.as_dict()["errors"] == list(result.errors)
    assert capacity(aws, TRAINING) == (0, 1, 2)
