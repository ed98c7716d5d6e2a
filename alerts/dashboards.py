"""The Grafana dashboards as code: the fleet (what runs, what it costs, GPU health, guardrails) and the
tenants (spend, budgets, runway), built with grafana-foundation-sdk and committed as JSON.

    python -m alerts.dashboards          # rewrite alerts/dashboards/*.json
    python -m alerts.dashboards --check  # exit 1 when the committed JSON differs from this code

Every panel but one queries a Prometheus data source chosen by the ``datasource`` variable, and only
metrics that parkbrake exports (``parkbrake agent``, ``parkbrake exporter``, the guardrails), the
recording rules of ``alerts/parkbrake.rules.yml`` and Prometheus's own ``up``; a test checks that.
The guardrails' actions are counted where the Lambdas write them, in CloudWatch (the embedded metric
format), so that panel reads a CloudWatch data source (the ``cloudwatch`` variable) with a Metrics
Insights query over exactly the metric and dimensions ``lambdas.aws.heartbeat.count_action`` writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import cloudwatch, dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.builders.common import ReduceDataOptions, StackingConfig
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.cloudwatch import CloudWatchQueryMode, MetricEditorMode, MetricQueryType
from grafana_foundation_sdk.models.common import BigValueGraphMode, StackingMode
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    VariableRefresh,
    VariableSort,
)

from guardrails import names
from guardrails.idle import QUIET_PERCENT
from lambdas.aws.heartbeat import ACTIONS_EMF, GUARDRAIL_DIMENSION

FOLDER = Path(__file__).resolve().parent / "dashboards"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
CLOUDWATCH = DataSourceRef(type_val="cloudwatch", uid="${cloudwatch}")
# The dimensions every GuardrailActions datapoint carries (lambdas.aws.heartbeat.count_action).
ACTION_DIMENSIONS = ("Action", GUARDRAIL_DIMENSION, "Reason")
# The agent's default idle threshold (`parkbrake agent --threshold`), as a ratio.
IDLE_RATIO = QUIET_PERCENT / 100
SCRAPE_JOBS = 'job="parkbrake-agent"'


def query(expr: str, legend: str = "__auto", ref_id: str = "A") -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref_id).datasource(DATASOURCE)


def number(title: str, expr: str, unit: str, description: str, legend: str = "__auto") -> stat.Panel:
    """One big figure (the latest value), for the row of totals at the top."""
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(4)
        .span(6)
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]))
        .graph_mode(BigValueGraphMode.AREA)
        .with_target(query(expr, legend))
    )


def graph(title: str, description: str, unit: str, *targets: prometheus.Dataquery) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(8)
        .span(12)
    )
    for index, target in enumerate(targets):
        panel = panel.with_target(target.ref_id("ABCDEFGH"[index]))
    return panel


def guardrail_actions() -> timeseries.Panel:
    """Stops, refusals, reports and starts per hour, by guardrail and action, from CloudWatch."""
    schema = ", ".join([f'"{names.heartbeat_namespace()}"', *sorted(ACTION_DIMENSIONS)])
    sql = (
        f"SELECT SUM({ACTIONS_EMF}) FROM SCHEMA({schema}) "
        f"GROUP BY {GUARDRAIL_DIMENSION}, Action ORDER BY SUM() DESC"
    )
    target = (
        cloudwatch.CloudWatchMetricsQuery()
        .datasource(CLOUDWATCH)
        .query_mode(CloudWatchQueryMode.METRICS)
        .metric_query_type(MetricQueryType.QUERY)
        .metric_editor_mode(MetricEditorMode.CODE)
        .sql_expression(sql)
        .region("default")
        .period("3600")
        .ref_id("A")
    )
    return stacked(
        timeseries.Panel()
        .title("Guardrail actions per hour")
        .description(
            "Stops, refusals, reports and starts, by guardrail and action: the Lambdas' "
            f"{ACTIONS_EMF} counter in CloudWatch ({names.heartbeat_namespace()})."
        )
        .datasource(CLOUDWATCH)
        .unit("none")
        .height(8)
        .span(12)
        .with_target(target)
    )


def stacked(panel: timeseries.Panel) -> timeseries.Panel:
    return panel.stacking(StackingConfig().mode(StackingMode.NORMAL)).fill_opacity(30)


def base(title: str, uid: str, description: str) -> dashboard.Dashboard:
    return (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["parkbrake", "generated"])
        .refresh("1m")
        .time("now-24h", "now")
        .timezone("utc")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    )


def _fleet_what_runs(board: dashboard.Dashboard) -> dashboard.Dashboard:
    """The row of totals, and what runs and costs by pool."""
    return (
        board.with_row(dashboard.Row("What is running, what it costs"))
        .with_panel(number("Accelerators running", "sum(parkbrake_running_gpus)", "none", "From the ledger."))
        .with_panel(
            number(
                "Burn rate",
                "sum(parkbrake_burn_rate_usd_per_hour)",
                "currencyUSD",
                "What the running hosts cost per hour now, at on-demand prices.",
            )
        )
        .with_panel(
            number(
                "Outside the guardrails",
                "sum(parkbrake_unmanaged_accelerator_hosts) or vector(0)",
                "none",
                "Running accelerator hosts without parkbrake:managed=true (no guardrail caps them), and "
                "accelerators the ledger cannot bill to a tenant.",
                legend="unmanaged hosts",
            ).with_target(
                query(
                    'sum(parkbrake_running_gpus{tenant="unattributed"}) or vector(0)',
                    "unattributed accelerators",
                    ref_id="B",
                )
            )
        )
        .with_panel(
            number(
                "Agents answering",
                f"sum(up{{{SCRAPE_JOBS}}}) / count(up{{{SCRAPE_JOBS}}})",
                "percentunit",
                "The share of GPU hosts whose agent (idle self-stop) can be scraped.",
            )
        )
        .with_panel(
            stacked(
                graph(
                    "Accelerators running by pool",
                    "From the ledger's open intervals.",
                    "none",
                    query("sum by (pool) (parkbrake_running_gpus)", "{{pool}}"),
                )
            )
        )
        .with_panel(
            stacked(
                graph(
                    "Cost per hour by pool",
                    "Billed cost (60 s minimum per start) of closed intervals, as a rate per hour.",
                    "currencyUSD",
                    query(
                        "sum by (pool) (rate(parkbrake_cost_usd_total[$__rate_interval])) * 3600", "{{pool}}"
                    ),
                )
            )
        )
    )


def _fleet_gpu_health(board: dashboard.Dashboard) -> dashboard.Dashboard:
    """Idle share, utilisation, temperature, power, memory and idle time per GPU."""
    return (
        board.with_row(dashboard.Row("GPU health"))
        .with_panel(
            graph(
                "Idle share of each pool",
                f"GPUs at or under {IDLE_RATIO:.0%} busy; the ParkbrakeGpuPoolIdle alert fires above half for 30 minutes.",
                "percentunit",
                query("pool:parkbrake_gpu_idle:ratio", "{{pool}}"),
            ).max(1)
        )
        .with_panel(
            graph(
                "GPU utilisation",
                "Per GPU, from the agent's NVML samples.",
                "percentunit",
                query("parkbrake_gpu_utilization_ratio", "{{instance_id}} GPU {{gpu}}"),
            ).max(1)
        )
        .with_panel(
            graph(
                "GPU temperature",
                "The ParkbrakeGpuTemperatureHigh alert fires above 85 °C for 5 minutes.",
                "celsius",
                query("parkbrake_gpu_temperature_celsius", "{{instance_id}} GPU {{gpu}}"),
            )
        )
        .with_panel(
            graph(
                "GPU power",
                "Board power draw per GPU.",
                "watt",
                query("parkbrake_gpu_power_watts", "{{instance_id}} GPU {{gpu}}"),
            )
        )
        .with_panel(
            graph(
                "GPU memory in use",
                "Per GPU.",
                "bytes",
                query("parkbrake_gpu_memory_used_bytes", "{{instance_id}} GPU {{gpu}}"),
            )
        )
        .with_panel(
            graph(
                "Idle for (hosts about to stop themselves)",
                "How long every GPU of a host has been idle; the agent shuts the host down at --idle-after.",
                "s",
                query("parkbrake_agent_idle_seconds > 0", "{{instance_id}}"),
            )
        )
    )


def _fleet_guardrails(board: dashboard.Dashboard) -> dashboard.Dashboard:
    """Each guardrail's heartbeat, and its actions from CloudWatch."""
    return (
        board.with_row(dashboard.Row("Guardrails"))
        .with_panel(
            graph(
                "Time since each guardrail last succeeded",
                "The sweep runs every few minutes and the budget check every minute; "
                "ParkbrakeGuardrailHeartbeatStale fires past 15 minutes.",
                "s",
                query("time() - parkbrake_guardrail_last_success_timestamp_seconds", "{{guardrail}}"),
            )
        )
        .with_variable(dashboard.DatasourceVariable("cloudwatch").label("CloudWatch").type("cloudwatch"))
        .with_panel(guardrail_actions())
    )


