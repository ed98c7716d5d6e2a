"""``parkbrake status`` on a mixed fleet in moto: GPU hosts and what they cost, services, park state."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aws_fault_proxy import FaultProxy
from click.testing import CliRunner, Result
from guardrail_fleet import client_factory
from rich.console import Console

from cli.main import parkbrake
from cli.oncall.fleet.status import fleet_status
from cli.oncall.fleet.status_view import parse_filters, print_status, select
from guardrails import names
from guardrails.pricing import load_price_table
from guardrails.settings import Settings
from lambdas.clients import client
from tests.cli.oncall.ops_fleet import BERLIN, REGION, STACK, aws_client, close_days, project_copy, seed

OTHER_REGION = "us-west-2"
PRICES = {"g5.xlarge": Decimal("1.006"), "g5.12xlarge": Decimal("5.672"), "g6.xlarge": Decimal("0.8048")}


@pytest.fixture
def fleet(aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(project_copy(tmp_path))
    return seed(aws)


def invoke(*arguments: str) -> Result:
    return CliRunner().invoke(parkbrake, ["status", *arguments])


def launch_times(aws: str, region: str = REGION) -> dict[str, datetime]:
    reservations = aws_client(aws, "ec2", region).describe_instances()["Reservations"]
    return {i["InstanceId"]: i["LaunchTime"].astimezone(UTC) for r in reservations for i in r["Instances"]}


def test_a_mixed_fleet_shows_gpu_hosts_with_deadlines_costs_and_exemptions(aws: str, fleet: Any) -> None:
    launched = launch_times(aws)
    now = max(launched.values()) + timedelta(hours=1)
    settings = Settings(stack=None, regions=(REGION,))

    report = fleet_status(
        stack=STACK, regions=[REGION], clients=client_factory(aws), settings=settings, now=now
    )

    hosts = {host["instance_id"]: host for host in report.as_dict()["hosts"]}
    assert fleet.cpu_host not in hosts  # an m5.large is not an accelerator host
    assert len(hosts) == 4  # two inference hosts, one training host, the stand-alone exempt one
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for host in hosts.values():
        by_pool.setdefault(host["pool"], []).append(host)
    assert sorted((pool, len(items)) for pool, items in by_pool.items()) == [
        ("inference", 2),
        ("research-adhoc", 1),
        ("training", 1),
    ]
    training = by_pool["training"][0]
    age = now - launched[training["instance_id"]]
    assert training["age_seconds"] == int(age.total_seconds())
    assert training["time_left_seconds"] == int((timedelta(hours=4) - age).total_seconds())
    assert training["cost_so_far_usd"] == float(
        (PRICES["g5.12xlarge"] * int(age.total_seconds()) / 3600).quantize(Decimal("0.01"))
    )
    assert (training["tenant"], training["accelerators"], training["exempt"]) == ("research", 4, False)
    exempt = hosts[fleet.standalone_host]
    assert exempt["exempt"] is True
    assert exempt["exempt_until"] is not None
    assert exempt["autoscaling_group"] is None
    assert exempt["instance_type"] == "g6.xlarge"
    totals = report.as_dict()["totals"]
    assert totals["hosts"] == 4
    assert totals["accelerators"] == 7
    assert totals["usd_per_hour"] == float(
        (2 * PRICES["g5.xlarge"] + PRICES["g5.12xlarge"] + PRICES["g6.xlarge"]).quantize(Decimal("0.01"))
    )
    tenants = {row["tenant"]: row for row in report.as_dict()["tenants"]}
    assert (tenants["product"]["hosts"], tenants["research"]["accelerators"]) == (2, 5)
    assert report.as_dict()["ledger"] == "not configured"


def test_services_park_state_and_next_start_through_the_cli(aws: str, fleet: Any) -> None:
    result = invoke("--stack", STACK, "--output", "json")

    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    services = {service["name"]: service for service in document["services"]}
    assert {name: (s["desired"], s["revision"]) for name, s in services.items()} == {
        names.CONTROL_PLANE_SERVICE: (2, "0123abcd"),
        "inference-blue": (1, "0123abcd"),
        "inference-green": (0, "0123abcd"),
    }
    assert services["inference-blue"]["task_definition"] == f"{names.prefix(STACK)}-inference:1"
    [stack] = document["stacks"]
    assert (stack["stack"], stack["parked"]) == (STACK, False)
    assert stack["next_start"]["pool"] == "training"
    assert stack["next_start"]["schedule"] == names.nightly_schedule(STACK, "training")


def test_the_next_start_skips_the_closed_days_of_the_calendar(aws: str, fleet: Any) -> None:
    today = datetime.now(BERLIN).date()
    close_days(aws, today - timedelta(days=1), 4)  # whatever the hour, the next 01:00 start is closed

    result = invoke("--stack", STACK, "--output", "json")

    assert result.exit_code == 0, result.output
    [stack] = json.loads(result.stdout)["stacks"]
    start = datetime.fromisoformat(stack["next_start"]["at"]).astimezone(BERLIN)
    assert (start.date(), start.strftime("%H:%M")) == (today + timedelta(days=3), "01:00")
    aws_client(aws, "ssm").delete_parameter(Name=names.calendar_parameter(STACK))
    unreadable = invoke("--stack", STACK, "--output", "json")
    assert (
        f"{names.calendar_parameter(STACK)} (the calendar of closed days) does not exist" in unreadable.output
    )


def test_text_output_and_park_state_after_parking(aws: str, fleet: Any) -> None:
    assert CliRunner().invoke(parkbrake, ["park", "--now", "--yes", "--stack", STACK]).exit_code == 0

    text = invoke("--stack", STACK)
    document = json.loads(invoke("--stack", STACK, "-o", "json").stdout)

    assert text.exit_code == 0
    assert "GPU hosts (1), most urgent first" in text.output
    assert "hosts 1 · accelerators 1 · 0 overdue · 0 unmanaged · 1 exempt" in text.output
    assert "parked stacks dev (of 1)" in text.output
    assert "parked by user/moto at" in text.output  # the pools' park records: who and when
    [stack] = document["stacks"]
    assert stack["parked"] is True
    assert stack["next_start"] is None
    assert [host["instance_id"] for host in document["hosts"]] == [fleet.standalone_host]


def test_every_stack_and_region_at_once_and_only_one_stack_when_asked(aws: str, fleet: Any) -> None:
    seed(aws, stack="prod", region=OTHER_REGION)

    everything = json.loads(invoke("--regions", f"{REGION},{OTHER_REGION}", "-o", "json").stdout)
    dev_only = json.loads(
        invoke("--stack", STACK, "--regions", f"{REGION},{OTHER_REGION}", "-o", "json").stdout
    )

    assert {(s["stack"], s["region"]) for s in everything["stacks"]} == {
        (STACK, REGION),
        ("prod", OTHER_REGION),
    }
    assert {host["region"] for host in everything["hosts"]} == {REGION, OTHER_REGION}
    assert everything["totals"]["hosts"] == 8
    assert {host["stack"] for host in dev_only["hosts"]} == {STACK}
    assert dev_only["totals"]["hosts"] == 4


def test_a_region_that_fails_is_reported_and_the_others_still_shown(
    aws: str, fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(aws, stack=STACK, region=OTHER_REGION)
    with FaultProxy(aws) as proxy:
        proxy.fail(
            "DescribeInstances",
            "UnauthorizedOperation",
            "not authorized in this region",
            status=403,
            matches=lambda request: f"/{OTHER_REGION}/ec2/" in request.headers.get("authorization", ""),
        )
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)

        result = invoke("--stack", STACK, "--regions", f"{REGION},{OTHER_REGION}", "-o", "json")

    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert [error.split(":")[0] for error in document["errors"]] == [OTHER_REGION]
    assert "UnauthorizedOperation" in document["errors"][0]
    assert {host["region"] for host in document["hosts"]} == {REGION}
    assert {stack["region"] for stack in document["stacks"]} == {REGION, OTHER_REGION}


def test_unknown_stack_is_a_clear_error(aws: str, fleet: Any) -> None:
    result = invoke("--stack", "nosuch", "--regions", REGION)

    assert result.exit_code == 2
    assert "stack 'nosuch' has nothing in us-east-1" in result.output
    assert isinstance(result.exception, SystemExit)


def test_with_the_ledger_configured_spend_and_runway_per_tenant(
    aws: str, fleet: Any, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from guardrails.runway import Budget
    from lambdas.ledger.store import LedgerStore

    store = LedgerStore.connect(database_url)
    try:
        store.migrate()
        store.set_budget(Budget("research", Decimal(6000)))
    finally:
        store.close()
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", database_url)

    result = invoke("--stack", STACK, "-o", "json")
    text = invoke("--stack", STACK)

    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["ledger"] == "configured"
    research = next(row for row in document["tenants"] if row["tenant"] == "research")
    assert research["ledger"]["limit_usd"] == "6000.00"  # the ledger's amounts: exact decimal strings
    assert research["ledger"]["remaining_usd"] is not None
    assert "runway" in text.output
    assert "ledger not configured" not in text.output


def test_with_an_unmigrated_ledger_one_line_says_to_migrate(
    aws: str, fleet: Any, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uuid

    import psycopg
    from psycopg.conninfo import make_conninfo

    from lambdas.ledger.connections import masked_url

    name = f"parkbrake_unmigrated_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        empty = make_conninfo(database_url, dbname=name)
        monkeypatch.setenv("PARKBRAKE_DATABASE_URL", empty)
        result = invoke("--stack", STACK)
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert result.output.strip().splitlines() == [
        f"Error: the ledger at {masked_url(empty)} has no schema (or an older one): run parkbrake ledger migrate"
    ]


def test_the_process_clients_serve_regions_concurrently(aws: str, fleet: Any) -> None:
    # The CLI's own client factory, shared by one thread per region.
    settings = Settings(stack=None, regions=(REGION, OTHER_REGION))
    report = fleet_status(
        stack=None, regions=[REGION, OTHER_REGION], clients=client, settings=settings, now=datetime.now(UTC)
    )

    assert {stack.stack for stack in report.stacks} == {STACK}
    assert not report.errors


# -- what needs action, at any width -------------------------------------------------------------------


def five_hours_on(aws: str, fleet: Any) -> Any:
    """The demo fleet five hours after launch, with one unmanaged GPU host: the training host (4h cap) and
    the stand-alone one (exempt for 2h, cap 2h) are overdue."""
    aws_client(aws, "ec2").run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="g5.xlarge",
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "Name", "Value": "someone's"}]}],
    )  # fmt: skip
    now = max(launch_times(aws).values()) + timedelta(hours=5)
    settings = Settings(stack=None, regions=(REGION,))
    return fleet_status(stack=None, regions=[REGION], clients=client_factory(aws), settings=settings, now=now)


def rendered(report: Any, width: int, *filters: str, sort: str = "action") -> str:
    output = io.StringIO()
    shown = select(report, parse_filters(filters), sort)
    print_status(Console(file=output, width=width, color_system=None), shown, filters=filters)
    return output.getvalue()


def test_the_summary_comes_first_and_overdue_and_unmanaged_hosts_lead_the_table(aws: str, fleet: Any) -> None:
    report = five_hours_on(aws, fleet)

    summary = report.summary()
    assert (summary["hosts"], summary["overdue"], summary["unmanaged"], summary["exempt"]) == (5, 2, 1, 0)
    unmanaged_burn = load_price_table().instances["g5.xlarge"].usd_per_hour  # the one unmanaged host
    assert summary["unmanaged_usd_per_hour"] == float(unmanaged_burn.quantize(Decimal("0.01")))
    text = rendered(report, 120)
    lines = text.splitlines()
    assert lines[1].strip().startswith("hosts 5 · accelerators 8 · 2 overdue · 1 unmanaged · 0 exempt")
    assert lines[2].strip().startswith("burn $")
    assert lines[3].strip() == f"unmanaged hosts burn ${unmanaged_burn:,.2f}/h: no guardrail may stop them"
    order = [line.split()[1] for line in lines if line.startswith("i-")]
    assert order[:3] == ["overdue", "overdue", "unmanaged"]
    assert order[3:] == ["running", "running"]
    overdue = [line for line in lines if " overdue " in line and line.startswith("i-")]
    assert all(" over " in line for line in overdue)  # how long past the deadline


@pytest.mark.parametrize("width", [80, 120])
def test_ids_and_timestamps_are_never_cut_at_any_width(aws: str, fleet: Any, width: int) -> None:
    report = five_hours_on(aws, fleet)

    text = rendered(report, width)

    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    for host in report.hosts:
        assert any(line.startswith(host.host.instance_id + " ") for line in lines), host.host.instance_id
        if host.deadline is not None:
            assert f"{host.deadline.enforce_at:%m-%d %H:%M}" in text
    for group in report.groups:
        assert group.name in text
    if width == 80:
        assert "hidden at this width:" in text  # what had to go is named, not silently cut
    assert "…" not in text


def test_filters_and_sort_narrow_text_and_json_alike(aws: str, fleet: Any) -> None:
    report = five_hours_on(aws, fleet)

    research = rendered(report, 200, "tenant=research", "state=overdue")
    assert "GPU hosts (2), most urgent first" in research
    by_cost = [
        line.split()[0] for line in rendered(report, 200, sort="cost").splitlines() if line.startswith("i-")
    ]
    costs = {host.host.instance_id: host.usd_per_hour or 0 for host in report.hosts}
    assert [costs[item] for item in by_cost] == sorted(costs.values(), reverse=True)

    result = invoke("--stack", STACK, "--filter", "pool=training", "-o", "json")
    assert result.exit_code == 0, result.output
    assert {host["pool"] for host in json.loads(result.stdout)["hosts"]} == {"training"}


def test_a_bad_filter_names_the_field_and_the_choices(aws: str, fleet: Any) -> None:
    result = invoke("--stack", STACK, "--filter", "colour=blue", "--filter", "state=late")

    assert result.exit_code == 2
    assert "--filter 'colour=blue': use KEY=VALUE with KEY one of tenant, pool, state" in result.output
    assert "--filter 'state=late': state is one of overdue, unmanaged" in result.output
    assert "Traceback" not in result.output


def test_pools_services_and_traffic_in_json(aws: str, fleet: Any) -> None:
    document = json.loads(invoke("--stack", STACK, "-o", "json").stdout)

    groups = {group["name"]: group for group in document["groups"]}
    assert (
        groups[names.autoscaling_group(STACK, "inference")]["min"],
        groups[names.autoscaling_group(STACK, "inference")]["max"],
    ) == (1, 3)
    services = {service["name"]: service for service in document["services"]}
    assert services["inference-blue"]["traffic"] == "default 100%"
    assert services["inference-green"]["traffic"] == "none"
    assert services[names.CONTROL_PLANE_SERVICE]["traffic"] is None
    assert document["summary"]["hosts"] == 4


def test_a_listing_error_everywhere_is_one_clear_line_and_a_failure(
    aws: str, fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FaultProxy(aws) as proxy:
        proxy.fail("DescribeInstances", "UnauthorizedOperation", "not authorized", status=403)
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        results = [invoke("--stack", STACK, "--regions", REGION, "-o", output) for output in ("text", "json")]
        # A real process too: there no test handler catches a log line that Python would print beside it.
        process = subprocess.run(
            [sys.executable, "-c", "from cli.main import main; main()", "status", "--regions", REGION],
            env={**os.environ, "AWS_ENDPOINT_URL": proxy.url}, capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip

    for result in results:
        assert result.exit_code == 1
        assert result.output.splitlines() == [
            f"Error: {REGION}: cannot list instances: UnauthorizedOperation: not authorized"
        ]
    assert process.returncode == 1
    assert (process.stdout, process.stderr.splitlines()) == (
        "",
        [f"Error: {REGION}: cannot list instances: UnauthorizedOperation: not authorized"],
    )
