"""The Grafana dashboards: committed JSON equal to the generator's, valid PromQL, and no panel or alert
querying a metric that parkbrake does not export.

The exported names are collected from the code that exports them — the agent's registry, the ledger
exporter's collector, the guardrails' heartbeat metrics — never from a hand-written list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from guardrail_fleet import emitted_metrics
from ruamel.yaml import YAML

from alerts.dashboards import DASHBOARDS, FOLDER, rendered
from guardrails import names
from lambdas.aws import heartbeat
from tests.alerts.promtool import ROOT, run_promtool
from tests.exported_metrics import fleet_metrics

RULES = ROOT / "alerts" / "parkbrake.rules.yml"
# Prometheus's own series, which every scrape job has: the only names not exported by parkbrake.
PROMETHEUS_SYNTHETIC = {"up"}
CLOUDWATCH = {"type": "cloudwatch", "uid": "${cloudwatch}"}

KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
}
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
MATCHERS = re.compile(r"\{[^}]*\}")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
RANGE = re.compile(r"\[[^\]]*\]")
IDENTIFIER = re.compile(r"(?<![\w.$])([a-zA-Z_:][\w:]*)(\s*\()?")


def recording_rules() -> set[str]:
    rules = YAML(typ="safe").load(RULES.read_text())
    return {rule["record"] for group in rules["groups"] for rule in group["rules"] if "record" in rule}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions, keywords or labels."""
    bare = RANGE.sub("", GROUPING.sub("", MATCHERS.sub("{}", STRING.sub('""', expr))))
    return {
        name
        for name, call in IDENTIFIER.findall(bare)
        if not call and name not in KEYWORDS and not re.fullmatch(r"(?i)inf|nan", name)
    }


def prometheus_panels(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        panel for panel in document["panels"] if panel["type"] != "row" and panel["datasource"] != CLOUDWATCH
    ]


def dashboard_queries(document: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, expression) for every Prometheus panel target and every query variable."""
    for panel in prometheus_panels(document):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in document["templating"]["list"]:
        if variable["type"] == "query":
            # label_values(METRIC, label) is Grafana's, not PromQL: check the metric it reads.
            found = re.fullmatch(r"label_values\((\w+),\s*\w+\)", variable["query"])
            assert found, f"variable {variable['name']}: {variable['query']}"
            yield f"variable {variable['name']!r}", found[1]


def alert_queries() -> Iterator[tuple[str, str]]:
    for group in YAML(typ="safe").load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            yield f"rule {rule.get('alert') or rule.get('record')}", rule["expr"]


def committed(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((FOLDER / name).read_text())
    return document


def test_the_name_extraction_sees_metrics_and_skips_the_rest() -> None:
    expr = (
        'sum by (pool) (rate(parkbrake_cost_usd_total{tenant=~"$tenant",pool!="x"}[$__rate_interval])) * 3600'
    )
    assert metric_names(expr) == {"parkbrake_cost_usd_total"}
    assert metric_names('time() - max by (g) (a_b{g=~"r|b"}) > 900 or up == 0') == {"a_b", "up"}
    assert metric_names("pool:parkbrake_gpu_idle:ratio > 0.5 and x < +Inf") == {
        "pool:parkbrake_gpu_idle:ratio",
        "x",
    }


def test_the_exported_names_come_from_the_code() -> None:
    exported = fleet_metrics()
    assert {"parkbrake_ledger_up", "parkbrake_gpu_seconds_total", "parkbrake_runway_seconds"} <= exported
    assert {"parkbrake_gpu_temperature_celsius", "parkbrake_agent_sample_errors_total"} <= exported
    assert "parkbrake_guardrail_last_success_timestamp_seconds" in exported
    # The Lambdas' counters go to CloudWatch (GuardrailActions), not to a registry nobody scrapes.
    assert "parkbrake_guardrail_actions_total" not in exported
    assert "parkbrake_gpu_seconds" not in exported  # a counter is scraped as _total


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_the_committed_dashboard_is_what_the_generator_writes(name: str) -> None:
    assert (FOLDER / name).read_text() == rendered(DASHBOARDS[name]), (
        f"alerts/dashboards/{name} is out of date: run python -m alerts.dashboards"
    )


def test_every_dashboard_and_alert_queries_only_fleet_metrics() -> None:
    known = fleet_metrics() | recording_rules() | PROMETHEUS_SYNTHETIC
    queries = [*alert_queries()]
    for name in DASHBOARDS:
        queries += [(f"{name} {where}", expr) for where, expr in dashboard_queries(committed(name))]
    unknown = {f"{where}: {metric}" for where, expr in queries for metric in metric_names(expr) - known}
    assert not unknown, sorted(unknown)
    assert all(metric_names(expr) for _, expr in queries)  # every query reads something


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_panel_reads_the_chosen_prometheus_with_distinct_queries(name: str) -> None:
    document = committed(name)
    assert document["uid"] == f"parkbrake-{name.removesuffix('.json')}"
    assert any(variable["name"] == "datasource" for variable in document["templating"]["list"])
    for panel in prometheus_panels(document):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        references = [target["refId"] for target in panel["targets"]]
        assert references, panel["title"]
        assert all(references), panel["title"]
        assert len(set(references)) == len(references), panel["title"]


def test_the_guardrail_actions_panel_reads_what_the_lambdas_write(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    capsys.readouterr()
    heartbeat.count_action(heartbeat.REAPER, "stop", "max-runtime")  # what a sweep's stop writes
    [emitted] = emitted_metrics(capsys.readouterr().out)  # checks the namespace too
    metric, dimensions = emitted["name"], set(emitted["dimensions"])

    document = committed("fleet.json")
    [panel] = [panel for panel in document["panels"] if panel.get("datasource") == CLOUDWATCH]
    assert panel["title"] == "Guardrail actions per hour"
    assert any(
        variable["name"] == "cloudwatch" and variable["query"] == "cloudwatch"
        for variable in document["templating"]["list"]
    )
    [target] = panel["targets"]
    assert (target["queryMode"], target["metricQueryType"], target["metricEditorMode"]) == ("Metrics", 1, 1)
    # Metrics Insights' SCHEMA must name exactly the metric's dimensions, or it matches nothing.
    found = re.fullmatch(
        r'SELECT SUM\((\w+)\) FROM SCHEMA\("([^"]+)", ([\w, ]+)\) GROUP BY (\w+), (\w+) ORDER BY SUM\(\) DESC',
        target["sqlExpression"],
    )
    assert found, target["sqlExpression"]
    assert found[1] == metric
    assert found[2] == names.heartbeat_namespace()
    assert set(found[3].split(", ")) == dimensions
    assert {found[4], found[5]} == {"Guardrail", "Action"} <= dimensions


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule, with Grafana's variables given values."""
    substitutions = {"$__rate_interval": "5m", "$__range": "1h", "$tenant": ".*"}
    rules = []
    for name in DASHBOARDS:
        for index, (_, expr) in enumerate(dashboard_queries(committed(name))):
            promql = expr
            for variable, value in substitutions.items():
                promql = promql.replace(variable, value)
            rules.append({"record": f"dashboard:{name.removesuffix('.json')}:{index}", "expr": promql})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
