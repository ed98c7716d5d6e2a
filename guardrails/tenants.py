"""The one rule for a tenant's name, wherever a tenant is named: a key's tenant, a budget's, a report's.

A tenant is the ``parkbrake:tenant`` tag's value on the hosts it pays for, so a name no tag can carry
usefully (empty, padded with spaces, with control characters) would be a budget no host is ever
billed against. Names are 1-63 letters, digits, ``.``, ``_`` or ``-``, starting with a letter or
digit (the same rule as ``parkbrake keys create``).

A host's tag names a tenant only when it is one the stack declares (``tenants`` in the stack file,
``PARKBRAKE_TENANTS`` in the guardrails' environment), exactly: no case folding, no Unicode
normalisation, no trimming. ``Research`` or ``research`` followed by U+200B (a zero-width space)
is not ``research``; such a host is metered for tenant ``unattributed`` with the reason
``unknown tenant 'Research'`` (:func:`unknown_tenant`), so a tag can never bill a tenant that has no
budget while the declared one's budget denies.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from guardrails.errors import InputError

TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
TENANT_HINT = "use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit (the parkbrake:tenant tag's value)"


def tenant_problem(name: object) -> str | None:
    """Why ``name`` is not a tenant's name, or None when it is one."""
    if isinstance(name, str) and TENANT_NAME.fullmatch(name):
        return None
    return f"{shown(name)} is not a tenant name; {TENANT_HINT}"


def validate_tenant(name: str, field: str = "--tenant") -> str:
    """``name`` as is, or an InputError naming ``field`` and the rule."""
    problem = tenant_problem(name)
    if problem is not None:
        raise InputError(f"{field}: {problem}")
    return name


def shown(value: object, limit: int = 70) -> str:
    """``value`` as Python writes it (invisible and format characters escaped), cut at ``limit``."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def unknown_tenant(value: str, declared: Collection[str] | None) -> str | None:
    """Why a host's ``parkbrake:tenant`` value names no tenant (the reason it is metered unattributed),
    or None when it names one: one of ``declared`` exactly, or, where the process was not told the
    stack's tenants (``declared`` None: a CLI without ``PARKBRAKE_TENANTS``), any valid tenant name."""
    if declared is not None:
        return None if value in declared else f"unknown tenant {shown(value)}"
    return None if TENANT_NAME.fullmatch(value) else f"unknown tenant {shown(value)}"
