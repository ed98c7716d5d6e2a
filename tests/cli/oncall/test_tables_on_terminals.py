"""Every table-printing command, rendered on a pseudo-terminal of 60, 80 and 120 columns against the
demo fleet (moto's server, PostgreSQL for the ledger), shows every id, name and timestamp whole:
never cut with an ellipsis, never folded over lines; a value may only be missing when its column is
named on the "hidden at this width" line. Which commands print tables is found in the source
(tests/cli/table_printers.py), so a new one fails here until it is rendered too."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from guardrails.durations import format_duration
from tests.cli.oncall.demo_terminal import (
    STACK,
    Demo,
    document,
    drop_ledger,
    on_terminal,
    run,
    seed_demo,
    with_ledger,
)
from tests.cli.oncall.ops_fleet import project_copy
from tests.cli.table_printers import table_printing_commands

WIDTHS = (60, 80, 120)
INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
Expected = list[tuple[str, set[str]]]  # (column header, the texts any one of which must appear whole)


def _at(text: str, layout: str) -> str:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).strftime(layout)


def _near_duration(seconds: float | None, slack: int = 600) -> set[str]:
    """The runway as shown, allowing for the seconds between the JSON read and the terminal's."""
    if seconds is None:
        return {"∞", "unbounded"}
    return {
        format_duration(timedelta(seconds=max(0, int(seconds) + delta))) for delta in range(-slack, slack + 1)
    }


def _status(doc: Any) -> Expected:
    expected: Expected = []
    for host in doc["hosts"]:
        expected += [("instance", {host["instance_id"]}), ("tenant", {host["tenant"]})]
        expected += [("deadline UTC", {_at(host["deadline"], "%m-%d %H:%M")})] if host["deadline"] else []
        expected += [("type", {host["instance_type"]}), ("stack/pool", {f"{host['stack']}/{host['pool']}"})]
    expected += [("Auto Scaling group", {group["name"]}) for group in doc["groups"]]
    for service in doc["services"]:
        expected += [("service", {service["name"]}), ("PRIMARY runs", {service["task_definition"]})]
    expected += [("stack", {stack["stack"]}) for stack in doc["stacks"]]
    for tenant in doc["tenants"]:
        expected += [
            ("tenant", {tenant["tenant"]}),
            ("runway", _near_duration(tenant["ledger"]["runway_seconds"])),
        ]
    return expected


def _reap(doc: Any) -> Expected:
    expected: Expected = []
    for host in doc["hosts"]:
        expected += [("instance", {host["instance_id"]}), ("deadline", {host["deadline"]})]
        expected += [
            ("tenant", {host["tenant"]}),
            ("pool", {host["pool"]}),
            ("type", {host["instance_type"]}),
        ]
        expected += [("why", {instant}) for instant in INSTANT.findall(host["reason"])]
    return expected


def _schedules(doc: Any) -> Expected:
    return [
        pair
        for schedule in doc["schedules"]
        for pair in [("name", {schedule["name"]}), ("next run UTC", {_at(schedule["next_run"], "%Y-%m-%d %H:%M")}),
                     ("timezone", {schedule["timezone"]})]
    ]  # fmt: skip


def _emergency(doc: Any) -> Expected:
    return [("name", {action["name"]}) for action in doc["actions"]] + [
        ("kind", {action["kind"]}) for action in doc["actions"]
    ]


def _park_config(doc: Any) -> Expected:
    expected: Expected = [("resource", {change["name"]}) for change in doc["changes"]]
    expected += [("input", {change["input"]}) for change in doc["changes"]]
    expected += [("item", {item["name"]}) for item in doc["cost"]["items"]]
    return expected


def _verify(doc: Any) -> Expected:
    return [("check", {check["name"]}) for check in doc["checks"]] + [
        ("subject", {check["subject"]}) for check in doc["checks"]
    ]


def _runway(doc: Any) -> Expected:
    expected: Expected = []
    for tenant in doc:
        expected += [("tenant", {tenant["tenant"]}), ("runway", _near_duration(tenant["runway_seconds"]))]
        expected += [
            ("budget", {f"{Decimal(tenant['limit_usd']):,.2f} /{tenant['period']}"})
        ]  # a decimal string
    return expected


def _report(doc: Any) -> Expected:
    expected: Expected = []
    for tenant in doc["tenants"]:
        for row in tenant["breakdown"]:
            expected += [("tenant", {tenant["tenant"]}), ("pool", {row["pool"]})]
            expected += [("instance type", {row["instance_type"]})]
    return expected


def _savings(doc: Any) -> Expected:
    expected: Expected = []
    for row in doc["totals"]:
        expected += [("tenant", {row["tenant"]}), ("guardrail", {row["guardrail"]})]
        expected += [("decisions", {f"#{number}" for number in row["decision_ids"]})]
    return expected


@dataclass(frozen=True)
class Rendering:
    command: str  # as the registry names it (tests/cli/table_printers.py)
    arguments: tuple[str, ...]
    expected: Callable[[Any], Expected]
    exit_status: int = 0


