"""An unknown tenant is bad input wherever a ``parkbrake ledger`` command names one: a typo would
otherwise print an empty report, close nothing or admit against no budget, and exit 0.

A tenant is known once the ledger has metered a host of it or holds its budget (its ``tenants``
table, which the runways read); ``unattributed`` always is. Only the named tenants are looked up;
every known one is read only to word the error."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from guardrails.errors import InputError
from guardrails.ledger import UNATTRIBUTED

if TYPE_CHECKING:
    from lambdas.ledger.store import LedgerStore

MAX_LISTED = 10
DEFAULT_ZONE = "UTC"  # a tenant without a budget: its months are UTC's, as lambdas.ledger.closes has it


def tenant_zones(store: LedgerStore, tenants: Sequence[str] | None, *, now: datetime) -> dict[str, str]:
    """The known tenants among ``tenants`` (None: all of them) and the zone their months are in:
    their budget's, else UTC (as lambdas.ledger.closes closes them)."""
    runways = store.runways(now=now, default_cap=timedelta(0), tenants=list(tenants) if tenants else None)
    return {
        status.tenant: status.budget.timezone if status.budget.limit_usd is not None else DEFAULT_ZONE
        for status in runways
    }


def unknown_tenant_problem(name: str, known: set[str], field: str = "--tenant") -> str:
    """One line: the unknown name, the closest known one if any, else the known ones."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    if close:
        return f"{field}: no tenant {name!r} in the ledger; did you mean {close[0]!r}?"
    listed = sorted(known - {UNATTRIBUTED})
    more = f" and {len(listed) - MAX_LISTED} more" if len(listed) > MAX_LISTED else ""
    shown = ", ".join(listed[:MAX_LISTED]) + more
    return f"{field}: no tenant {name!r} in the ledger; known tenants: {shown or 'none yet'}"


def check_known_tenants(
    store: LedgerStore,
    tenants: Sequence[str],
    *,
    now: datetime,
    field: str = "--tenant",
    found: set[str] | None = None,
) -> None:
    """InputError (exit 2) naming the first of ``tenants`` the ledger does not know; ``found``: the
    known ones among them, when the caller has read them already."""
    if not tenants:
        return
    if found is None:
        found = set(tenant_zones(store, tenants, now=now))
    missing = [name for name in tenants if name not in found and name != UNATTRIBUTED]
    if missing:
        known = set(tenant_zones(store, None, now=now)) | {UNATTRIBUTED}
        raise InputError(unknown_tenant_problem(missing[0], known, field))
