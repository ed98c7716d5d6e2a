"""Report managed hosts whose guardrail tags were ignored or are missing; a typo never extends a cap."""

from __future__ import annotations

from guardrails import tags
from guardrails.owners import owner_problem
from guardrails.rules.base import Rule, Subject, always


def _malformed(subject: Subject) -> str | None:
    if subject.deadline is None:
        return None
    problems = list(subject.deadline.problems)
    missing = [key for key in tags.REQUIRED_ON_GPU_HOSTS if not subject.host.tags.get(key, "").strip()]
    if missing:
        problems.append("missing tags: " + ", ".join(missing))
    owner = subject.host.tags.get(tags.OWNER)
    if owner is not None and (problem := owner_problem(owner)) is not None:
        problems.append(problem)
    return "; ".join(problems) or None


RULE = Rule(
    name="malformed-tags",
    description="a managed host whose max-runtime, exempt-until or owner tag was ignored, or that lacks required tags",
    filter=_malformed,
    action=always("report"),
    # An exempt-until further ahead than the exemption limit is reported with the malformed tags.
    settings=("max_exemption",),
)
