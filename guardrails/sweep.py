"""The sweep's decision: for each host, stop it or skip it, and why.

Pure: the Lambda and the CLI list hosts and act; this module only judges them with the rules of
:mod:`guardrails.rules.registry` that judge hosts in its state (running hosts; stopped ones for
the stopped-too-long rules). A host is stopped when any rule whose action is ``stop`` matches,
snapshotted and terminated when one whose action is ``terminate`` does; every other finding is
reported with the verdict.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from guardrails import names, tags
from guardrails.deadlines import Deadline, deadline_for
from guardrails.durations import format_duration
from guardrails.hosts import Host
from guardrails.rules.base import Finding, Rule, Subject, SweepPolicy, instant
from guardrails.rules.registry import RULES
from guardrails.settings import Settings
from guardrails.storage import Storage


@dataclass(frozen=True)
class Verdict:
    host: Host
    action: Literal["stop", "terminate", "skip"]
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
        max_runtime_ceiling=settings.max_runtime_ceiling,
        stopped_retention=settings.stopped_retention,
        terminate_stopped=settings.terminate_stopped,
    )


def orphan_reason(host: Host, policy: SweepPolicy, live_stacks: Collection[str] | None) -> str | None:
    """Why a managed host belongs to no existing stack, or None.

    ``live_stacks`` are the stacks deployed in the host's region (by their park parameter); None when
    they could not be listed, in which case only a missing stack tag makes an orphan.
    """
    if not host.managed:
        return None
    stack = host.tags.get(tags.STACK, "").strip()
    if not stack:
        return f"no {tags.STACK} tag"
    if stack == policy.stack or live_stacks is None or stack in live_stacks:
        return None
    return (
        f"{tags.STACK} {stack!r} names no stack in {host.region} "
        f"(there is no {names.park_parameter(stack)} parameter)"
    )


def names_another_stack(host: Host, stack: str | None) -> bool:
    """Whether ``host`` is managed and its stack tag names a stack other than ``stack``: the only hosts
    whose judgement depends on which stacks exist (:func:`orphan_reason`, :func:`owner_stack`), so the
    only reason to read the stack list."""
    named = host.tags.get(tags.STACK, "").strip()
    return host.managed and bool(named) and named != stack


def owner_stack(host: Host, policy: SweepPolicy, live_stacks: Collection[str] | None = None) -> str | None:
    """The other, existing stack a managed host belongs to, or None when this stack's sweep judges it.

    A managed host whose stack tag is missing or names no stack that exists is an orphan: every
    stack's sweep judges it, so that no tag can hide a host from all of them.
    """
    stack = host.tags.get(tags.STACK, "").strip()
    if policy.stack is None or not host.managed or not stack or stack == policy.stack:
        return None
    if live_stacks is not None and stack not in live_stacks:
        return None
    return stack


def host_deadline(host: Host, policy: SweepPolicy, now: datetime, *, orphan: bool = False) -> Deadline | None:
    """When the sweep will stop ``host`` under this stack's caps, ceiling and exemption limit (None for a
    host outside the guardrails): what the deadlines and status use too."""
    if not host.managed:
        return None
    return deadline_for(
        host,
        pool_caps=policy.pool_caps,
        default_cap=policy.default_cap,
        max_exemption=policy.max_exemption,
        ceiling=policy.max_runtime_ceiling,
        now=now,
        orphan=orphan,
    )


def judge(
    host: Host,
    policy: SweepPolicy,
    now: datetime,
    rules: Iterable[Rule] = RULES,
    *,
    live_stacks: Collection[str] | None = None,
    storage: Storage | None = None,
) -> Verdict:
    """``storage``: a stopped host's volumes, for the stopped-too-long report."""
    orphan = orphan_reason(host, policy, live_stacks)
    deadline = host_deadline(host, policy, now, orphan=orphan is not None)

    def skip(reason: str, findings: tuple[Finding, ...] = ()) -> Verdict:
        return Verdict(host, "skip", reason, None, deadline, findings)

    applicable = [rule for rule in rules if host.state in rule.states]
    if not applicable:
        return skip(f"not running ({host.state})")
    if (other := owner_stack(host, policy, live_stacks)) is not None:
        return skip(f"belongs to stack {other!r}")
    if not host.accelerator:
        return skip(f"{host.instance_type} is not an accelerator instance type")
    subject = Subject(host, deadline, now, policy, orphan, storage)
    findings = tuple(finding for rule in applicable if (finding := rule.evaluate(subject)) is not None)
    acting = next((finding for finding in findings if finding.action != "report"), None)
    foreign = host.tags.get(tags.STACK, "").strip()
    if acting is not None and policy.stack is not None and foreign and foreign != policy.stack:
        # An orphan naming a stack that does not exist (a typo, a deleted stack): IAM cannot tell it
        # from a live stack's host, and a stack's roles stop and adopt only their own (iam_policies).
        return skip(
            f"{acting.reason}; not stopped: its {tags.STACK} is {foreign!r}, and this stack's roles stop only "
            f"its own hosts: retag it {tags.STACK}={policy.stack} or stop it by hand",
            findings,
        )
    if acting is not None:
        action: Literal["stop", "terminate"] = "terminate" if acting.action == "terminate" else "stop"
        return Verdict(host, action, acting.reason, acting.rule, deadline, findings)
    reports = [finding.reason for finding in findings]
    if host.state != "running":
        return skip("; ".join(reports) or f"{host.state}, within the stopped retention", findings)
    return skip("; ".join([*reports, _not_due(deadline, now)] if deadline else reports), findings)


def _not_due(deadline: Deadline, now: datetime) -> str:
    cap = f"{format_duration(deadline.cap)} cap ({deadline.cap_source})"
    grace = deadline.reclaim_grace  # a Karpenter node's: the cluster reclaims it first
    if deadline.enforce_at > deadline.deadline + (grace or timedelta(0)):
        return (
            f"exempt until {instant(deadline.enforce_at)} (its {cap} ended at {instant(deadline.deadline)})"
        )
    if grace is not None and now >= deadline.deadline:
        return (
            f"a Karpenter node past its {cap} since {instant(deadline.deadline)}: left to expireAfter and "
            f"the budget controller's reclaim until {instant(deadline.enforce_at)} "
            f"(+{format_duration(grace)}: terminationGracePeriod + one sweep)"
        )
    due = f"within its {cap}: due at {instant(deadline.deadline)}, in {format_duration(deadline.deadline - now)}"
    return due if grace is None else f"{due}; the sweep's backstop at {instant(deadline.enforce_at)}"
