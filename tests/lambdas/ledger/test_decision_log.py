"""The decision log in the ledger: appended once per key, read back by host, tenant, time and kind,
never rewritten, and fed by the budget's claims in the claim's own transaction."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import psycopg
import pytest
from ledger_streams import T0, at
from psycopg.conninfo import make_conninfo

from guardrails.decisions import Decision, UnknownDecisionKind
from guardrails.runway import BudgetDecision
from lambdas.aws.decision_log import RECORD_ERROR, DecisionLog
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.schema import migrations
from lambdas.ledger.store import LedgerStore


def stop(instance_id: str = "i-1", minutes: float = 0, *, tenant: str = "research") -> Decision:
    return Decision(
        "stop",
        "reaper",
        "past its 8h cap (pool)",
        at(minutes),
        instance_id,
        tenant,
        {"rule": "past-deadline"},
    )


def skip(instance_id: str = "i-2", minutes: float = 0, *, tenant: str = "vision") -> Decision:
    return Decision("skip", "reaper", "within its 8h cap (pool): due in 2h", at(minutes), instance_id, tenant)


@pytest.fixture
def decisions(store: LedgerStore) -> DecisionLedger:
    return DecisionLedger.of(store)


def test_decisions_are_read_back_with_actor_reason_and_details(decisions: DecisionLedger) -> None:
    outcomes = decisions.append([stop(), skip()], origin="req-1")
    assert sorted(outcomes.values()) == ["appended", "appended"]
    (logged,) = decisions.read(instance_id="i-1")
    assert logged.key == "req-1:verdict:i-1"
    assert logged.decision == stop()


def test_a_retried_invocation_appends_nothing_twice(decisions: DecisionLedger) -> None:
    decisions.append([stop(), skip()], origin="req-1")
    # The retry judges again later: its reasons' times differ, its keys do not.
    retried = [
        stop(minutes=1),
        Decision("skip", "reaper", "within its cap: due in 1h59m", at(1), "i-2", "vision"),
    ]
    assert set(decisions.append(retried, origin="req-1").values()) == {"duplicate"}
    assert [logged.decision.at for logged in decisions.read()] == [at(0), at(0)]
    assert set(decisions.append([stop()], origin="req-2").values()) == {"appended"}
    assert len(decisions.read(instance_id="i-1")) == 2


def test_the_log_filters_by_host_tenant_time_and_kind(decisions: DecisionLedger) -> None:
    decisions.append([stop("i-1", 0), skip("i-2", 5), stop("i-3", 10, tenant="vision")], origin="sweep")
    assert [d.decision.instance_id for d in decisions.read(tenant="vision")] == ["i-2", "i-3"]
    assert [d.decision.instance_id for d in decisions.read(since=at(5))] == ["i-2", "i-3"]
    assert [d.decision.instance_id for d in decisions.read(kinds=["stop"])] == ["i-1", "i-3"]
    assert [d.decision.instance_id for d in decisions.read(tenant="vision", kinds=["stop"])] == ["i-3"]
    # The newest `limit`, oldest first.
    assert [d.decision.instance_id for d in decisions.read(limit=2)] == ["i-2", "i-3"]
    assert decisions.read(instance_id="i-9") == []


def test_a_decision_needs_a_known_kind_an_actor_and_a_reason() -> None:
    with pytest.raises(UnknownDecisionKind, match="'stopped' is not one of"):
        Decision("stopped", "reaper", "x", T0)
    with pytest.raises(ValueError, match="needs an actor and a reason"):
        Decision("stop", "reaper", "  ", T0)


def test_budget_claims_are_decisions_in_the_claims_transaction(
    store: LedgerStore, decisions: DecisionLedger
) -> None:
    notify = BudgetDecision("notify", "research", "80% of the month's $100.00 spent", Decimal("0.8"), "k-80")
    with store.claim_once([notify], now=T0, period_start=T0) as claimed:
        assert claimed == [notify]
    failed = BudgetDecision("notify", "research", "90% of the month's $100.00 spent", Decimal("0.9"), "k-90")
    with pytest.raises(RuntimeError), store.claim_once([failed], now=T0, period_start=T0):
        raise RuntimeError("SNS is down")  # the action failed: neither the claim nor its decision stays
    (logged,) = decisions.read(tenant="research")
    assert logged.decision.kind == "budget-notify"
    assert logged.decision.actor == "budget"
    assert logged.decision.reason == "80% of the month's $100.00 spent"
    assert logged.decision.details["threshold"] == 0.8


def test_actions_recorded_before_the_decision_log_become_decisions(empty_database_url: str) -> None:
    store = LedgerStore.connect(empty_database_url)
    before = [migration for migration in migrations() if migration.version < 5]
    store.migrate(before, functions=())  # the function files are written for the latest schema
    store.record_action(
        BudgetDecision("stop", "research", "the month's budget is spent", None, None),
        now=T0,
        period_start=T0,
        instance_ids=["i-1", "i-2"],
    )
    assert "0005_decisions" in store.migrate()
    (logged,) = DecisionLedger.of(store).read()
    store.close()
    assert (logged.decision.kind, logged.decision.tenant) == ("budget-stop", "research")
    assert logged.decision.details["instance_ids"] == ["i-1", "i-2"]


@pytest.fixture
def app_url(ledger_url: str) -> Iterator[str]:
    name = f"parkbrake_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ledger_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN IN ROLE parkbrake_app")
    yield make_conninfo(ledger_url, user=name)
    with psycopg.connect(ledger_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,))
        admin.execute(f"DROP OWNED BY {name}")
        admin.execute(f"DROP ROLE {name}")


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE decisions SET reason = 'nobody extended it'",
        "UPDATE decisions SET actor = 'someone else'",
        "DELETE FROM decisions",
        "TRUNCATE decisions",
        "INSERT INTO decisions (decision_key, at, kind, actor, reason) "
        "VALUES ('forged', now(), 'extend', 'arn:aws:iam::1:user/x', 'forged')",
        "SELECT ledger_decide_budget_action()",
    ],
)
def test_the_app_role_cannot_rewrite_the_decision_log(ledger_url: str, app_url: str, statement: str) -> None:
    app = LedgerStore.connect(app_url)
    DecisionLedger.of(app).append([stop()], origin="req-1")  # the app role appends through the function
    app.close()
    with psycopg.connect(app_url, autocommit=True) as connection:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            connection.execute(statement)
        assert connection.execute("SELECT count(*), min(reason) FROM decisions").fetchone() == (
            1,
            "past its 8h cap (pool)",
        )


def test_not_even_the_owner_rewrites_decisions_or_budget_actions(store: LedgerStore, ledger_url: str) -> None:
    DecisionLedger.of(store).append([stop()], origin="req-1")
    store.record_action(BudgetDecision("deny", "research", "spent", None, None), now=T0, period_start=T0)
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        for statement in ("UPDATE decisions SET reason = 'x'", "DELETE FROM decisions", "TRUNCATE decisions",
                          "UPDATE guardrail_actions SET reason = 'x'", "DELETE FROM guardrail_actions"):  # fmt: skip
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                owner.execute(statement)
        assert owner.execute("SELECT count(*) FROM decisions").fetchone() == (2,)


def test_a_ledger_that_is_down_is_reported_and_the_log_line_still_goes_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = LedgerStore.connect("postgresql://parkbrake@127.0.0.1:1/ledger?connect_timeout=1")
    sink = DecisionLog(guardrail="reaper", origin="req-1", ledger=lambda: DecisionLedger.of(down))
    with caplog.at_level(logging.INFO, logger="lambdas.decisions"):
        errors = sink.record([stop()])
    assert errors[0]["action"] == RECORD_ERROR
    assert "cannot use the ledger database" in errors[0]["error"]
    (line,) = [record for record in caplog.records if record.levelno == logging.INFO]
    assert line.decision["kind"] == "stop"  # type: ignore[attr-defined]
    assert line.decision["key"] == "req-1:verdict:i-1"  # type: ignore[attr-defined]
    assert any(record.levelno == logging.ERROR for record in caplog.records)


def decided_long_ago(
    ledger_url: str, keys: list[str], *, days: int, recorded_days: int | None = None
) -> None:
    """Decisions made (and, unless told otherwise, recorded) ``days`` ago, written as the owner."""
    now = datetime.now(UTC)
    recorded = now - timedelta(days=days if recorded_days is None else recorded_days)
    with psycopg.connect(ledger_url, autocommit=True) as owner:
        for key in keys:
            owner.execute(
                "INSERT INTO decisions (decision_key, at, kind, actor, instance_id, reason, recorded_at) "
                "VALUES (%s, %s, 'stop', 'reaper', 'i-1', 'past its cap', %s)",
                (key, now - timedelta(days=days), recorded),
            )


def remaining_keys(ledger_url: str) -> list[str]:
    with psycopg.connect(ledger_url) as owner:
        return [key for (key,) in owner.execute("SELECT decision_key FROM decisions ORDER BY decision_key")]


def test_decisions_past_the_retention_are_pruned_in_batches_and_recent_ones_kept(
    ledger_url: str, app_url: str
) -> None:
    decided_long_ago(ledger_url, [f"old-{n}" for n in range(7)], days=500)
    decided_long_ago(ledger_url, ["edge-kept"], days=399)
    decided_long_ago(ledger_url, ["recent"], days=10)
    decided_long_ago(ledger_url, ["backfilled"], days=500, recorded_days=1)  # an old event ingested now
    app = LedgerStore.connect(app_url)  # the reconciler's role
    try:
        ledger = DecisionLedger.of(app)
        assert ledger.prune(timedelta(days=400), batch_size=3, batches=1) == 3  # one bounded batch per call
        assert ledger.prune(timedelta(days=400), batch_size=3) == 4  # 3, then a short batch of 1: done
        assert ledger.prune(timedelta(days=400), batch_size=3) == 0
    finally:
        app.close()
    assert remaining_keys(ledger_url) == ["backfilled", "edge-kept", "recent"]


def test_a_retention_under_thirteen_months_is_refused_by_the_database(ledger_url: str, app_url: str) -> None:
    decided_long_ago(ledger_url, ["old"], days=200)
    app = LedgerStore.connect(app_url)
    try:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="13-month floor"):
            DecisionLedger.of(app).prune(timedelta(days=30))
    finally:
        app.close()
    assert remaining_keys(ledger_url) == ["old"]


def test_outside_the_pruning_nobody_deletes_an_expired_decision(ledger_url: str, app_url: str) -> None:
    decided_long_ago(ledger_url, ["old"], days=900)
    app_role = psycopg.conninfo.conninfo_to_dict(app_url)["user"]
    for granted in (False, True):  # no DELETE privilege; and were one granted, the trigger still refuses
        if granted:
            with psycopg.connect(ledger_url, autocommit=True) as owner:
                owner.execute(f"GRANT DELETE ON decisions TO {app_role}")
        with psycopg.connect(app_url) as app:
            app.execute("SELECT set_config('parkbrake.prune_decisions_before', now()::text, true)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
                app.execute("DELETE FROM decisions")
        assert ("append-only" in str(refused.value)) is granted
    # The owner itself, outside ledger_prune_decisions:
    with (
        psycopg.connect(ledger_url) as owner,
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"),
    ):
        owner.execute("DELETE FROM decisions")
    assert remaining_keys(ledger_url) == ["old"]
