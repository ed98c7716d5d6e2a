"""The sweep's decision: for each host, stop it or skip it, and why.

Pure: the Lambda and the CLI list hosts and act; this module only judges them with the rules of
:mod:`guardrails.rules.registry`. A host is stopped when any rule whose action is ``stop`` matches;
every other finding is reported with the verdict.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from guardrails import tags
from guardrails.deadlines import Deadline, deadline_for
from guardrails.durations import format_duration
from guardrails.hosts import Host
from guardrails.rules.base import Finding, Rule, Subject, SweepPolicy, instant
from guardrails.rules.registry import RULES
from guardrails.settings import Settings


@dataclass(frozen=True)
class Verdict:
    host: Host
    action: Literal["stop", "skip"]
    reason: str
    rule: str | None  # the rule that stopped it; None for a skip
    deadline: Deadline | None
    findings: tuple[Finding, ...]

    @property
    def reports(self) -> tuple[Finding, ...]:
        return tuple(finding for finding in self.findings if finding.action == "report")


def policy_from_settings(settings: Settings) -> SweepPolicy:
    return SweepPolicy(
        stack=settings.stack,
        default_cap=settings.default_max_runtime,
        max_exemption=settings.max_exemption,
        reap_untagged=settings.reap_untagged,
        pool_caps=dict(settings.pool_max_runtimes),
    )


def owner_stack(host: Host, policy: SweepPolicy) -> str | None:
    """The other stack a managed host belongs to, or None when this stack's sweep should judge it.

    A managed host without a stack tag is judged by every stack's sweep (and reported), so that a
    missing tag never hides a host from all of them.
    """
    stack = host.tags.get(tags.STACK, "").strip()
    if policy.stack is None or not host.managed or not stack or stack == policy.stack:
        return None
    return stack


def host_deadline(host: Host, policy: SweepPolicy, now: datetime) -> Deadline | None:
    """When the sweep will stop ``host`` (None for a host outside the guardrails): what status shows too."""
    if not host.managed:
        return None
    return deadline_for(
        host,
        pool_caps=policy.pool_caps,
        default_cap=policy.default_cap,
        max_exemption=policy.max_exemption,
        now=now,
    )


def judge(host: Host, policy: SweepPolicy, now: datetime, rules: Iterable[Rule] = RULES) -> Verdict:
    deadline = host_deadline(host, policy, now)

    def skip(reason: str, findings: tuple[Finding, ...] = ()) -> Verdict:
        return Verdict(host, "skip", reason, None, deadline, findings)

    if host.state != "running":
        return skip(f"not running ({host.state})")
    if (other := owner_stack(host, policy)) is not None:
        return skip(f"belongs to stack {other!r}")
    if not host.accelerator:
        return skip(f"{host.instance_type} is not an accelerator instance type")
    subject = Subject(host, deadline, now, policy)
    findings = tuple(finding for rule in rules if (finding := rule.evaluate(subject)) is not None)
    stop = next((finding for finding in findings if finding.action == "stop"), None)
    if stop is not None:
        return Verdict(host, "stop", stop.reason, stop.rule, deadline, findings)
    reports = [finding.reason for finding in findings]
    return skip("; ".join([*reports, _not_due(deadline, now)] if deadline else reports), findings)


def _not_due(deadline: Deadline, now: datetime) -> str:
    cap = f"{format_duration(deadline.cap)} cap ({deadline.cap_source})"
    if deadline.enforce_at > deadline.deadline:
        return (
            f"exempt until {instant(deadline.enforce_at)} (its {cap} ended at {instant(deadline.deadline)})"
        )
    return f"within its {cap}: due at {instant(deadline.deadline)}, in {format_duration(deadline.deadline - now)}"
