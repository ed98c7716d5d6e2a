"""The organisation's spokes as the hub reads them: its SSM parameter (``PARKBRAKE_SPOKES_PARAMETER``,
written by components/org_hub.py from stacks/org_program.py's ``spokes_document``), for the central
sweep (lambdas/engines/org_sweeping.py), for the hub's meter, which takes the events of the
spokes' accounts (lambdas/engines/metering.py), and for the hub's budget and reconciler, which list
and stop hosts in them (lambdas/engines/budgeting.py, lambdas/engines/reconciling.py). One reading
serves them all.

With ``spokes: stacks`` the document lists the role ARN of every account and region,
``arn:aws:iam::<account>:role/parkbrake-<stack>-spoke-<region>`` (guardrails/names.py); with
``spokes: stackset`` the OUs, whose accounts Organizations lists (``ListAccountsForParent`` and
``ListOrganizationalUnitsForParent``, a StackSet deploying to an OU's children too), in each of the
document's regions, less the management account (``DescribeOrganization``), to which a
service-managed StackSet never deploys (botocore's ``organizations/2016-11-28/service-2.json``:
``ListAccountsForParent`` "can be called only from the organization's management account or by a
member account that is a delegated administrator").
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from guardrails import names
from guardrails.accounts import REGION_NAME
from guardrails.settings import Settings
from lambdas.aws.assumed import AccountAccess, ClientFactory, Place
from lambdas.aws.errors import AWS_ERRORS, describe_error

log = logging.getLogger(__name__)
ROLE_ARN = re.compile(r"arn:(?P<partition>aws[a-z-]*):iam::(?P<account>\d{12}):role/(?P<name>[\w+=,.@/-]+)")
# How long a container trusts the spokes it read: three sweeps at the default rate.
SPOKES_MAX_AGE = timedelta(minutes=15)
# An account the list does not hold (one that just joined a StackSet's OU) is looked for again at
# most this often: its events are refused, not retried, until then (the hub bus's archive replays them).
UNKNOWN_ACCOUNT_RECHECK = timedelta(minutes=5)


class SpokeListError(ValueError):
    """The hub's list of spokes cannot be read or makes no sense; one line saying which."""


def spoke_places(document: object, stack: str, organizations: Any = None) -> list[Place]:
    """Every account and region of the hub's spokes document (see the module's text)."""
    if not isinstance(document, Mapping):
        raise SpokeListError("the spokes parameter is not a JSON object")
    roles = _listed(document, "roles")
    if roles:
        # A role listed twice is one place: swept, counted and reported once.
        return list(dict.fromkeys(_place_of_role(arn, stack) for arn in roles))
    units, regions = _listed(document, "organizational_units"), _listed(document, "regions")
    if not units:
        raise SpokeListError("the spokes parameter lists neither roles nor organizational_units")
    bad = [region for region in regions if not isinstance(region, str) or not REGION_NAME.fullmatch(region)]
    if bad or not regions:
        # No region would sweep no place at all, and the heartbeat would still say all is well.
        shown = repr(bad[0])[:40] if bad else "none"
        raise SpokeListError(f"the spokes parameter's regions must be AWS region names, not {shown}")
    if organizations is None:
        raise SpokeListError("spokes: stackset needs Organizations to list the OUs' accounts")
    partition = str(document.get("partition", "aws"))
    return [
        Place(account_id, name, region, _access(names.spoke_role_arn(stack, account_id, region, partition)))
        for account_id, name in accounts_in_units(organizations, [str(unit) for unit in units])
        for region in dict.fromkeys(regions)
    ]


