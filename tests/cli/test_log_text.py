"""``parkbrake log``'s text, pure: docs/owners.md shows the owner's day read back exactly as the
command prints it, the warning and the extension as the doc records them, then the stop."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cli.log import as_text
from guardrails import tags
from guardrails.decisions import Decision, decision_from_dict, sweep_decisions
from guardrails.hosts import Host
from guardrails.rules.base import SweepPolicy
from guardrails.sweep import judge
from lambdas.ledger.decisions import LoggedDecision

DOCS = Path(__file__).resolve().parents[2] / "docs" / "owners.md"
HOST = "i-0a1b2c3d4e5f67890"


def recorded_in_the_docs() -> list[Decision]:
    """The warning's and the extension's decisions, as docs/owners.md shows them."""
    lines = re.findall(r"^\{\"at\".*\}$", DOCS.read_text(), flags=re.MULTILINE)
    return [decision_from_dict(json.loads(line)) for line in lines]


def the_stop(extension: Decision) -> list[Decision]:
    """What the sweep decides about the extended host just after its new deadline."""
    until = str(extension.details["deadline"])
    host = Host(
        instance_id=HOST,
        instance_type="p4d.24xlarge",
        state="running",
        launch_time=datetime(2026, 3, 2, 9, 0, tzinfo=UTC),
        tags={
            tags.MANAGED: "true",
            tags.STACK: "dev",
            tags.POOL: "training",
            tags.TENANT: "research",
            tags.MAX_RUNTIME: "3h",
            tags.REVISION: "4f2c9e1",
            tags.OWNER: "ana@example.com",
            tags.EXEMPT_UNTIL: until,
            tags.EXTENDED_BY: extension.actor,
        },
        region="us-east-1",
    )
    now = datetime.fromisoformat(until.replace("Z", "+00:00")) + timedelta(minutes=5)
    policy = SweepPolicy(
        stack="dev",
        default_cap=timedelta(minutes=90),
        max_exemption=timedelta(hours=24),
        reap_untagged=False,
        pool_caps={},
        max_runtime_ceiling=timedelta(hours=24),
    )
    verdict = judge(host, policy, now)
    assert verdict.action == "stop"
    return sweep_decisions(
        [verdict], actor="reaper", now=now, acted={HOST: "stop"}, failed={}, full_sweep=True
    )


def test_the_docs_show_the_owners_day_as_parkbrake_log_prints_it() -> None:
    warning, extension = recorded_in_the_docs()
    day = [warning, extension, *the_stop(extension)]
    shown = as_text([LoggedDecision(n, f"k{n}", decision) for n, decision in enumerate(day, 1)], limit=200)
    assert shown in DOCS.read_text(), f"docs/owners.md should show, verbatim:\n{shown}"
    assert all(len(line) <= 80 for line in shown.splitlines())
    assert [decision.kind for decision in day] == ["warn", "extend", "stop"]