def fleet_dashboard() -> dashboard.Dashboard:
    board = base(
        "parkbrake: fleet",
        "parkbrake-fleet",
        "What is running and what it costs, GPU health and the guardrails. Generated by alerts/dashboards.py.",
    )
    return _fleet_guardrails(_fleet_gpu_health(_fleet_what_runs(board)))


def _tenants_period(board: dashboard.Dashboard) -> dashboard.Dashboard:
    """The period's spend, commitments, remaining budget, runway and burn."""
    tenant = 'tenant=~"$tenant"'
    return (
        board.with_row(dashboard.Row("This budget period"))
        .with_panel(
            graph(
                "Spent, committed, reserved and limit",
                "Spent since the period began; committed: what running hosts will cost up to their caps; "
                "reserved: set aside by admissions for hosts not yet running.",
                "currencyUSD",
                query(f"parkbrake_budget_spent_usd{{{tenant}}}", "{{tenant}} spent"),
                query(f"parkbrake_budget_committed_usd{{{tenant}}}", "{{tenant}} committed"),
                query(f"parkbrake_budget_reserved_usd{{{tenant}}}", "{{tenant}} reserved"),
                query(f"parkbrake_budget_limit_usd{{{tenant}}}", "{{tenant}} limit"),
            )
        )
        .with_panel(
            graph(
                "Budget remaining",
                "Limit − spent − committed; at or under zero new work is refused (ParkbrakeBudgetCommitted).",
                "currencyUSD",
                query(f"parkbrake_budget_remaining_usd{{{tenant}}}", "{{tenant}}"),
            )
        )
        .with_panel(
            graph(
                "Runway",
                "Remaining budget ÷ burn rate; ParkbrakeTenantRunwayLow fires under 4 hours. "
                "A tenant burning nothing has no line (infinite runway).",
                "s",
                query(f"parkbrake_runway_seconds{{{tenant}}} < +Inf", "{{tenant}}"),
            )
        )
        .with_panel(
            stacked(
                graph(
                    "Burn rate",
                    "What each tenant's running hosts cost per hour now.",
                    "currencyUSD",
                    query(f"parkbrake_burn_rate_usd_per_hour{{{tenant}}}", "{{tenant}}"),
                )
            )
        )
    )


