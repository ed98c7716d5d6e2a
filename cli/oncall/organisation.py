"""The on-call commands across the organisation: ``--accounts FILE`` or ``--org``, one run, one answer.

- **Which accounts**: c7n-org's account list (``guardrails/accounts.py``), or the organisation's
  own list read from AWS Organizations ``ListAccounts`` with the caller's credentials (the
  management account or a delegated administrator may call it: botocore's
  ``botocore/data/organizations/2016-11-28/service-2.json``, ``ListAccounts``: "This operation can be
  called only from the organization's management account or by a member account that is a delegated
  administrator"; paginated by ``NextToken``, ``paginators-1.json``). Only ``ACTIVE`` accounts are
  read (a ``SUSPENDED`` or ``PENDING_CLOSURE`` one cannot be entered). c7n-org's ``-a``, ``-t`` and
  ``--not-accounts`` narrow either list (``accounts_selected``).
- **How each is entered**: the account's role chain (from the list), or for ``--org`` the role
  named by ``--org-role`` in each member account; assumed once per account
  (``lambdas/aws/assumed.py``), every client through one shared rate limiter.
- **Where**: each account's ``regions``, else the command's regions (``--region(s)``,
  PARKBRAKE_REGIONS, AWS_REGION); c7n-org's ``all`` is every region the account has enabled, read
  with EC2 ``DescribeRegions`` in that account (its default, ``AllRegions`` false, lists the enabled
  ones: ``botocore/data/ec2/2016-11-15/service-2.json``).
- **The answer**: a value or one failure line per account and region; an account whose every region
  failed the same way (a denied or missing role) is one line, not one per region.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from guardrails.accounts import ALL_REGIONS, Account, accounts_selected, load_accounts
from guardrails.errors import InputError, ParkbrakeError

if TYPE_CHECKING:  # lambdas.aws.assumed loads botocore: imported where a run starts, not by --help
    from lambdas.aws.assumed import AccountSessions, ClientFactory, Place, PlaceOutcome

T = TypeVar("T")

# The role --org assumes in each member account unless --org-role names another: a read-only role
# the organisation deploys to every member (docs/organisation.md shows its trust and permissions).
DEFAULT_ORG_ROLE = "parkbrake-oncall"
# The exit status when an account or region could not be answered (a denied role, a denied read):
# the answer is printed, its failure lines last. Bad input stays 2.
SOME_PLACES_FAILED_EXIT = 1


@dataclass(frozen=True)
class OrganisationScope:
    """What ``--accounts FILE``/``--org`` and c7n-org's selection flags asked for."""

    accounts_file: Path | None = None
    org: bool = False
    org_role: str | None = None  # --org-role as given (None: not given, DEFAULT_ORG_ROLE with --org)
    names: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    concurrency: int | None = None  # None: lambdas.aws.assumed's DEFAULT_CONCURRENCY

    @property
    def workers(self) -> int:
        """How many accounts and regions are read at once."""
        from lambdas.aws.assumed import DEFAULT_CONCURRENCY

        return DEFAULT_CONCURRENCY if self.concurrency is None else self.concurrency

    @property
    def spans_accounts(self) -> bool:
        return self.accounts_file is not None or self.org

    def checked(self) -> OrganisationScope:
        """Itself; an InputError for flags that cannot go together."""
        if self.accounts_file is not None and self.org:
            raise InputError("--accounts and --org: give one (a c7n-org account list, or the organisation's)")
        selecting = self.names or self.tags or self.excluded
        if selecting and not self.spans_accounts:
            raise InputError(
                "--account, --tag and --not-account select from --accounts FILE or --org: add one"
            )
        if self.org_role is not None and not self.org:  # an --accounts list names each account's role
            raise InputError(
                f"--org-role {self.org_role}: the role --org assumes in each member account; add --org"
            )
        if self.org and self.tags:
            raise InputError("--tag selects by the account list's tags: use --accounts FILE for it")
        if self.concurrency is not None and self.concurrency < 1:
            raise InputError(f"--concurrency {self.concurrency}: give 1 or more")
        return self


@dataclass
class OrganisationRun:
    """One command's run across the accounts: the places to read and the sessions that read them."""

    places: list[Place]
    sessions: AccountSessions
    concurrency: int
    accounts: int
    failures: list[str]  # accounts whose regions could not even be listed (``all``)

    def across(self, work: Callable[[Place, ClientFactory], T]) -> list[PlaceOutcome[T]]:
        from lambdas.aws.assumed import across_places

        return across_places(self.places, work, sessions=self.sessions, concurrency=self.concurrency)


def organisation_run(
    scope: OrganisationScope, default_regions: Sequence[str], caller: ClientFactory
) -> OrganisationRun:
    """The accounts of ``scope`` (``caller``'s clients read Organizations), each in its regions."""
    from lambdas.aws.assumed import AccountSessions, places_of

    accounts = scope_accounts(scope, caller)
    sessions = AccountSessions()
    expanded, failures = _expand_all_regions(accounts, default_regions, sessions, scope.workers)
    return OrganisationRun(
        places_of(expanded, default_regions), sessions, scope.workers, len(accounts), failures
    )


def scope_accounts(scope: OrganisationScope, caller: ClientFactory) -> tuple[Account, ...]:
    """The accounts ``scope`` asked for: its list (the file, or the organisation's read with
    ``caller``'s clients) narrowed by c7n-org's selection flags; what cannot go together refused."""
    scope.checked()
    return accounts_selected(_accounts_of(scope, caller), scope.names, scope.tags, scope.excluded)