def _listed(document: Mapping[Any, Any], key: str) -> list[Any]:
    """The document's list under ``key`` ([] when absent or empty); anything else is refused."""
    value = document.get(key) or []
    if not isinstance(value, list):
        raise SpokeListError(f"the spokes parameter's {key} must be a list, not {type(value).__name__}")
    return value


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
    ``max_age`` has passed (a spoke added to the organisation is swept within it), again on the
    sweep after any place failed (a spoke removed from the list is never reported twice), and again
    when the meter meets an account the list does not hold, at most once per ``recheck``."""

    def __init__(
        self,
        max_age: timedelta = SPOKES_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
        recheck: timedelta = UNKNOWN_ACCOUNT_RECHECK,
    ) -> None:
        self.max_age, self.clock, self.recheck = max_age, clock, recheck
        self._places: list[Place] | None = None
        self._read_at = 0.0

    def places(self, settings: Settings, clients: ClientFactory) -> list[Place]:
        if self._places is None or self.clock() - self._read_at >= self.max_age.total_seconds():
            self._places, self._read_at = read_spokes(settings, clients), self.clock()
        return self._places

    def accounts(self, settings: Settings, clients: ClientFactory, *, expecting: str = "") -> frozenset[str]:
        """The spokes' account ids; read again first when ``expecting`` is not among them and the
        list is at least ``recheck`` old (an account that just joined a StackSet's OU)."""
        known = frozenset(place.account_id for place in self.places(settings, clients))
        if (
            expecting
            and expecting not in known
            and self.clock() - self._read_at >= self.recheck.total_seconds()
        ):
            self.forget()
            known = frozenset(place.account_id for place in self.places(settings, clients))
        return known

    def forget(self) -> None:
        self._places = None

    def known_places(self) -> tuple[tuple[str, str], ...]:
        """``(account, region)`` of every spoke as last read, without reading (none before the first)."""
        return tuple((place.account_id, place.region) for place in self._places or ())


@dataclass(frozen=True)
class MemberReach:
    """What a hub guardrail's own run reaches (the budget's, the reconciler's): ``settings`` with the
    spokes' accounts among its member accounts, every spoke's ``(account, region)``, and ``error``,
    one line, when the list could not be read."""

    settings: Settings
    spoke_places: tuple[tuple[str, str], ...] = ()
    error: str | None = None


def member_reach(settings: Settings, clients: ClientFactory, spokes: SpokeList) -> MemberReach:
    """The member accounts for a run that no account's event started: with a spokes parameter, its
    spokes besides the listed ``PARKBRAKE_MEMBER_ACCOUNTS``. A list that cannot be read is the run's
    error (logged, and the caller withholds its heartbeat); the run goes on with the listed accounts,
    so the hub's own account and the others are judged all the same."""
    if settings.spokes_parameter is None:
        return MemberReach(settings)
    try:
        places = spokes.places(settings, clients)
    except SpokeListError as error:
        log.error("cannot read the member accounts: %s", error)
        return MemberReach(settings, error=f"cannot read the member accounts: {error}")
    learned = frozenset(place.account_id for place in places)
    return MemberReach(
        replace(settings, member_accounts=(settings.member_accounts or frozenset()) | learned),
        tuple((place.account_id, place.region) for place in places),
    )


def with_spoke_accounts(
    settings: Settings, clients: ClientFactory, spokes: SpokeList, *, account: str, own_account: str | None
) -> Settings:
    """``settings`` with the spokes' accounts among its member accounts, when it names a spokes
    parameter (the hub's meter): so the meter takes their events and reads their hosts, and a budget
    stop reaches them. ``account`` is the event's: one the list lacks has it read again (see
    :meth:`SpokeList.accounts`). An unreadable list raises :class:`SpokeListError` for a member
    account's event (EventBridge delivers it again); for the hub's own it is logged, and the event is
    metered with the member accounts the stack file listed."""
    if settings.spokes_parameter is None:
        return settings
    listed = settings.member_accounts or frozenset()
    own = account in ("", own_account)
    try:
        learned = spokes.accounts(settings, clients, expecting="" if own or account in listed else account)
    except SpokeListError as error:
        if not own:
            raise
        log.error("cannot read the member accounts: %s", error)
        return settings
    return replace(settings, member_accounts=listed | learned)