def _tenants_usage(board: dashboard.Dashboard) -> dashboard.Dashboard:
    """Accelerators, accelerator-hours and cost by tenant; unpriced hosts; the ledger's health."""
    tenant = 'tenant=~"$tenant"'
    return (
        board.with_row(dashboard.Row("Usage"))
        .with_panel(
            stacked(
                graph(
                    "Accelerators running",
                    "By tenant and pool.",
                    "none",
                    query(
                        f"sum by (tenant, pool) (parkbrake_running_gpus{{{tenant}}})", "{{tenant}} {{pool}}"
                    ),
                )
            )
        )
        .with_panel(
            stacked(
                graph(
                    "Accelerator-hours per hour",
                    "Closed intervals, by tenant and instance type.",
                    "none",
                    query(
                        f"sum by (tenant, instance_type) (rate(parkbrake_gpu_seconds_total{{{tenant}}}[$__rate_interval]))",
                        "{{tenant}} {{instance_type}}",
                    ),
                )
            )
        )
        .with_panel(
            stacked(
                graph(
                    "Cost per hour",
                    "Billed cost of closed intervals (60 s minimum per start), by tenant.",
                    "currencyUSD",
                    query(
                        f"sum by (tenant) (rate(parkbrake_cost_usd_total{{{tenant}}}[$__rate_interval])) * 3600",
                        "{{tenant}}",
                    ),
                )
            )
        )
        .with_panel(
            number(
                "Hosts without a price",
                f"sum(parkbrake_unpriced_hosts{{{tenant}}})",
                "none",
                "Metered in seconds but not costed: burn and runway understate the spend (ParkbrakeUnpricedHosts).",
            )
        )
        .with_panel(
            number(
                "Ledger readable",
                "min(parkbrake_ledger_up)",
                "bool_yes_no",
                "1 when the exporter's last read of the ledger succeeded (ParkbrakeLedgerDown otherwise).",
            )
        )
    )


def tenants_dashboard() -> dashboard.Dashboard:
    board = base(
        "parkbrake: tenants",
        "parkbrake-tenants",
        "Spend, budgets and runway per tenant, from the usage ledger. Generated by alerts/dashboards.py.",
    ).with_variable(
        dashboard.QueryVariable("tenant")
        .label("Tenant")
        .datasource(DATASOURCE)
        .query("label_values(parkbrake_budget_spent_usd, tenant)")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
    )
    return _tenants_usage(_tenants_period(board))


DASHBOARDS: dict[str, Callable[[], dashboard.Dashboard]] = {
    "fleet.json": fleet_dashboard,
    "tenants.json": tenants_dashboard,
}


def rendered(build: Callable[[], dashboard.Dashboard]) -> str:
    """The dashboard's JSON model, byte-stable: sorted keys, two-space indent, a final newline."""
    document: Any = json.loads(json.dumps(build().build(), cls=JSONEncoder))
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Write (or --check) the Grafana dashboards in alerts/dashboards/."
    )
    parser.add_argument("--check", action="store_true", help="Exit 1 when a committed dashboard differs.")
    arguments = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        path = FOLDER / name
        text = rendered(build)
        if arguments.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
            continue
        FOLDER.mkdir(exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(FOLDER.parent.parent)}")
    if stale:
        print(f"out of date: {', '.join(stale)}; run python -m alerts.dashboards", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
