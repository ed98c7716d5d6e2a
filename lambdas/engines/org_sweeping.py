"""The organisation's sweep, run centrally by the hub's reaper (``sweep: central``, docs/organisation.md).

The hub reads which spokes there are from its SSM parameter (``PARKBRAKE_SPOKES_PARAMETER``, written
by components/org_hub.py from stacks/org_program.py's ``spokes_document``): with ``spokes: stacks``
the role ARN of every account and region, ``arn:aws:iam::<account>:role/parkbrake-<stack>-spoke-<region>``
(guardrails/names.py); with ``spokes: stackset`` the OUs, whose accounts Organizations lists
(``ListAccountsForParent`` and ``ListOrganizationalUnitsForParent``, a StackSet deploying to an OU's
children too), in each of the document's regions, less the management account, to which a
service-managed StackSet never deploys.

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

import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from guardrails import names
from guardrails.accounts import REGION_NAME
from guardrails.decisions import Decision
from guardrails.settings import Settings
from lambdas.aws import heartbeat
from lambdas.aws.assumed import (
    AccountAccess,
    AccountSessions,
    AssumeFailed,
    Place,
    PlaceOutcome,
    across_places,
)
from lambdas.aws.deadline_schedules import HostPlace
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.environment import ClientFactory
from lambdas.aws.errors import AWS_ERRORS, describe_error
from lambdas.aws.notices import publish_notices
from lambdas.aws.serving_rotation import RotationOutcome
from lambdas.aws.spoke_clients import clients_in_place
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
ROLE_ARN = re.compile(r"arn:(?P<partition>aws[a-z-]*):iam::(?P<account>\d{12}):role/(?P<name>[\w+=,.@/-]+)")
# How long a container trusts the spokes it read: three sweeps at the default rate.
SPOKES_MAX_AGE = timedelta(minutes=15)
UNREACHABLE = "unreachable-spoke"  # the finding counted for every place whose role failed


class SpokeListError(ValueError):
    """The hub's list of spokes cannot be read or makes no sense; one line saying which."""


def spoke_places(document: object, stack: str, organizations: Any = None) -> list[Place]:
    """Every account and region the hub sweeps, from its spokes document (see the module's text)."""
    if not isinstance(document, Mapping):
        raise SpokeListError("the spokes parameter is not a JSON object")
    roles = document.get("roles") or []
    if roles:
        return [_place_of_role(arn, stack) for arn in roles]
    units, regions = document.get("organizational_units") or [], document.get("regions") or []
    if not units:
        raise SpokeListError("the spokes parameter lists neither roles nor organizational_units")
    if organizations is None:
        raise SpokeListError("spokes: stackset needs Organizations to list the OUs' accounts")
    partition = str(document.get("partition", "aws"))
    return [
        Place(account_id, name, region, _access(names.spoke_role_arn(stack, account_id, region, partition)))
        for account_id, name in accounts_in_units(organizations, units)
        for region in regions
    ]


def _place_of_role(arn: object, stack: str) -> Place:
    """A spoke role names its account in its ARN and its region in its name (guardrails/names.py)."""
    match = ROLE_ARN.fullmatch(arn) if isinstance(arn, str) else None
    stem = names.spoke_role(stack, "")
    region = match["name"].removeprefix(stem) if match and match["name"].startswith(stem) else ""
    if match is None or REGION_NAME.fullmatch(region) is None:
        raise SpokeListError(
            f"{arn!r} is not a spoke role of stack {stack} ({names.spoke_role(stack, '<region>')})"
        )
    return Place(match["account"], match["account"], region, _access(str(arn)))


def _access(role_arn: str) -> AccountAccess:
    account = ROLE_ARN.fullmatch(role_arn)
    return AccountAccess(account["account"] if account else "", (role_arn,))


def accounts_in_units(organizations: Any, units: Sequence[str]) -> list[tuple[str, str]]:
    """``(account id, name)`` of every active account in ``units`` and the OUs below them, once each,
    the management account left out (a service-managed StackSet never deploys to it)."""
    management = organizations.describe_organization()["Organization"]["MasterAccountId"]
    found: dict[str, str] = {}
    waiting = list(units)
    while waiting:
        parent = waiting.pop(0)
        for page in organizations.get_paginator("list_accounts_for_parent").paginate(ParentId=parent):
            for account in page["Accounts"]:
                if account.get("Status", "ACTIVE") == "ACTIVE" and account["Id"] != management:
                    found.setdefault(account["Id"], account.get("Name") or account["Id"])
        children = organizations.get_paginator("list_organizational_units_for_parent")
        for page in children.paginate(ParentId=parent):
            waiting += [unit["Id"] for unit in page["OrganizationalUnits"]]
    return list(found.items())


def read_spokes(settings: Settings, clients: ClientFactory) -> list[Place]:
    """The places of the hub's spokes parameter, read in the hub's own account and region."""
    assert settings.spokes_parameter is not None
    stack = settings.require_stack()
    try:
        value = clients("ssm", None).get_parameter(Name=settings.spokes_parameter)["Parameter"]["Value"]
    except AWS_ERRORS as error:
        raise SpokeListError(f"cannot read {settings.spokes_parameter}: {describe_error(error)}") from None
    try:
        document = json.loads(value)
    except json.JSONDecodeError as error:
        raise SpokeListError(f"{settings.spokes_parameter} is not JSON: {error}") from None
    needs_organizations = isinstance(document, Mapping) and not document.get("roles")
    try:
        return spoke_places(document, stack, clients("organizations", None) if needs_organizations else None)
    except AWS_ERRORS as error:
        raise SpokeListError(f"cannot list the OUs' accounts: {describe_error(error)}") from None


class SpokeList:
    """The hub's spokes, as a warm Lambda container keeps them: read on its first run, again once
    ``max_age`` has passed (a spoke added to the organisation is swept within it), and again on the
    run after any place failed (a spoke removed from the list is never reported twice)."""

    def __init__(
        self, max_age: timedelta = SPOKES_MAX_AGE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_age, self.clock = max_age, clock
        self._places: list[Place] | None = None
        self._read_at = 0.0

    def places(self, settings: Settings, clients: ClientFactory) -> list[Place]:
        if self._places is None or self.clock() - self._read_at >= self.max_age.total_seconds():
            self._places, self._read_at = read_spokes(settings, clients), self.clock()
        return self._places

    def forget(self) -> None:
        self._places = None


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
