"""The Prometheus alerting rules in alerts/: valid, and each rule proven by promtool to fire and to stay quiet."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from tests.alerts.promtool import ROOT, run_promtool

RULES = ROOT / "alerts" / "parkbrake.rules.yml"
RULE_TESTS = sorted((ROOT / "alerts" / "tests").glob("*.test.yml"))


def load(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text())


def test_the_rules_are_valid() -> None:
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rule_unit_tests_pass() -> None:
    result = run_promtool("test", "rules", *map(str, RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(RULE_TESTS)


def test_a_wrong_expectation_fails_the_unit_tests(tmp_path: Path) -> None:
    """The unit tests can fail: the same cases, with one expected label changed, do."""
    broken = tmp_path / "broken.test.yml"
    text = RULE_TESTS[0].read_text().replace("../parkbrake.rules.yml", str(RULES))
    broken.write_text(text.replace("severity: warning", "severity: page", 1))
    assert run_promtool("test", "rules", str(broken)).returncode != 0


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    alerts = {rule["alert"] for group in load(RULES)["groups"] for rule in group["rules"] if "alert" in rule}
    cases = [
        case
        for path in RULE_TESTS
        for test in load(path)["tests"]
        for case in test.get("alert_rule_test", [])
    ]
    firing = {case["alertname"] for case in cases if case.get("exp_alerts")}
    quiet = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    assert alerts
    assert alerts <= firing, f"alerts never shown firing: {sorted(alerts - firing)}"
    assert alerts <= quiet, f"alerts never shown quiet: {sorted(alerts - quiet)}"


def test_the_example_prometheus_configuration_is_valid_and_names_the_jobs_the_rules_use() -> None:
    example = ROOT / "alerts" / "prometheus.example.yml"
    result = run_promtool("check", "config", str(example))
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = {job["job_name"] for job in load(example)["scrape_configs"]}
    assert jobs == {"parkbrake-agent", "parkbrake-exporter"}
    assert all(f'job="{job}"' in RULES.read_text() for job in jobs)


ALERTS_DOC = ROOT / "docs" / "alerts.md"


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings: lower case, punctuation dropped, spaces to '-'."""
    anchors = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_every_alert_has_a_runbook_url_whose_section_exists() -> None:
    alerts = [rule for group in load(RULES)["groups"] for rule in group["rules"] if "alert" in rule]
    anchors = heading_anchors(ALERTS_DOC.read_text())
    missing = [rule["alert"] for rule in alerts if "runbook_url" not in rule["annotations"]]
    assert not missing, f"alerts without a runbook_url: {missing}"
    for rule in alerts:
        document, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert document == "docs/alerts.md", rule["alert"]
        assert anchor == rule["alert"].lower()
        assert anchor in anchors, f"{rule['alert']}: docs/alerts.md has no section #{anchor}"


def test_each_runbook_section_says_what_to_check_and_what_to_run() -> None:
    sections = re.split(r"^### ", ALERTS_DOC.read_text().split("## Runbooks", 1)[1], flags=re.MULTILINE)[1:]
    alerts = {rule["alert"] for group in load(RULES)["groups"] for rule in group["rules"] if "alert" in rule}
    titles = {section.splitlines()[0].strip() for section in sections}
    assert titles == alerts
    for section in sections:
        body = section.split("\n## ", 1)[0]
        assert "Check:" in body, section.splitlines()[0]
        assert "Run:" in body, section.splitlines()[0]
        assert "`" in body.split("Run:", 1)[1], f"{section.splitlines()[0]}: Run: names no command"


def test_the_anchor_check_can_fail() -> None:
    assert "parkbrakegpupoolidle" in heading_anchors("### ParkbrakeGpuPoolIdle\n")
    assert "parkbrakegpupoolidle" not in heading_anchors("### ParkbrakeGpuPoolIdling\n")
