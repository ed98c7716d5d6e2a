"""A count and its noun as a person writes them: ``1 host``, ``2 hosts``, ``0 hosts``, ``1,204 events``.

Every count the CLI, the Lambdas' notices and the ledger's hints print goes through :func:`counted`, so no
message says "1 hosts" or "1 host(s)".
"""

from __future__ import annotations


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """``count`` with thousands separators, then ``singular`` when it is 1, else ``plural`` (by default
    the singular with an "s": give it where English does otherwise, e.g. ``counted(n, "policy",
    "policies")``)."""
    noun = singular if count == 1 else plural if plural is not None else singular + "s"
    return f"{count:,} {noun}"
