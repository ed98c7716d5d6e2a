"""``status --filter KEY=VALUE`` narrows every table of the view alike, one test per key, on the demo
fleet in moto: two inference hosts (tenant product, g5.xlarge), a training host (research,
g5.12xlarge) and a stand-alone exempt host (research, no pool), all of stack dev in us-east-1.
When nothing matches, one line says so and how many hosts run, and no table is printed."""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from guardrail_fleet import client_factory
from rich.console import Console

from cli.oncall.fleet.status import FleetStatus, fleet_status
from cli.oncall.fleet.status_view import FILTERS, parse_filters, print_status, select
from guardrails import names
from guardrails.settings import Settings
from tests.cli.oncall.ops_fleet import REGION, STACK, project_copy, seed

INFERENCE, TRAINING = names.autoscaling_group(STACK, "inference"), names.autoscaling_group(STACK, "training")


@pytest.fixture
def report(aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FleetStatus:
    monkeypatch.chdir(project_copy(tmp_path))
    seed(aws)
    settings = Settings(stack=None, regions=(REGION,))
    return fleet_status(
        stack=STACK, regions=[REGION], clients=client_factory(aws), settings=settings, now=datetime.now(UTC)
    )


def rendered(report: FleetStatus, *filters: str) -> str:
    output = io.StringIO()
    shown = select(report, parse_filters(filters), "action")
    console = Console(file=output, width=200, color_system=None)
    print_status(console, shown, filters=filters, running=len(report.hosts))
    return output.getvalue()


def shown_hosts(text: str) -> set[str]:
    return {line.split()[0] for line in text.splitlines() if line.startswith("i-")}


def tenant_rows(lines: list[str]) -> set[str]:
    """The tenants of the "By tenant" table: the rows under its title, header and rule."""
    rows = lines[lines.index("By tenant") + 3 :]
    return {line.split()[0] for line in rows[: rows.index("")]}


@dataclass(frozen=True)
class Narrowed:
    value: str  # a value some hosts carry
    pools: set[str]  # the Auto Scaling groups the view keeps
    services: bool  # services carry only stack and region
    tenants: set[str]  # the "By tenant" rows


CASES = {
    "tenant": Narrowed("research", {TRAINING}, False, {"research"}),
    "pool": Narrowed("inference", {INFERENCE}, False, {"product"}),
    "state": Narrowed("exempt", set(), False, {"research"}),  # the exempt host is in no pool
    "stack": Narrowed(STACK, {INFERENCE, TRAINING}, True, {"product", "research"}),
    "region": Narrowed(REGION, {INFERENCE, TRAINING}, True, {"product", "research"}),
    "type": Narrowed("g5.12xlarge", {TRAINING}, False, {"research"}),
}


def test_every_filter_key_has_its_case() -> None:
    assert set(CASES) == set(FILTERS)


@pytest.mark.parametrize("key", sorted(CASES))
def test_a_filter_narrows_every_table(report: FleetStatus, key: str) -> None:
    case = CASES[key]
    text = rendered(report, f"{key}={case.value}")
    lines = text.splitlines()

    matching = {host.host.instance_id for host in report.hosts if FILTERS[key](host) == case.value}
    assert matching, "the demo has hosts for this value"
    assert shown_hosts(text) == matching
    assert lines[0].startswith(f"GPU fleet ({key}={case.value}) in {REGION}")
    pools = {group.name for group in report.groups}
    assert {pool for pool in pools if pool in text} == case.pools
    assert ("Services" in lines) is case.services
    assert tenant_rows(lines) == case.tenants
    # the answer again last: the summary of the narrowed view
    assert lines[-3].startswith(f"GPU fleet ({key}={case.value})")
    assert lines[-2].strip().startswith(f"hosts {len(matching)} · ")


@pytest.mark.parametrize("key", sorted(CASES))
def test_nothing_matching_is_one_line_naming_the_filter_and_what_runs(report: FleetStatus, key: str) -> None:
    value = "exempt" if key == "state" else "nosuch"
    filters = [f"{key}={value}", "tenant=product"] if key == "state" else [f"{key}={value}"]
    text = rendered(report, *filters)

    lines = text.splitlines()
    assert lines[1:] == [f"no host matches {', '.join(filters)} ({len(report.hosts)} running)"]
    assert "No GPU hosts running." not in text
    assert "By tenant" not in text


def test_the_issue_filters_say_what_they_filtered(report: FleetStatus) -> None:
    """The issue's example: two keys together, nothing overdue in research."""
    text = rendered(report, "state=overdue", "tenant=research")
    assert text.splitlines()[1] == "no host matches state=overdue, tenant=research (4 running)"


def test_one_keys_values_are_alternatives_across_the_tables(report: FleetStatus) -> None:
    text = rendered(report, "pool=inference", "pool=training")
    assert {INFERENCE, TRAINING} <= set(text.split())
    assert "Services" not in text.splitlines()


def test_the_ledgers_tenants_are_narrowed_too(report: FleetStatus) -> None:
    """With the ledger configured, a tenant's budget row is shown only beside its shown hosts."""
    from decimal import Decimal

    from guardrails.runway import Budget, TenantRunway

    budgets = [TenantRunway(Budget(tenant, Decimal(1000)), report.now) for tenant in ("product", "research")]
    with_ledger = replace(report, ledger=budgets)

    assert tenant_rows(rendered(with_ledger, "tenant=research").splitlines()) == {"research"}
    assert tenant_rows(rendered(with_ledger, "type=g5.xlarge").splitlines()) == {"product"}
    assert tenant_rows(rendered(with_ledger).splitlines()) == {"product", "research"}
    assert rendered(with_ledger, "state=overdue", "tenant=research").splitlines()[1:] == [
        "no host matches state=overdue, tenant=research (4 running)"
    ]
