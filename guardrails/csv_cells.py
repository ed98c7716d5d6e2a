"""Text cells a spreadsheet opens as text, not as a formula (OWASP's CSV injection advice).

A spreadsheet evaluates a cell that starts with ``=``, ``+``, ``-`` or ``@`` as a formula, and one
that starts with a tab or carriage return after trimming it; a pool, a tenant or a price source
written by whoever tags a host could run one on the finance team's machine. Such a text cell gets a
leading ``'``, which spreadsheets show as text and do not print. Amount cells are written by the
ledger in FOCUS's numeric format (guardrails.focus_spec.NUMERIC) and stay numbers: ``-2.5`` is an
amount, not a formula, so the writers pass amounts through ``amount_cell``, never ``text_cell``.
"""

from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def text_cell(value: str) -> str:
    """``value`` as a spreadsheet shows it as text: ``'`` before a formula's first character."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value
