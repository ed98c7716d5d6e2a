"""Who is told about a host: the ``parkbrake:owner`` tag, an e-mail address or a chat handle.

A malformed owner is reported like any other malformed tag (the sweep's ``malformed-tags`` rule) and
is never used as an address: the notice then goes to the on-call subscribers only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from guardrails import tags

# One address, no spaces or second @; the domain has a dot (``ana@example.com``).
EMAIL = re.compile(r"[^@\s]+@[^@\s.]+(\.[^@\s.]+)+")
# A chat handle as Slack and Mattermost write it: ``@ana``, ``@ana.lima``, ``@ml-oncall``.
CHAT_HANDLE = re.compile(r"@[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
OWNER_HINT = "write an e-mail address (ana@example.com) or a chat handle (@ana)"


def owner_problem(value: str) -> str | None:
    """Why ``value`` is not an owner, or None when it is one."""
    text = value.strip()
    if EMAIL.fullmatch(text) or CHAT_HANDLE.fullmatch(text):
        return None
    return f"{tags.OWNER}: {value!r} is neither an e-mail address nor a chat handle; {OWNER_HINT}"


def owner_of(resource_tags: Mapping[str, str]) -> str | None:
    """The host's owner when its tag holds a valid one; None when it is missing or malformed."""
    value = resource_tags.get(tags.OWNER, "").strip()
    return value if value and owner_problem(value) is None else None


def owners_of(hosts_tags: Iterable[Mapping[str, str]]) -> list[str]:
    """The valid owners of these hosts (their tags), each once, in order."""
    found = (owner_of(host_tags) for host_tags in hosts_tags)
    return list(dict.fromkeys(owner for owner in found if owner))


def owners_line(owner_names: Sequence[str]) -> str:
    """The line that names the owners in a message about hosts."""
    if not owner_names:
        return f"Owners: nobody (no valid {tags.OWNER} tag; the on-call subscribers get this)."
    return f"Owners: {', '.join(owner_names)}."