def _accounts_of(scope: OrganisationScope, caller: ClientFactory) -> tuple[Account, ...]:
    if scope.accounts_file is not None:
        try:
            text = scope.accounts_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            raise InputError(f"--accounts {scope.accounts_file}: cannot read it ({reason})") from None
        return load_accounts(text, str(scope.accounts_file))
    return organisation_accounts(caller, scope.org_role or DEFAULT_ORG_ROLE)


def organisation_accounts(caller: ClientFactory, role: str) -> tuple[Account, ...]:
    """The organisation's ACTIVE accounts, each entered through ``role`` (a name or an ARN template
    with ``{account_id}``), named as Organizations names them."""
    from botocore.exceptions import ClientError

    from lambdas.aws.errors import describe_error

    organizations = caller("organizations", None)
    try:
        pages = organizations.get_paginator("list_accounts").paginate()
        listed = [account for page in pages for account in page["Accounts"]]
    except ClientError as error:
        raise ParkbrakeError(
            f"--org: cannot list the organisation's accounts ({describe_error(error)}); run it as the "
            "management account or a delegated administrator, or pass --accounts FILE"
        ) from None
    active = [account for account in listed if account.get("Status", "ACTIVE") == "ACTIVE"]
    if not active:
        raise ParkbrakeError(
            "--org: cannot list the organisation's accounts (ListAccounts lists no active account); "
            "run it as the management account or a delegated administrator, or pass --accounts FILE"
        )
    return tuple(
        Account(
            account_id=account["Id"],
            name=account.get("Name") or account["Id"],
            role_chain=(member_role_arn(role, account["Id"], account.get("Arn", "")),),
            email=account.get("Email"),
        )
        for account in active
    )


def member_role_arn(role: str, account_id: str, account_arn: str) -> str:
    """``--org-role`` in one account: a name in that account (its partition from ``account_arn``, any
    ARN of the organisation), or an ARN with ``{account_id}`` filled in. An ARN of another account is
    refused: every member would be entered as that one account and answered as if it were each."""
    if role.startswith("arn:"):
        arn = role.replace("{account_id}", account_id)
        parts = arn.split(":")
        if len(parts) != 6 or parts[4] != account_id:
            raise InputError(
                f"--org-role {role}: not a role in account {account_id}; give the role's name, or its ARN "
                "with {account_id} (arn:aws:iam::{account_id}:role/NAME)"
            )
        return arn
    partition = account_arn.split(":")[1] if account_arn.count(":") >= 2 else "aws"
    return f"arn:{partition}:iam::{account_id}:role/{role}"


def _expand_all_regions(
    accounts: Sequence[Account], default_regions: Sequence[str], sessions: AccountSessions, concurrency: int
) -> tuple[list[Account], list[str]]:
    """Accounts whose regions are ``all`` get the regions they have enabled; one that cannot say is
    a failure line and is left out."""
    from lambdas.aws.assumed import Place, access_of, across_places

    expanding = [account for account in accounts if ALL_REGIONS in (account.regions or default_regions)]
    if not expanding:
        return list(accounts), []
    home = default_regions[0] if default_regions and default_regions[0] != ALL_REGIONS else None
    places = [
        Place(account.account_id, account.name, home or "us-east-1", access_of(account))
        for account in expanding
    ]

    def enabled(place: Place, clients: ClientFactory) -> tuple[str, ...]:
        answer = clients("ec2", place.region).describe_regions()
        return tuple(sorted(region["RegionName"] for region in answer["Regions"]))

    found = {
        outcome.place.account_id: outcome
        for outcome in across_places(places, enabled, sessions=sessions, concurrency=concurrency)
    }
    kept, failures = [], []
    for account in accounts:
        outcome = found.get(account.account_id)
        if outcome is None:
            kept.append(account)
        elif outcome.value is None:
            failures.append(f"{account_label(outcome.place)}: cannot list its regions: {outcome.failure}")
        else:
            kept.append(replace(account, regions=outcome.value))
    return kept, failures


def account_label(place: Place) -> str:
    """An account as a failure line names it: its name and, when that is not the id, the id."""
    return place.account_shown


def echo_failures(lines: Sequence[str]) -> None:
    """Each ``error: <line>``, wrapped as :func:`echo_wrapped` wraps."""
    echo_wrapped([f"error: {line}" for line in lines])


def echo_wrapped(lines: Sequence[str]) -> None:
    """Each line wrapped at the terminal's width at spaces only, so that an ARN, an account id or a
    parameter's name is moved whole to the next line, never cut by the terminal."""
    import textwrap

    import click

    from cli.console import console

    width = console().width
    for line in lines:
        wrapped = textwrap.wrap(
            line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )
        click.echo("\n".join(wrapped))


def account_failures(outcomes: Sequence[PlaceOutcome[Any]]) -> list[str]:
    """One line per failed place, ``<account> <region>: <why>``, except that an account whose every
    region failed with the same line (its role denied or missing) is one line, ``<account>: <why>``."""
    by_account: dict[str, list[PlaceOutcome[Any]]] = {}
    for outcome in outcomes:
        by_account.setdefault(outcome.place.account_id, []).append(outcome)
    lines: list[str] = []
    for places in by_account.values():
        failed = [outcome for outcome in places if outcome.failure is not None]
        reasons = {outcome.failure for outcome in failed}
        if failed and len(failed) == len(places) and len(reasons) == 1:
            lines.append(f"{account_label(failed[0].place)}: {failed[0].failure}")
        else:
            lines.extend(f"{account_label(o.place)} {o.place.region}: {o.failure}" for o in failed)
    return lines
