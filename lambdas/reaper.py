"""The reaper's Lambda entry point: every five minutes, and at each host's deadline.

Events: ``{"dry_run": bool}`` (or EventBridge's own scheduled-event payload, or ``{}``) sweeps;
``{"instance_ids": [...]}`` judges just those hosts, which is how a deadline schedule fires;
``{"warn": [...]}`` warns those hosts' owners that their deadline is near (the warning schedule's payload).
Either may name a member account's ``"account"`` and ``"region"`` (a hub's central deadline: judged
there through the spoke role). Returns ``{"checked", "stopped", "skipped": [{"instance_id", "reason"}],
"errors"}`` and more; a hub (``PARKBRAKE_SPOKES_PARAMETER``) sweeps its spokes' accounts instead
(engines/org_sweeping.py). A deadline's stop that fails raises after notifying, so that Lambda retries
it and, in the end, its dead-letter queue pages. The work is in lambdas/engines (sweeping, owner_warnings).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from guardrails.settings import Settings
from lambdas.aws import heartbeat
from lambdas.aws.decision_log import DecisionLog, origin_of
from lambdas.aws.environment import ClientFactory, container_settings, default_clients, utc_now
from lambdas.aws.logs import configure_logging
from lambdas.aws.refusals import refuse_event
from lambdas.engines.decision_logs import decision_log
from lambdas.engines.org_sweeping import SpokeList, judge_in_place, sweep_organisation_and_record
from lambdas.engines.owner_warnings import warn_and_record
from lambdas.engines.sweeping import event_place, instance_ids_of, parse_event, sweep_and_record

# The hub's spokes, kept by the container as its settings are (lambdas/engines/org_sweeping.py).
CONTAINER_SPOKES = SpokeList()


def handle(
    event: Mapping[str, Any] | None,
    *,
    settings: Settings,
    clients: ClientFactory,
    now: datetime,
    decisions: DecisionLog | None = None,
    spokes: SpokeList | None = None,
) -> dict[str, Any]:
    """Sweep (or warn); ``decisions`` records what was decided (by default, as log lines only); a hub
    sweeps ``spokes`` (the container's list), but a deadline or warning is about its own host."""
    decisions = decisions or DecisionLog(guardrail=heartbeat.REAPER, origin=f"reaper-{now.isoformat()}")
    try:
        warned = (
            instance_ids_of("warn", event["warn"]) if isinstance(event, Mapping) and "warn" in event else None
        )
        dry_run, instance_ids = (False, None) if warned is not None else parse_event(event)
        place = event_place(event)
    except ValueError as error:
        answer = {"refused": str(error), "checked": 0, "stopped": [], "skipped": [], "errors": []}
        return refuse_event(heartbeat.REAPER, "refused", error, answer)
    if place is not None:
        ids, warn = (warned, True) if warned is not None else (instance_ids or [], False)
        return judge_in_place(
            place, ids, warn=warn, settings=settings, clients=clients, now=now, decisions=decisions
        )
    if warned is not None:
        return warn_and_record(warned, settings=settings, clients=clients, now=now, decisions=decisions)
    if settings.spokes_parameter is not None and instance_ids is None:
        return sweep_organisation_and_record(
            settings, now=now, clients=clients, decisions=decisions, dry_run=dry_run, spokes=spokes
        )
    return sweep_and_record(
        settings, now=now, clients=clients, decisions=decisions, dry_run=dry_run, instance_ids=instance_ids
    )


def handler(event: dict[str, Any] | None, context: object) -> dict[str, Any]:
    configure_logging(heartbeat.REAPER)
    return handle(
        event,
        settings=container_settings(),
        clients=default_clients,
        now=utc_now(),
        decisions=decision_log(heartbeat.REAPER, origin_of(context)),
        spokes=CONTAINER_SPOKES,
    )
