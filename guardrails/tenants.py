"""The one rule for a tenant's name, wherever a tenant is named: a key's tenant, a budget's, a report's.

A tenant is the ``parkbrake:tenant`` tag's value on the hosts it pays for, so a name no tag can carry
usefully (empty, padded with spaces, with control characters) would be a budget no host is ever
billed against. Names are 1-63 letters, digits, ``.``, ``_`` or ``-``, starting with a letter or
digit (the same rule as ``parkbrake keys create``).
"""

from __future__ import annotations

import re

from guardrails.errors import InputError

TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
TENANT_HINT = "use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit (the parkbrake:tenant tag's value)"


def tenant_problem(name: object) -> str | None:
    """Why ``name`` is not a tenant's name, or None when it is one."""
    if isinstance(name, str) and TENANT_NAME.fullmatch(name):
        return None
    shown = repr(name) if len(repr(name)) <= 70 else repr(name)[:70] + "…"
    return f"{shown} is not a tenant name; {TENANT_HINT}"


def validate_tenant(name: str, field: str = "--tenant") -> str:
    """``name`` as is, or an InputError naming ``field`` and the rule."""
    problem = tenant_problem(name)
    if problem is not None:
        raise InputError(f"{field}: {problem}")
    return name
