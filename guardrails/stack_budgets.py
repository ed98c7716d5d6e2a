"""The budgets a stack declares per tenant in ``Pulumi.<stack>.yaml`` (``monthly_budget_usd``,
optionally ``monthly_gpu_hours``), and ``PARKBRAKE_STACK_BUDGETS``, the JSON the stack hands the
ledger's Lambdas them in (applied by :mod:`lambdas.ledger.stack_budgets`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from guardrails.errors import InputError

STACK_BUDGETS = "PARKBRAKE_STACK_BUDGETS"


@dataclass(frozen=True)
class StackBudget:
    """One tenant's budget as a stack declares it."""

    tenant: str
    limit_usd: Decimal
    gpu_hours: Decimal | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "limit_usd": str(self.limit_usd),
            "gpu_hours": None if self.gpu_hours is None else str(self.gpu_hours),
        }


def budgets_of_config(tenants: Mapping[str, Any]) -> list[StackBudget]:
    """The budgets of a parsed stack config's tenants (stacks.config.Tenant)."""
    return [
        StackBudget(
            name,
            Decimal(str(tenant.monthly_budget_usd)).quantize(Decimal("0.01")),
            None if tenant.monthly_gpu_hours is None else Decimal(str(tenant.monthly_gpu_hours)),
        )
        for name, tenant in sorted(tenants.items())
    ]


def budgets_json(budgets: Sequence[StackBudget]) -> str:
    """``PARKBRAKE_STACK_BUDGETS``'s value."""
    return json.dumps(
        {
            b.tenant: {"limit_usd": str(b.limit_usd), "gpu_hours": b.gpu_hours and str(b.gpu_hours)}
            for b in budgets
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def budgets_from_json(text: str) -> list[StackBudget]:
    """``PARKBRAKE_STACK_BUDGETS`` read back; a malformed value is an error naming the variable."""
    try:
        document = json.loads(text)
        return [
            StackBudget(
                tenant,
                Decimal(values["limit_usd"]),
                None if values.get("gpu_hours") is None else Decimal(values["gpu_hours"]),
            )
            for tenant, values in sorted(document.items())
        ]
    except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError) as error:
        raise InputError(
            f"{STACK_BUDGETS}: not the stack's budgets ({error}); deploy the stack again to set it"
        ) from None
