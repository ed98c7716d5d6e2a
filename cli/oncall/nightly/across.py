"""``parkbrake schedule list`` across the organisation: the stack's schedules in every account and
region (its schedule group, read as ``schedule list`` reads it, with that account's clients), the
account beside every schedule; an account or region without an answer is one line. A place without
the stack's schedule group has no schedules: not an error (not every account runs every stack)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cli.oncall.nightly.schedules import Schedule, closed_days_of, list_schedules
from cli.oncall.organisation import OrganisationRun, account_failures, account_label
from guardrails.closed_days import ClosedDays
from guardrails.errors import ParkbrakeError
from lambdas.aws.assumed import ClientFactory, Place


@dataclass(frozen=True)
class PlaceSchedules:
    account: str
    region: str
    schedules: list[Schedule]
    calendars: dict[str, ClosedDays]
    problem: str | None = None  # a calendar that could not be read: its next runs shown without it


@dataclass
class OrganisationSchedules:
    accounts: int
    places: list[PlaceSchedules] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def as_dict(self, now: datetime) -> dict[str, Any]:
        return {
            "accounts": self.accounts,
            "schedules": [
                {"account": place.account, "region": place.region,
                 **item.as_dict(now, place.calendars.get(item.calendar or ""))}
                for place in self.places
                for item in place.schedules
            ],
            "errors": self.errors,
        }  # fmt: skip


def organisation_schedules(run: OrganisationRun, stack: str) -> OrganisationSchedules:
    """The stack's schedules in every account and region at once."""

    def place_schedules(place: Place, clients: ClientFactory) -> PlaceSchedules:
        schedules = list_schedules(clients("scheduler", place.region), stack)
        try:
            calendars = closed_days_of(schedules, clients("ssm", place.region)) if schedules else {}
        except ParkbrakeError as error:
            problem = f"{account_label(place)} {place.region}: {error}"
            return PlaceSchedules(place.account_name, place.region, schedules, {}, problem)
        return PlaceSchedules(place.account_name, place.region, schedules, calendars)

    outcomes = run.across(place_schedules)
    found = OrganisationSchedules(run.accounts)
    found.places = [outcome.value for outcome in outcomes if outcome.value is not None]
    found.errors = run.failures + account_failures(outcomes)
    found.errors += [place.problem for place in found.places if place.problem]
    return found
