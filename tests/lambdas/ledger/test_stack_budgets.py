"""The stack's budgets are the ledger's: what Pulumi.<stack>.yaml declares reaches the ledger (the
reconciler's first run after a deploy, or `ledger budget --from-stack`); a budget set by hand is
kept until the stack declares something else, which is a conflict, reported and never applied
silently; `runway` shows the budgets and who set them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.main import parkbrake
from guardrails.runway import Budget
from guardrails.stack_budgets import STACK_BUDGETS, StackBudget, budgets_from_json, budgets_json
from lambdas.ledger import stack_budgets
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.stack_budgets import apply_declared_once, apply_stack_budgets
from lambdas.ledger.store import LedgerStore

NOW = datetime(2036, 5, 5, 10, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[3]


def apply(store: LedgerStore, *budgets: StackBudget, **options: bool) -> list[str]:
    outcomes = apply_stack_budgets(store, "dev", list(budgets), now=NOW, actor="stack:dev", **options)
    return [outcome.outcome for outcome in outcomes]


def limits(store: LedgerStore, tenant: str) -> tuple[Decimal | None, Decimal | None, str]:
    statuses = store.runways(now=NOW, default_cap=NOW - NOW, tenants=[tenant])
    if not statuses:  # a tenant the ledger does not know
        return None, None, "unknown"
    budget = statuses[0].budget
    return budget.limit_usd, budget.gpu_hours, budget.source


def test_the_stack_sets_updates_and_keeps_a_budget_until_a_person_changes_it(store: LedgerStore) -> None:
    assert apply(store, StackBudget("research", Decimal(6000))) == ["set"]
    assert limits(store, "research") == (Decimal(6000), None, "stack")
    assert apply(store, StackBudget("research", Decimal(6000))) == ["unchanged"]
    assert apply(store, StackBudget("research", Decimal(7000), Decimal(400))) == ["updated"]
    assert limits(store, "research") == (Decimal(7000), Decimal(400), "stack")


def test_a_budget_changed_by_hand_then_in_the_stack_is_a_conflict_not_a_flip(store: LedgerStore) -> None:
    apply(store, StackBudget("research", Decimal(6000)))
    store.set_budget(Budget("research", Decimal(9000)))  # by hand
    assert apply(store, StackBudget("research", Decimal(6000))) == [
        "kept-by-hand"
    ]  # the stack did not change
    assert limits(store, "research") == (Decimal(9000), None, "hand")

    assert apply(store, StackBudget("research", Decimal(6500))) == ["conflict"]  # the stack changed since
    assert limits(store, "research") == (Decimal(9000), None, "hand")  # nothing flipped
    assert apply(store, StackBudget("research", Decimal(6500))) == ["conflict"]  # and it stays reported
    logged = DecisionLedger.of(store).read(kinds=["budget-set"])
    conflicts = [decision for decision in logged if decision.decision.details["outcome"] == "conflict"]
    assert conflicts
    assert "CONFLICT: 9,000.00 USD a month set by hand" in conflicts[0].decision.reason

    assert apply(store, StackBudget("research", Decimal(6500)), replace_hand=True) == ["replaced-hand"]
    assert limits(store, "research") == (Decimal(6500), None, "stack")


def test_a_hand_budget_the_stack_never_declared_is_a_conflict_and_a_dry_run_changes_nothing(
    store: LedgerStore,
) -> None:
    store.set_budget(Budget("research", Decimal(100)))
    assert apply(store, StackBudget("research", Decimal(6000)), dry_run=True) == ["conflict"]
    assert apply(store, StackBudget("product", Decimal(2500)), dry_run=True) == ["set"]
    assert limits(store, "product") == (None, None, "unknown")  # the dry run set nothing
    assert DecisionLedger.of(store).read(kinds=["budget-set"]) == []


def test_the_reconciler_applies_the_deployed_budgets_once_per_container(
    store: LedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stack_budgets, "_APPLIED", set())
    declared = budgets_json(
        [StackBudget("research", Decimal(6000)), StackBudget("product", Decimal(2500), Decimal(40))]
    )
    environ = {STACK_BUDGETS: declared}
    first = apply_declared_once(store, environ, stack="dev", now=NOW)
    assert [(entry["tenant"], entry["outcome"]) for entry in first] == [
        ("product", "set"),
        ("research", "set"),
    ]
    assert apply_declared_once(store, environ, stack="dev", now=NOW) == []  # the same container: once
    assert limits(store, "product") == (Decimal(2500), Decimal(40), "stack")
    (decision,) = DecisionLedger.of(store).read(kinds=["budget-set"], tenant="product")
    assert decision.decision.actor == "stack:dev"


def test_a_malformed_declaration_names_the_variable() -> None:
    with pytest.raises(Exception, match=STACK_BUDGETS):
        budgets_from_json('{"research": {"limit": 1}}')


def invoke(*args: str) -> Result:
    return CliRunner().invoke(parkbrake, list(args))


def test_from_stack_applies_pulumi_dev_yaml_and_runway_shows_it(
    ledger_url: str, store: LedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKBRAKE_DATABASE_URL", ledger_url)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # no STS: the actor says so
    dry = invoke("ledger", "budget", "--from-stack", "dev", "--project-dir", str(REPO), "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines() == [
        "would be: product: set to the stack's 2,500.00 USD a month",
        "would be: research: set to the stack's 6,000.00 USD a month",
    ]
    applied = invoke("ledger", "budget", "--from-stack", "dev", "--project-dir", str(REPO), "-o", "json")
    assert applied.exit_code == 0, applied.output
    assert [(b["tenant"], b["outcome"]) for b in json.loads(applied.stdout)["budgets"]] == [
        ("product", "set"),
        ("research", "set"),
    ]
    runway = {entry["tenant"]: entry for entry in json.loads(invoke("ledger", "runway", "-o", "json").stdout)}
    assert (runway["research"]["limit_usd"], runway["research"]["budget_source"]) == ("6000.00", "stack")
    assert (runway["product"]["limit_usd"], runway["product"]["budget_source"]) == ("2500.00", "stack")

    assert invoke("ledger", "budget", "research", "--limit-usd", "9000").exit_code == 0
    edited = tmp_stack(REPO, "research", 6100)
    conflict = invoke("ledger", "budget", "--from-stack", "edited", "--project-dir", str(edited))
    assert conflict.exit_code == 1
    assert "research: CONFLICT: 9,000.00 USD a month set by hand" in conflict.stdout
    unknown = invoke("ledger", "budget", "nobody", "--from-stack", "dev", "--project-dir", str(REPO))
    assert unknown.exit_code == 2
    assert "TENANT: stack 'dev' declares no budget for 'nobody'" in unknown.output


def tmp_stack(repo: Path, tenant: str, limit: int) -> Path:
    """Pulumi.dev.yaml as the stack ``edited``, ``tenant``'s budget changed to ``limit``."""
    import tempfile

    folder = Path(tempfile.mkdtemp())
    text = (repo / "Pulumi.dev.yaml").read_text()
    text = text.replace(
        f"    {tenant}:\n      monthly_budget_usd: 6000", f"    {tenant}:\n      monthly_budget_usd: {limit}"
    )
    (folder / "Pulumi.edited.yaml").write_text(text)
    (folder / "Pulumi.yaml").write_text((repo / "Pulumi.yaml").read_text())
    return folder
