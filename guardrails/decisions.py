"""The guardrails' decision log: one record per decision (a stop, a skip and why, a clamp, an
exemption, an extension, a budget action, a notification), with who decided and why.

Pure: the records and the decisions a sweep, a deadline or a launch made. The sink that writes them
(a JSON log line always, the ledger when configured) is :mod:`lambdas.aws.decision_log`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from guardrails import tags
from guardrails.launch import LaunchDecision
from guardrails.rules.base import instant
from guardrails.sweep import Verdict
from guardrails.sweep_notice import KIND_OF_RULE

# How a guardrail without the ledger's database (the reaper and the deadlines run outside the VPC)
# relays its decisions: EventBridge events of this source and type, which a rule delivers to the meter.
RELAY_SOURCE = "parkbrake.guardrails"
RELAY_DETAIL_TYPE = "Guardrail Decisions"
# The actors whose decisions the meter accepts from the bus: a relayed event cannot forge a person's extension.
RELAYING_ACTORS = frozenset({"reaper", "deadline"})

# Every kind of decision, and what it means; docs/architecture.md lists the same.
KINDS: Mapping[str, str] = {
    "stop": "a host stopped (or, spot, terminated; or removed from its Auto Scaling group; or, stopped too "
    "long, snapshotted and terminated)",
    "stop-failed": "a host due to stop that could not be stopped",
    "skip": "a running host left running, and why",
    "clamp": "a cap longer than the stack's ceiling, shortened to it",
    "exemption-honoured": f"a valid {tags.EXEMPT_UNTIL} keeps a host running past its cap's deadline",
    "exemption-refused": f"a {tags.EXEMPT_UNTIL} that is malformed or beyond the limit, ignored",
    "adopt": "an unmanaged or orphaned host tagged as this stack's, to be stopped",
    "finding": "an unmanaged, orphaned or malformed-tags host reported",
    "deadline-armed": "a host's deadline schedule created",
    "deadline-moved": "a host's deadline schedule moved",
    "deadline-disarmed": "a stopped host's deadline schedule deleted",
    "deadline-judged": "a host already past its deadline when it started, judged at once",
    "extend": "a host's deadline moved by a person, with their reason",
    "warn": "a host's owner warned before its deadline",
    "notify": "a notification sent",
    "launch-start": "a pool's desired capacity raised by the nightly launcher",
    "launch-refuse": "a nightly start refused, and why",
    "budget-notify": "a budget threshold crossed, the tenant notified",
    "budget-deny": "a tenant's new work denied: the budget is spent",
    "budget-stop": "a tenant's running hosts stopped: the budget is spent",
    "workload-ready": "a Kueue Workload admitted by the budget check, its cost reserved in the ledger",
    "workload-retry": "a Kueue Workload sent back to wait: runway short, ledger unreachable, or budget stop",
    "workload-rejected": "a Kueue Workload rejected by the budget check: the budget cannot cover it",
    "workload-released": "a Kueue Workload's reservation given back: it finished, was evicted or deleted",
    "period-close": "a tenant's invoice for a month closed: its lines kept as they were, late usage billed later",
    "attribute": "a host's unattributed usage attributed to a tenant by a person, with their reason",
    "budget-set": "a tenant's budget set from the stack's config, or a conflict with one set by hand since",
}


# Kinds that are outcomes of one decision share its key: a retried invocation whose host was stopped
# by the first attempt (now a skip), or whose schedule was armed by it (now moved), adds nothing.
KEY_OF_KIND: Mapping[str, str] = {
    **dict.fromkeys(("stop", "stop-failed", "skip"), "verdict"),
    **dict.fromkeys(("deadline-armed", "deadline-moved", "deadline-disarmed", "deadline-judged"), "deadline"),
    **dict.fromkeys(("launch-start", "launch-refuse"), "launch"),
}


class UnknownDecisionKind(ValueError):
    """A decision of a kind :data:`KINDS` does not list."""


@dataclass(frozen=True)
class Decision:
    kind: str
    actor: str  # a guardrail (reaper, deadline, launcher, budget) or a person's ARN
    reason: str
    at: datetime
    instance_id: str | None = None
    tenant: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UnknownDecisionKind(f"decision kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if not self.actor.strip() or not self.reason.strip():
            raise ValueError(f"a {self.kind} decision needs an actor and a reason")

    def key(self, origin: str) -> str:
        """The decision's idempotency key within ``origin`` (the invocation or event that decided):
        what was decided (:data:`KEY_OF_KIND`), about what, and by which rule; never a time or a
        text that a retry changes."""
        subject = self.instance_id or self.tenant or "-"
        rule = self.details.get("rule") if self.kind not in KEY_OF_KIND else None
        return ":".join(
            [origin, KEY_OF_KIND.get(self.kind, self.kind), subject, *([str(rule)] if rule else [])]
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": instant(self.at),
            "kind": self.kind,
            "actor": self.actor,
            "instance_id": self.instance_id,
            "tenant": self.tenant,
            "reason": self.reason,
            "details": dict(self.details),
        }


def decision_from_dict(document: Mapping[str, Any]) -> Decision:
    """A decision as :meth:`Decision.as_dict` wrote it; a malformed one raises ValueError naming the field."""
    problems = [
        f"{name}: must be a non-empty string"
        for name in ("kind", "actor", "reason", "at")
        if not isinstance(document.get(name), str) or not document[name].strip()
    ]
    problems += [
        f"{name}: must be a string or null"
        for name in ("instance_id", "tenant")
        if document.get(name) is not None and not isinstance(document[name], str)
    ]
    if not isinstance(document.get("details", {}), dict):
        problems.append("details: must be an object")
    if problems:
        raise ValueError(f"malformed decision ({'; '.join(problems)}): {dict(document)!r}")
    try:
        at = datetime.fromisoformat(document["at"].replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"at: {document['at']!r} is not an ISO-8601 instant") from None
    if at.tzinfo is None:
        raise ValueError(f"at: {document['at']!r} has no timezone")
    return Decision(
        document["kind"],
        document["actor"],
        document["reason"],
        at,
        document.get("instance_id"),
        document.get("tenant"),
        document.get("details", {}),
    )


def sweep_decisions(
    verdicts: Iterable[Verdict],
    *,
    actor: str,
    now: datetime,
    acted: Mapping[str, str],
    adopted: Iterable[str] = (),
    failed: Mapping[str, str],
    full_sweep: bool,
) -> list[Decision]:
    """What a (real, not dry-run) sweep decided about each host.

    ``acted`` maps the hosts acted on to the action taken (stop, terminate, remove-from-group,
    rotate); ``failed`` the hosts whose stop failed to the error. A full sweep logs the hosts that
    run (a stopped host is no decision every five minutes); a sweep of named hosts logs them all.
    """
    adopted = set(adopted)
    decisions: list[Decision] = []
    for verdict in verdicts:
        instance_id = verdict.host.instance_id
        if (
            full_sweep
            and verdict.host.state != "running"
            and instance_id not in acted
            and instance_id not in failed
        ):
            continue
        decisions += _host_decisions(
            verdict,
            actor=actor,
            now=now,
            action=acted.get(verdict.host.instance_id),
            adopted=verdict.host.instance_id in adopted,
            failure=failed.get(verdict.host.instance_id),
        )
    return decisions


def _host_decisions(
    verdict: Verdict, *, actor: str, now: datetime, action: str | None, adopted: bool, failure: str | None
) -> list[Decision]:
    host, deadline = verdict.host, verdict.deadline
    decisions: list[Decision] = []

    def decide(kind: str, reason: str, **details: Any) -> None:
        decisions.append(
            Decision(kind, actor, reason, now, host.instance_id, host.tenant, _without_none(details))
        )

    refusals = (
        [problem for problem in deadline.problems if problem.startswith(tags.EXEMPT_UNTIL)]
        if deadline
        else []
    )
    for refusal in refusals:
        decide("exemption-refused", refusal, tag=host.tags.get(tags.EXEMPT_UNTIL))
    # Honoured: the exemption is what keeps the host running now, past its cap's deadline.
    if (
        deadline is not None
        and deadline.exempt_until is not None
        and deadline.exempt_until > max(deadline.deadline, now)
    ):
        decide(
            "exemption-honoured",
            f"exempt until {instant(deadline.exempt_until)}, past its cap's deadline {instant(deadline.deadline)}",
            exempt_until=instant(deadline.exempt_until),
            deadline=instant(deadline.deadline),
        )
    for finding in verdict.reports:
        if finding.reason == "; ".join(refusals):
            continue  # the malformed-tags report of just the refused exemption, logged above
        kind = "clamp" if finding.rule == "cap-above-ceiling" else "finding"
        decide(kind, finding.reason, rule=finding.rule, finding=KIND_OF_RULE.get(finding.rule))
    common = {
        "rule": verdict.rule,
        "deadline": instant(deadline.enforce_at) if deadline else None,
        "state": host.state,
    }
    if adopted:
        decide("adopt", f"tagged as managed before stopping it: {verdict.reason}", rule=verdict.rule)
    if action is not None:
        decide("stop", verdict.reason, **common, action=action)
    elif failure is not None:
        decide("stop-failed", f"{verdict.reason}; the stop failed: {failure}", **common)
    elif verdict.action == "skip":
        decide("skip", verdict.reason, **common)
    return decisions


def launch_decision(decision: LaunchDecision, *, actor: str, now: datetime) -> Decision:
    """A nightly start: the capacity raised, or the refusal and why."""
    details = {
        "pool": decision.pool,
        "target": decision.target,
        "required_usd": str(decision.required_usd),
        "instance_types": list(decision.instance_types),  # the group's, fallbacks after its own
        "priced_as": decision.priced_as,
    }
    if decision.got is not None:
        details["got"] = decision.got.as_dict()
    if decision.refusal is not None:
        details["refusal"] = decision.refusal.kind
        return Decision(
            "launch-refuse", actor, decision.refusal.reason, now, tenant=decision.tenant, details=details
        )
    budget = "budget checked" if decision.budget_checked else "budget not checked"
    reason = (
        f"raised pool {decision.pool}'s desired capacity to {decision.target} (+{decision.start}, {budget})"
    )
    if decision.got is not None:
        reason += f"; got {decision.got.describe()}"
    return Decision(
        "launch-start",
        actor,
        reason,
        now,
        tenant=decision.tenant,
        details=details | {"started": decision.start},
    )


def notification_decision(
    *, actor: str, now: datetime, subject: str, hosts: Sequence[str], tenant: str | None = None
) -> Decision:
    """A notification sent: its subject and the hosts it is about."""
    return Decision(
        "notify",
        actor,
        f"sent {subject!r}",
        now,
        tenant=tenant,
        details={"subject": subject, "hosts": list(hosts)},
    )


def _without_none(details: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in details.items() if value is not None}
