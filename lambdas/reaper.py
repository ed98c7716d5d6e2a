"""The sweep: judge every accelerator host in the configured regions and stop those past their deadline.

Events: ``{"dry_run": bool}`` (or EventBridge's own scheduled-event payload, or ``{}``) sweeps;
``{"instance_ids": [...]}`` judges just those hosts, which is how a deadline schedule fires;
``{"warn": [...]}`` warns those hosts' owners that their deadline is near (the warning schedule's payload).
Returns ``{"checked", "stopped", "skipped": [{"instance_id", "reason"}], "errors"}`` and more.
A deadline's stop that fails raises after notifying, so that Lambda retries it and, in the end,
its dead-letter queue pages.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from guardrails.settings import Settings
from guardrails.sweep_notice import KIND_OF_RULE
from lambdas.aws import heartbeat
from lambdas.aws.decision_log import RECORD_ERROR, DecisionLog, decision_log, origin_of
from lambdas.aws.environment import ClientFactory, container_settings, default_clients, utc_now
from lambdas.aws.host_sweep import SweepReport, sweep
from lambdas.aws.logs import configure_logging
from lambdas.aws.owner_warnings import warn_owners

log = logging.getLogger(__name__)


class DeadlineStopFailed(RuntimeError):
    """A host judged at its deadline could not be stopped; raised so that the invocation is retried."""


class WarningFailed(RuntimeError):
    """An owner's warning could not be published; raised so that Scheduler retries it (then dead-letters)."""


def parse_event(event: Mapping[str, Any] | None) -> tuple[bool, list[str] | None]:
    """``(dry_run, instance_ids)`` from the reaper's events; anything else is refused loudly."""
    event = event or {}
    if not isinstance(event, Mapping):
        raise ValueError(f"the reaper's event is a JSON object, not {str(event)[:80]!r}")
    if event.get("detail-type") == "Scheduled Event":  # EventBridge's own scheduled-rule payload
        return False, None
    dry_run = event.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ValueError(f"dry_run must be true or false, not {dry_run!r}")
    instance_ids = event.get("instance_ids")
    if instance_ids is None:
        return dry_run, None
    return dry_run, _instance_ids("instance_ids", instance_ids)


def _instance_ids(key: str, value: object) -> list[str]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(i, str) and i.startswith("i-") for i in value)
    ):
        raise ValueError(f"{key} must be a non-empty list of instance ids, not {value!r}")
    return list(dict.fromkeys(value))


def warn(
    event: Mapping[str, Any],
    *,
    settings: Settings,
    clients: ClientFactory,
    now: datetime,
    decisions: DecisionLog,
) -> dict[str, Any]:
    """The warning schedule's payload: tell the owners; a warning that could not be published raises."""
    result, decided = warn_owners(
        settings, instance_ids=_instance_ids("warn", event["warn"]), clients=clients, now=now
    )
    result["errors"] += decisions.record(decided)
    if result["warned"]:
        heartbeat.count_action(heartbeat.REAPER, "warn", "before-deadline", len(result["warned"]))
    # Retried, a warning would be sent twice: only a publication that failed is worth it. The chat
    # channel is best effort, and a decision log that could not be written counts its own error.
    failed = [error for error in result["errors"] if error.get("action") not in ("chat", RECORD_ERROR)]
    if failed:
        raise WarningFailed(f"the warning of {', '.join(event['warn'])} failed: {failed}")
    return result


def handle(
    event: Mapping[str, Any] | None,
    *,
    settings: Settings,
    clients: ClientFactory,
    now: datetime,
    decisions: DecisionLog | None = None,
) -> dict[str, Any]:
    """Sweep (or warn); ``decisions`` records what was decided (by default, as log lines only)."""
    decisions = decisions or DecisionLog(guardrail=heartbeat.REAPER, origin=f"reaper-{now.isoformat()}")
    try:
        if isinstance(event, Mapping) and "warn" in event:
            _instance_ids("warn", event["warn"])
            return warn(event, settings=settings, clients=clients, now=now, decisions=decisions)
        dry_run, instance_ids = parse_event(event)
    except ValueError as error:
        return refuse(error)
    report = sweep(settings, now=now, clients=clients, dry_run=dry_run, instance_ids=instance_ids)
    result = report.as_dict()
    # Recorded after the sweep acted: a ledger that is down never holds a stop back.
    recorded = decisions.record(report.decisions(actor=heartbeat.REAPER, now=now))
    result["errors"] = [*result["errors"], *recorded]
    log.info("reaper result", extra={"result": {k: v for k, v in result.items() if k != "hosts"}})
    if dry_run:
        return result
    count(report, stack=settings.stack, full_sweep=instance_ids is None)
    # The chat channel is best effort: its failure is in the result and the notice, never retried for.
    failed = [error for error in report.errors if error.get("action") != "chat"]
    if failed and instance_ids is not None:
        raise DeadlineStopFailed(f"the deadline of {', '.join(instance_ids)} failed: {failed}")
    # The heartbeat says "the sweep ran and could act": only a full, real, error-free sweep earns it
    # (and one whose decisions could not be logged pages too).
    if not report.errors and not recorded and instance_ids is None:
        heartbeat.record_success(
            heartbeat.REAPER, stack=settings.stack, cloudwatch=clients("cloudwatch", None), now=now
        )
    return result


def refuse(error: ValueError) -> dict[str, Any]:
    """An event the reaper cannot read: logged, counted and answered, never raised (retried, it would fail
    the same way; the next scheduled sweep judges every host anyway)."""
    log.error("refused an event: %s", error)
    heartbeat.count_action(heartbeat.REAPER, "refused", "malformed-event")
    return {"refused": str(error), "checked": 0, "stopped": [], "skipped": [], "errors": []}


def count(report: SweepReport, *, stack: str | None, full_sweep: bool) -> None:
    """Actions by rule, errors by action, and (after a full sweep) how many hosts each finding is about."""
    actions: Counter[tuple[str, str]] = Counter()
    findings: Counter[str] = Counter(dict.fromkeys(KIND_OF_RULE.values(), 0))
    for verdict in report.plan.verdicts:
        action = report.outcome.action_of(verdict.host.instance_id)
        if action is not None:
            actions[action, str(verdict.rule)] += 1
        for finding in verdict.reports:
            actions["report", finding.rule] += 1
            findings[KIND_OF_RULE.get(finding.rule, finding.rule)] += 1
    for error in report.errors:
        actions["error", error.get("action", "unknown")] += 1
    for step in report.rotation.steps if report.rotation else []:
        actions[f"rotate-{step['step']}", "past-deadline"] += 1
    for _retired in report.retirement.terminated:
        actions["retire", "stopped-too-long"] += 1
    for (action, reason), amount in sorted(actions.items()):
        heartbeat.count_action(heartbeat.REAPER, action, reason, amount)
    if full_sweep:
        heartbeat.record_findings(heartbeat.REAPER, stack=stack, counts=findings)


def handler(event: dict[str, Any] | None, context: object) -> dict[str, Any]:
    configure_logging(heartbeat.REAPER)
    return handle(
        event,
        settings=container_settings(),
        clients=default_clients,
        now=utc_now(),
        decisions=decision_log(heartbeat.REAPER, origin_of(context)),
    )
