"""``parkbrake status`` across the organisation: each account and region read as one region is read
alone (:func:`read_region`, with that account's clients), merged into one report whose hosts, stopped
hosts and stacks carry their account; an account or region without an answer is an error line."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from cli.oncall.fleet.status import FleetStatus, LedgerSource, RegionPart, merge_parts, read_region
from cli.oncall.organisation import OrganisationRun, account_failures, account_label
from guardrails.settings import Settings
from lambdas.aws.assumed import ClientFactory, Place


def organisation_status(
    run: OrganisationRun,
    *,
    stack: str | None,
    settings: Settings,
    now: datetime,
    ledger: LedgerSource | None = None,
) -> FleetStatus:
    """Every account in each of its regions at once (``run``'s concurrency, one shared rate)."""

    def place_status(place: Place, clients: ClientFactory) -> RegionPart:
        return _stamped(read_region(place.region, stack, clients, settings, now), place)

    outcomes = run.across(place_status)
    regions = list(dict.fromkeys(place.region for place in run.places))
    status = FleetStatus(now=now, regions=regions, accounts=run.accounts)
    merge_parts(status, [outcome.value for outcome in outcomes if outcome.value is not None])
    status.errors += run.failures + account_failures(outcomes)
    if ledger is not None:
        status.ledger = ledger(sorted({host.host.tenant for host in status.hosts if host.host.tenant}))
    return status


def _stamped(part: RegionPart, place: Place) -> RegionPart:
    """``part`` with its account beside every host and stack, and named in every error line."""
    account, label = place.account_name, account_label(place)
    part.hosts = [replace(host, account=account) for host in part.hosts]
    part.stopped = [replace(stopped, account=account) for stopped in part.stopped]
    part.stacks = [replace(stack, account=account) for stack in part.stacks]
    part.errors = [f"{label} {error}" for error in part.errors]
    part.unlisted_regions = [f"{label} {region}" for region in part.unlisted_regions]
    return part