RENDERINGS = (
    Rendering("status", ("status", "--stack", STACK), _status),
    Rendering("reap", ("reap", "--stack", STACK, "--dry-run"), _reap),
    Rendering("schedule list", ("schedule", "list", "--stack", STACK), _schedules),
    Rendering("park", ("park", "--now", "--dry-run", "--stack", STACK), _emergency),
    Rendering("park", ("park", "--stack", STACK, "--dry-run"), _park_config),
    Rendering("unpark", ("unpark", "--now", "--dry-run", "--stack", STACK), _emergency),
    # moto starts no ECS task: verify's checks fail, which is what its table is for (exit 1).
    Rendering("verify", ("verify", "inference", "--stack", STACK, "--revision", "0123abcd"), _verify, 1),
    Rendering("ledger runway", ("ledger", "runway"), _runway),
    Rendering("ledger report", ("ledger", "report"), _report),
    Rendering("ledger savings", ("ledger", "savings", "--month", f"{datetime.now(UTC):%Y-%m}"), _savings),
)
# Table-printing commands rendered by another: their table is verify's own (print_checks), printed
# after a real rollout, which plain moto cannot carry (docs/deploy.md; tests/cli/oncall/test_deploy.py).
RENDERED_BY_VERIFY = {"deploy", "rollback"}


@pytest.fixture(scope="module")
def demo(moto_server: str, database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    tmp = tmp_path_factory.mktemp("demo")
    seeded = seed_demo(moto_server, database_url, project_copy(tmp))
    list(with_ledger(seeded, tmp))
    yield seeded
    drop_ledger(seeded, database_url)


def hidden_columns(shown: str) -> set[str]:
    """Every header the "hidden at this width" lines name (a line may wrap on a narrow terminal)."""
    flat = " ".join(shown.split())
    return {
        header.strip()
        for listed in re.findall(r"hidden at this width: (.*?); --wide or --output json has all", flat)
        for header in listed.split(", ")
    }


def test_every_table_printing_command_is_rendered_here() -> None:
    rendered = {rendering.command for rendering in RENDERINGS}
    assert table_printing_commands() == rendered | RENDERED_BY_VERIFY


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("rendering", RENDERINGS, ids=lambda rendering: " ".join(rendering.arguments[:3]))
def test_ids_names_and_timestamps_appear_whole(demo: Demo, rendering: Rendering, width: int) -> None:
    expected = rendering.expected(document(demo, *rendering.arguments))
    assert expected, "the demo gives this command something to show"
    status, shown = on_terminal(demo, width, *rendering.arguments)
    assert status == rendering.exit_status, shown
    assert "…" not in shown
    hidden = hidden_columns(shown)
    missing = [
        (column, sorted(texts)[:3])
        for column, texts in expected
        if column not in hidden and not texts & _words(shown, texts)
    ]
    assert not missing, f"not shown whole at {width} columns: {missing}\n{shown}"
    if width == 120:
        assert len(hidden) <= len(hidden_columns(on_terminal(demo, 60, *rendering.arguments)[1]))


def _words(shown: str, texts: set[str]) -> set[str]:
    """Those of ``texts`` that appear in ``shown`` as they are (not split over lines)."""
    return {text for text in texts if text in shown}


def test_wide_shows_every_column_at_60_columns(demo: Demo) -> None:
    _, narrow = on_terminal(demo, 60, "status", "--stack", STACK)
    _, wide = on_terminal(demo, 60, "status", "--stack", STACK, "--wide")
    assert "hidden at this width" in narrow
    assert "hidden at this width" not in wide
    header = next(line for line in wide.splitlines() if line.startswith("instance "))
    assert header.split() == ["instance", "state", "left", "tenant", "deadline", "UTC", "stack/pool", "$/h",
                              "type", "GPUs", "age", "so", "far", "$"]  # fmt: skip


def test_the_ledger_steps_answer_first(demo: Demo) -> None:
    """The demo's ledger was filled through the CLI; ingesting the same file again is one summary."""
    again = run(demo, "ledger", "ingest", str(demo.project.parent / "events.jsonl"))
    assert again.returncode == 0, again.stderr
    first, second = again.stdout.splitlines()[:2]
    assert re.fullmatch(r"read (\d+) events: \1 duplicate", first)
    assert second.strip().endswith("duplicate: already in the ledger")


@pytest.mark.parametrize("width", WIDTHS)
def test_after_park_now_status_shows_every_park_record_whole(demo: Demo, width: int) -> None:
    """Last in this module: it parks the demo (and unparks it again)."""
    parked = run(demo, "park", "--now", "--yes", "--stack", STACK)
    assert parked.returncode == 0, parked.stdout + parked.stderr
    try:
        doc = document(demo, "status", "--stack", STACK)
        records = [item["park_record"] for item in [*doc["groups"], *doc["services"]] if item["park_record"]]
        assert len(records) == len(doc["groups"]) + len(doc["services"])
        status, shown = on_terminal(demo, width, "status", "--stack", STACK)
        assert status == 0, shown
        for record in records:
            assert record["at"] in shown  # the instant whole: it used to fold over three lines
            assert record["by"].rsplit(":", 1)[-1] in shown
        desired = {service["name"]: service["desired"] for service in doc["services"]}
        assert set(desired.values()) == {0}
        assert "desired/running" in shown  # the services' zeros are on screen, not hidden
    finally:
        assert run(demo, "unpark", "--now", "--yes", "--stack", STACK).returncode == 0
