"""An unknown tenant is bad input wherever a ``parkbrake ledger`` command names one: a typo would
otherwise print an empty report, close nothing or admit against no budget, and exit 0."""

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


def tenant_zones(store: LedgerStore, *, now: datetime) -> dict[str, str]:
    """Every tenant the ledger knows (with metered usage or a budget: the runways' tenants) and the
    zone its months are in (its budget's; UTC without one), as lambdas.ledger.closes.tenant_zones."""
    from lambdas.ledger.closes import tenant_zones as zones_of

    return zones_of(store, None, now=now)


def known_tenants(store: LedgerStore, *, now: datetime) -> set[str]:
    """Every tenant the ledger knows, and ``unattributed``, the ledger's name for usage no tenant's
    tag claims."""
    return {status.tenant for status in store.runways(now=now, default_cap=timedelta(0))} | {UNATTRIBUTED}


def unknown_tenant_problem(name: str, known: set[str], field: str = "--tenant") -> str:
    """One line: the unknown name, the closest known one if any, else the known ones."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    if close:
        return f"{field}: no tenant {name!r} in the ledger; did you mean {close[0]!r}?"
    listed = sorted(known - {UNATTRIBUTED})
    shown = ", ".join(listed[:MAX_LISTED]) + (
        f" and {len(listed) - MAX_LISTED} more" if len(listed) > MAX_LISTED else ""
    )
    return f"{field}: no tenant {name!r} in the ledger; known tenants: {shown or 'none yet'}"


def check_known_tenants(
    store: LedgerStore,
    tenants: Sequence[str],
    *,
    now: datetime,
    field: str = "--tenant",
    known: set[str] | None = None,
) -> None:
    """InputError (exit 2) naming the first of ``tenants`` the ledger does not know (``known``, when
    the caller has read them already)."""
    if not tenants:
        return
    known = known_tenants(store, now=now) if known is None else known | {UNATTRIBUTED}
    for name in tenants:
        if name not in known:
            raise InputError(unknown_tenant_problem(name, known, field))
