"""The organisation's sweep, run centrally by the hub's reaper (``sweep: central``, docs/organisation.md).

The hub reads which spokes there are from its SSM parameter (``PARKBRAKE_SPOKES_PARAMETER``), as
lambdas/aws/spoke_list.py reads it for the sweep and the hub's meter alike: the role of every account
and region (``spokes: stacks``), or the active accounts of the OUs (``spokes: stackset``).

Every place (account and region) is swept by the one engine (:func:`lambdas.engines.sweeping.plan_sweep`
and :func:`~lambdas.engines.sweeping.act_on_plan`) through that spoke's role, side by side with one
shared rate limit (:func:`lambdas.aws.assumed.across_places`). The places' reports are then merged
into one: the decisions are recorded once, the notices sent once from the hub, the counts and the
heartbeat are the hub's. A place whose role is missing or denied is an error line of the result
(``action: assume-role``), a notice, a count (``parkbrake/Findings`` ``unreachable-spoke``, sent every
run, zero too, for an alarm) and withholds the heartbeat, so a member account that deletes its role
pages someone; the other places are swept all the same.

A central deadline (or its warning) names one place in its payload: :func:`judge_in_place` runs the
same engine for just those hosts there, through that spoke's role (docs/organisation.md, central deadlines).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from guardrails.decisions import Decision
from guardrails.settings import Settings
from lambdas.aws import heartbeat
from lambdas.aws.assumed import AccountSessions, AssumeFailed, Place, PlaceOutcome, across_places
from lambdas.aws.deadline_schedules import HostPlace
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.environment import ClientFactory
from lambdas.aws.notices import publish_notices
from lambdas.aws.serving_rotation import RotationOutcome
from lambdas.aws.spoke_clients import clients_in_place
from lambdas.aws.spoke_list import SpokeList, SpokeListError
from lambdas.aws.stop_path import StopOutcome
from lambdas.aws.stopped_hosts import Retirement
from lambdas.engines.owner_warnings import warn_and_record
from lambdas.engines.sweeping import (
    DeadlineStopFailed,
    SweepPlan,
    SweepReport,
    act_on_plan,
    count,
    plan_sweep,
    sweep_and_record,
    sweep_notices_of,
)

log = logging.getLogger(__name__)
UNREACHABLE = "unreachable-spoke"  # the finding counted for every place whose role failed


def sweep_places(
    places: Sequence[Place],
    settings: Settings,
    *,
    now: datetime,
    sessions: AccountSessions,
    dry_run: bool,
    concurrency: int | None = None,
) -> tuple[SweepReport, dict[str, Place]]:
    """Each place swept by the one engine through its role, side by side; the reports merged into
    one, and the place of every host judged."""

    def sweep_place(place: Place, clients: ClientFactory) -> SweepReport:
        clients("ec2", place.region)  # the role is assumed here: a refusal is the place's failure line
        regional = replace(settings, regions=(place.region,))
        plan = plan_sweep(regional, now=now, clients=clients)
        return act_on_plan(plan, regional, now=now, clients=clients, dry_run=dry_run)

    options = {} if concurrency is None else {"concurrency": concurrency}
    outcomes = across_places(places, sweep_place, sessions=sessions, **options)
    return merged_report(outcomes, dry_run=dry_run), {
        verdict.host.instance_id: outcome.place
        for outcome in outcomes
        if outcome.value is not None
        for verdict in outcome.value.plan.verdicts
    }


def merged_report(outcomes: Sequence[PlaceOutcome[SweepReport]], *, dry_run: bool) -> SweepReport:
    """The places' reports as one; every error names its account, and a place without a report is
    an error of its own (``assume-role`` when its role could not be assumed)."""
    plan = SweepPlan(verdicts=[], errors=[])
    outcome = StopOutcome(dry_run=dry_run)
    rotation = RotationOutcome(dry_run=dry_run)
    retirement = Retirement()
    errors: list[dict[str, str]] = []
    for place_outcome in outcomes:
        place, report = place_outcome.place, place_outcome.value
        where = {"account_id": place.account_id, "region": place.region}
        if report is None:
            failure = str(place_outcome.failure)
            action = "assume-role" if failure.startswith("cannot assume") else "sweep"
            log.error("could not sweep %s: %s", place.label, failure)
            errors.append({**where, "action": action, "error": failure})
            continue
        plan.verdicts += report.plan.verdicts
        plan.storage.update(report.plan.storage)
        outcome.stopped += report.outcome.stopped
        outcome.terminated += report.outcome.terminated
        outcome.removed_from_group += report.outcome.removed_from_group
        rotation.steps += report.rotation.steps if report.rotation else []
        retirement.terminated += report.retirement.terminated
        retirement.pending += report.retirement.pending
        retirement.snapshots.update(report.retirement.snapshots)
        errors += [{**error, "account_id": place.account_id} for error in report.errors]
    return SweepReport(plan, outcome, dry_run, errors=errors, rotation=rotation, retirement=retirement)


def judge_in_place(
    place: HostPlace,
    instance_ids: Sequence[str],
    *,
    warn: bool,
    settings: Settings,
    clients: ClientFactory,
    now: datetime,
    decisions: DecisionLog,
    sessions: AccountSessions | None = None,
) -> dict[str, Any]:
    """A central deadline (or its warning) of a member account's hosts, as the hub's reaper gets it
    from its own group: the same engine as the stack's own deadlines, run for the one place through
    its spoke role (the host services only: the schedules, notices and counts stay the hub's). A role
    that cannot be assumed raises :class:`DeadlineStopFailed`, so that Scheduler retries and, in the
    end, dead-letters it; the central sweep judges the host all the same."""
    routed = clients_in_place(
        clients, stack=settings.require_stack(), account=place.account, region=place.region, sessions=sessions
    )
    regional = replace(settings, regions=(place.region,))
    try:
        if warn:
            return warn_and_record(
                instance_ids, settings=regional, clients=routed, now=now, decisions=decisions, place=place
            )
        return sweep_and_record(
            regional, now=now, clients=routed, decisions=decisions, instance_ids=instance_ids, place=place
        )
    except AssumeFailed as failure:
        what = "warning" if warn else "deadline"
        log.error(
            "the %s of %s in %s %s failed: %s",
            what,
            ", ".join(instance_ids),
            place.account,
            place.region,
            failure,
        )
        heartbeat.count_action(heartbeat.REAPER, "error", "assume-role")
        raise DeadlineStopFailed(f"the {what} of {', '.join(instance_ids)} failed: {failure}") from failure


def sweep_organisation_and_record(
    settings: Settings,
    *,
    now: datetime,
    clients: ClientFactory,
    decisions: DecisionLog,
    dry_run: bool = False,
    spokes: SpokeList | None = None,
    sessions: AccountSessions | None = None,
) -> dict[str, Any]:
    """The hub reaper's run: every spoke swept, then (from the hub, once) the decisions recorded with
    each host's account, the notices sent, the counts and, after a real sweep with no error, the
    heartbeat. ``clients`` act in the hub's own account; ``spokes`` is the container's list (a fresh
    one, read now, by default); ``sessions`` the run's roles (a fresh one: credentials per run)."""
    spokes = spokes or SpokeList()
    try:
        places = spokes.places(settings, clients)
    except SpokeListError as error:
        log.error("the central sweep cannot start: %s", error)
        heartbeat.count_action(heartbeat.REAPER, "error", "list-spokes")
        failure = {"action": "list-spokes", "error": str(error)}
        return {
            "checked": 0,
            "stopped": [],
            "would_stop": [],
            "skipped": [],
            "errors": [failure],
            "places": [],
        }
    sessions = sessions or AccountSessions()
    report, place_of = sweep_places(places, settings, now=now, sessions=sessions, dry_run=dry_run)
    if not dry_run:
        report.publication = publish_notices(
            sweep_notices_of(report, now=now), settings, clients=clients, now=now
        )
        report.errors += report.publication.errors
    result = _with_accounts(report.as_dict(), place_of)
    result["places"] = _place_rows(places, report)
    if any(place["failure"] for place in result["places"]):
        spokes.forget()
    recorded = decisions.record(
        _with_account_ids(report.decisions(actor=heartbeat.REAPER, now=now), place_of)
    )
    result["errors"] = [*result["errors"], *recorded]
    log.info("central sweep result", extra={"result": {k: v for k, v in result.items() if k != "hosts"}})
    if dry_run:
        return result
    count(report, stack=settings.stack, full_sweep=True)
    unreachable = sum(1 for error in report.errors if error.get("action") in ("assume-role", "sweep"))
    heartbeat.record_findings(heartbeat.REAPER, stack=settings.stack, counts={UNREACHABLE: unreachable})
    if not report.errors and not recorded:
        heartbeat.record_success(
            heartbeat.REAPER, stack=settings.stack, cloudwatch=clients("cloudwatch", None), now=now
        )
    return result


def _with_account_ids(decisions: Sequence[Decision], place_of: Mapping[str, Place]) -> list[Decision]:
    """Each decision about a host with that host's account in its details, for the one ledger."""
    named: list[Decision] = []
    for decision in decisions:
        place = place_of.get(decision.instance_id or "")
        details = {**decision.details, "account_id": place.account_id} if place else decision.details
        named.append(replace(decision, details=details))
    return named


def _with_accounts(result: dict[str, Any], place_of: Mapping[str, Place]) -> dict[str, Any]:
    """Every host row and skipped host named with its account."""
    for row in [*result["hosts"], *result["skipped"]]:
        place = place_of.get(row["instance_id"])
        if place is not None:
            row["account_id"], row["account_name"] = place.account_id, place.account_name
    return result


def _place_rows(places: Sequence[Place], report: SweepReport) -> list[dict[str, Any]]:
    """One row per account and region: swept (``failure`` None), or why not."""
    failures = {
        (error["account_id"], error["region"]): error["error"]
        for error in report.errors
        if error.get("action") in ("assume-role", "sweep")
    }
    return [
        {
            "account_id": place.account_id,
            "account_name": place.account_name,
            "region": place.region,
            "failure": failures.get((place.account_id, place.region)),
        }
        for place in places
    ]
