"""``park --now`` / ``unpark --now`` across the organisation: each account's stack parked in each of
its regions exactly as one is parked today (:func:`park_now`, :func:`unpark_now`), with that
account's clients. A region where the account has no such stack is said so, not an error; a denied
role is the account's failure line; every other account still goes ahead."""

from __future__ import annotations

from dataclasses import dataclass

from cli.oncall.organisation import OrganisationRun
from cli.oncall.park.actions import EmergencyResult
from cli.oncall.park.emergency import park_now, unpark_now
from cli.oncall.park.records import ParkedBy
from guardrails.errors import ParkbrakeError
from lambdas.aws.assumed import ClientFactory, Place, PlaceOutcome


@dataclass(frozen=True)
class PlaceParking:
    place: Place
    result: EmergencyResult | None  # None: the stack is not deployed there
    absent: str | None = None  # why not: the unknown stack's line


def park_across(
    run: OrganisationRun,
    stack: str,
    *,
    parked: bool,
    dry_run: bool,
    config_parked: bool | None,
    parked_by: ParkedBy | None,
    force: bool = False,
) -> list[PlaceOutcome[PlaceParking]]:
    """Park (or unpark) ``stack`` in every account and region at once; per place its result."""

    def place_parking(place: Place, clients: ClientFactory) -> PlaceParking:
        try:
            if parked:
                result = park_now(
                    stack, region=place.region, clients=clients, dry_run=dry_run,
                    config_parked=config_parked, parked_by=parked_by,
                )  # fmt: skip
            else:
                result = unpark_now(
                    stack, region=place.region, clients=clients, dry_run=dry_run,
                    config_parked=config_parked, force=force,
                )  # fmt: skip
        except ParkbrakeError as error:  # the stack is not deployed in this account and region
            return PlaceParking(place, None, str(error).splitlines()[0])
        return PlaceParking(place, result)

    return run.across(place_parking)
