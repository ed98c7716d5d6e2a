"""The stack's budgets in the ledger: what ``Pulumi.<stack>.yaml`` declares per tenant
(``monthly_budget_usd``, optionally ``monthly_gpu_hours``) becomes the tenant's budget.

The stack's Guardrails component passes them to the ledger's Lambdas as ``PARKBRAKE_STACK_BUDGETS``
(JSON); the reconciler applies them on its first run after a deploy (a new environment is a new
container), and ``parkbrake ledger budget --from-stack STACK`` applies them by hand. A budget a
person set by hand since is kept while the stack still declares what it did then; a stack that
declares something else afterwards is a conflict: reported (and logged as a ``budget-set``
decision), never applied silently, until a person chooses (``--replace-hand``, or the same value
by hand). The deciding is the ledger's own (``ledger_apply_stack_budget``, budgets.sql).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from guardrails.decisions import Decision
from guardrails.stack_budgets import STACK_BUDGETS, StackBudget, budgets_from_json
from lambdas.ledger import queries as sql
from lambdas.ledger.store import LedgerStore

DECISION_KIND = "budget-set"
# Outcomes that change the ledger or need a person; "unchanged" and "kept-by-hand" are quiet.
LOGGED = ("set", "updated", "replaced-hand", "conflict")


@dataclass(frozen=True)
class StackBudgetOutcome:
    stack: str
    declared: StackBudget
    outcome: str  # set, updated, unchanged, kept-by-hand, conflict, replaced-hand
    ledger_limit_usd: Decimal | None  # the ledger's budget before (a dry run: as it stays)
    ledger_gpu_hours: Decimal | None

    def as_dict(self) -> dict[str, Any]:
        return self.declared.as_dict() | {
            "stack": self.stack,
            "outcome": self.outcome,
            "ledger_limit_usd": None if self.ledger_limit_usd is None else str(self.ledger_limit_usd),
            "ledger_gpu_hours": None if self.ledger_gpu_hours is None else str(self.ledger_gpu_hours),
        }

    def line(self) -> str:
        declared = _limits(self.declared.limit_usd, self.declared.gpu_hours)
        ledger = _limits(self.ledger_limit_usd, self.ledger_gpu_hours)
        said = {
            "set": f"set to the stack's {declared}",
            "updated": f"updated from {ledger} to the stack's {declared}",
            "unchanged": f"{declared}, as the stack declares",
            "kept-by-hand": f"{ledger}, set by hand since the stack declared {declared}: kept",
            "replaced-hand": f"{ledger}, set by hand, replaced by the stack's {declared}",
            "conflict": (
                f"CONFLICT: {ledger} set by hand, and the stack {self.stack} now declares {declared}; "
                "nothing changed: apply the stack's with `parkbrake ledger budget --from-stack "
                f"{self.stack} --replace-hand`, or set the one you want by hand"
            ),
        }[self.outcome]
        return f"{self.declared.tenant}: {said}"


def _limits(limit_usd: Decimal | None, gpu_hours: Decimal | None) -> str:
    if limit_usd is None:
        return "no budget"
    return (
        f"{limit_usd:,.2f} USD" + ("" if gpu_hours is None else f" and {gpu_hours:,} GPU-hours") + " a month"
    )


def apply_stack_budgets(
    store: LedgerStore,
    stack: str,
    budgets: Sequence[StackBudget],
    *,
    now: datetime,
    actor: str,
    replace_hand: bool = False,
    dry_run: bool = False,
) -> list[StackBudgetOutcome]:
    """Apply ``stack``'s ``budgets`` in one transaction (a dry run rolls it back) and log what changed
    and every conflict as ``budget-set`` decisions."""
    with store.connections.connection() as connection, connection.transaction(force_rollback=dry_run):
        before = {
            row[0]: (row[5], row[6])
            for row in connection.execute(
                sql.BUDGET_SOURCES, {"tenants": [budget.tenant for budget in budgets]}
            ).fetchall()
        }
        outcomes = []
        for budget in budgets:
            (outcome,) = connection.execute(
                sql.APPLY_STACK_BUDGET,
                (budget.tenant, stack, budget.limit_usd, budget.gpu_hours, replace_hand),
            ).fetchone() or ("conflict",)
            limit, gpu_hours = before.get(budget.tenant, (None, None))
            outcomes.append(StackBudgetOutcome(stack, budget, outcome, limit, gpu_hours))
    if not dry_run:
        _log(store, outcomes, now=now, actor=actor)
    return outcomes


def _log(store: LedgerStore, outcomes: Sequence[StackBudgetOutcome], *, now: datetime, actor: str) -> None:
    from lambdas.ledger.decisions import DecisionLedger

    decisions = [
        Decision(
            DECISION_KIND,
            actor,
            outcome.line(),
            now,
            tenant=outcome.declared.tenant,
            details=outcome.as_dict() | {"rule": outcome.outcome},  # a set then a conflict: two decisions
        )
        for outcome in outcomes
        if outcome.outcome in LOGGED
    ]
    if decisions:  # one origin per application: the same stack applied again logs again
        DecisionLedger.of(store).append(decisions, origin=f"stack-budgets-{now.isoformat()}")


_APPLIED: set[str] = set()  # per container: the declarations applied already


def apply_declared_once(
    store: LedgerStore, environ: Mapping[str, str], *, stack: str, now: datetime
) -> list[dict[str, Any]]:
    """The Lambdas' step: apply ``PARKBRAKE_STACK_BUDGETS`` once per container (a deploy that
    changes it starts new containers), as the stack (actor ``stack:<name>``, the settings' stack)."""
    text = environ.get(STACK_BUDGETS)
    if not text or text in _APPLIED:
        return []
    outcomes = apply_stack_budgets(store, stack, budgets_from_json(text), now=now, actor=f"stack:{stack}")
    _APPLIED.add(text)
    return [outcome.as_dict() for outcome in outcomes]
