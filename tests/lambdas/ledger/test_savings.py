"""`parkbrake ledger savings`: the GPU-hours and dollars each stop avoided, by the stated
counterfactual (until the host's next start, the period's end or one more cap, whichever is first),
checked against a history computed by hand; each figure cites its decision's id in `parkbrake log`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from click.testing import CliRunner
from ledger_streams import step, who

from cli.main import parkbrake
from guardrails.decisions import Decision
from guardrails.ledger import to_ms
from guardrails.savings import StoppedHost, guardrail_of, saving_of, savings_markdown, totals
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.savings import month_savings
from lambdas.ledger.store import LedgerStore

NOVEMBER = datetime(2036, 11, 1, tzinfo=UTC)
DECEMBER = datetime(2036, 12, 1, tzinfo=UTC)
LATER = datetime(2037, 1, 5, tzinfo=UTC)
CAP = timedelta(minutes=90)


def nov(day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return NOVEMBER + timedelta(days=day - 1, hours=hour, minutes=minute, seconds=second)


def run(store: LedgerStore, host: str, start: datetime, stop: datetime, attribution: object) -> None:
    store.append(
        [
            step(f"{host}-{start:%d%H%M}-run", host, "running", to_ms(start), attribution),  # type: ignore[arg-type]
            step(f"{host}-{start:%d%H%M}-stop", host, "stopped", to_ms(stop), attribution),  # type: ignore[arg-type]
        ],
        source="meter",
        received_at=LATER,
    )


def decide(store: LedgerStore, *decisions: Decision) -> dict[str, int]:
    DecisionLedger.of(store).append(list(decisions), origin="hand-computed")
    return {
        entry.decision.instance_id or entry.decision.kind: entry.id
        for entry in DecisionLedger.of(store).read(since=NOVEMBER - timedelta(days=40))
    }


@pytest.fixture
def history(store: LedgerStore) -> dict[str, int]:
    """November 2036, research, by hand:

    - i-a p4d.24xlarge (8 GPUs, cap 120 min, $32.7726/h): stopped by its deadline schedule at 02:00 on
      the 10th, metered 02:00:30; a person starts it again at 03:00: 59.5 min avoided (next start),
      7.933333 GPU-hours, $32.499495.
    - i-b g5.xlarge (1 GPU, cap 90 min, $1.006/h): the sweep stops it past its cap at 12:00 on the
      20th; never started again: one more cap, 1.5 GPU-hours, $1.509.
    - i-c g5.12xlarge (4 GPUs, cap 240 min, $5.672/h): the budget stops it at 23:00 on the 30th: one
      hour to the month's end, 4 GPU-hours, $5.672.
    - i-d stopped on the 5th, retired by the sweep on the 25th (stopped too long): nothing avoided.
    - i-e stopped by the sweep on 2 December: December's, not November's.
    """
    run(store, "i-a", nov(10), nov(10, 2, 0, 30), who("research", "training", "p4d.24xlarge", 120))
    run(store, "i-a", nov(10, 3), nov(10, 5), who("research", "training", "p4d.24xlarge", 120))
    run(store, "i-b", nov(20, 9), nov(20, 12), who("research", "training", "g5.xlarge", 90))
    run(store, "i-c", nov(30, 20), nov(30, 23), who("research", "inference", "g5.12xlarge", 240))
    run(store, "i-d", nov(4), nov(5), who("research", "training", "g5.xlarge", 90))
    run(store, "i-e", nov(32), nov(32, 4), who("research", "training", "g5.xlarge", 90))
    return decide(
        store,
        Decision("stop", "deadline", "its cap", nov(10, 2), "i-a", "research", {"rule": "past-deadline"}),
        Decision("stop", "reaper", "past its cap", nov(20, 12), "i-b", "research", {"rule": "past-deadline"}),
        Decision(
            "budget-stop",
            "budget",
            "spent",
            nov(30, 23),
            tenant="research",
            details={"instance_ids": ["i-c"]},
        ),
        Decision(
            "stop", "reaper", "stopped too long", nov(25), "i-d", "research", {"rule": "stopped-too-long"}
        ),
        Decision("stop", "reaper", "orphaned", nov(32, 4), "i-e", "research", {"rule": "orphaned"}),
    )


def test_each_stop_avoids_what_the_hand_computed_history_says(
    store: LedgerStore, history: dict[str, int]
) -> None:
    savings = month_savings(store, since=NOVEMBER, until=DECEMBER, tenants=["research"], default_cap=CAP)
    figures = [
        (s.host.decision_id, s.host.instance_id, s.guardrail, s.bound, s.gpu_hours, s.usd) for s in savings
    ]
    assert figures == [
        (history["i-a"], "i-a", "deadline", "next-start", Decimal("7.933333"), Decimal("32.499495")),
        (history["i-b"], "i-b", "cap", "cap", Decimal("1.500000"), Decimal("1.509000")),
        (
            history["budget-stop"],
            "i-c",
            "budget stop",
            "period-end",
            Decimal("4.000000"),
            Decimal("5.672000"),
        ),
    ]
    rows = [(r.pool, r.guardrail, r.stops, r.gpu_hours, r.usd, r.decision_ids) for r in totals(savings)]
    assert rows == [
        ("inference", "budget stop", 1, Decimal("4.000000"), Decimal("5.672000"), (history["budget-stop"],)),
        ("training", "cap", 1, Decimal("1.500000"), Decimal("1.509000"), (history["i-b"],)),
        ("training", "deadline", 1, Decimal("7.933333"), Decimal("32.499495"), (history["i-a"],)),
    ]
    markdown = savings_markdown("2036-11", savings)
    assert f"| research | training | deadline | 1 | 7.933333 | 32.499495 | #{history['i-a']} |" in markdown
    assert "**Avoided: 13.433333 GPU-hours, 39.680495 USD**" in markdown


def test_the_cli_prints_each_figure_beside_its_decision_in_parkbrake_log(
    ledger_url: str, history: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    monkeypatch.setenv("COLUMNS", "200")
    document = json.loads(
        CliRunner().invoke(parkbrake, ["ledger", "savings", "--month", "2036-11", "-o", "json"]).stdout
    )
    assert (document["usd"], document["gpu_hours"]) == ("39.680495", "13.433333")
    assert [stop["decision_id"] for stop in document["stops"]] == [
        history["i-a"],
        history["i-b"],
        history["budget-stop"],
    ]
    text = CliRunner().invoke(parkbrake, ["ledger", "savings", "--month", "2036-11", "--tenant", "research"])
    assert text.exit_code == 0, text.output
    assert f"#{history['i-a']} stop by deadline at 2036-11-10 02:00 UTC: i-a" in text.stdout
    log = CliRunner().invoke(parkbrake, ["log", "--tenant", "research", "--kind", "stop"])
    assert f"#{history['i-a']}" in log.stdout
    bad = CliRunner().invoke(parkbrake, ["ledger", "savings", "--month", "11/2036"])
    assert bad.exit_code == 2
    assert "--month" in bad.output


def test_the_markdown_invoice_carries_the_savings_as_a_section(
    ledger_url: str, history: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    invoice = ["ledger", "report", "--tenant", "research", "--month", "2036-11", "--format", "markdown"]
    result = CliRunner().invoke(parkbrake, [*invoice, "--with-savings"])
    assert result.exit_code == 0, result.output
    plain = CliRunner().invoke(parkbrake, invoice).stdout
    assert result.stdout.startswith(plain.rstrip("\n"))  # the invoice unchanged, the section after it
    section = result.stdout[len(plain) :]
    assert section.lstrip("\n").startswith("### What the guardrails saved, 2036-11")
    assert f"| research | training | deadline | 1 | 7.933333 | 32.499495 | #{history['i-a']} |" in section
    assert "| product |" not in section  # the report's tenants only
    wrong = CliRunner().invoke(parkbrake, ["ledger", "report", "--month", "2036-11", "--with-savings"])
    assert wrong.exit_code == 2
    assert "--with-savings: a month's markdown invoice only" in wrong.output


def host(**overrides: object) -> StoppedHost:
    fields: dict[str, object] = {
        "decision_id": 1, "decided_at": NOVEMBER, "kind": "stop", "actor": "reaper", "rule": "orphaned",
        "instance_id": "i-1", "tenant": "t", "pool": "p", "instance_type": "g5.xlarge", "accelerators": 2,
        "cap_ms": 3_600_000, "stopped_ms": 0, "next_start_ms": None, "usd_per_hour": Decimal(2),
    }  # fmt: skip
    return StoppedHost(**(fields | overrides))  # type: ignore[arg-type]


def test_the_counterfactual_takes_the_first_bound_and_never_runs_backwards() -> None:
    assert saving_of(host(next_start_ms=600_000), period_end_ms=10**9).avoided_ms == 600_000
    assert saving_of(host(), period_end_ms=1_200_000).bound == "period-end"
    assert saving_of(host(), period_end_ms=10**9).bound == "cap"
    assert saving_of(host(next_start_ms=0), period_end_ms=10**9).avoided_ms == 0  # started again at once
    assert saving_of(host(usd_per_hour=None), period_end_ms=10**9).usd == 0  # unpriced: no dollars claimed
    assert guardrail_of("stop", "agent", None) == "idle self-stop"
    assert guardrail_of("stop", "reaper", "untagged-accelerator") == "sweep"
