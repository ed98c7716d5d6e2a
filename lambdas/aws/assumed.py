"""Clients in other accounts of the organisation, through assumed roles, at one shared rate.

Used by the on-call commands that span the organisation (``--accounts FILE``, ``--org``) and by the
hub's guardrails (the central sweep, the meter's lookups of a spoke's hosts).

- **A role chain**, assumed in order, each hop with the credentials of the one before, the account's
  ``external_id`` on every hop: c7n-org's ``get_session`` (cloud-custodian
  ``tools/c7n_org/c7n_org/cli.py``, c7n-org 0.6.52) and ``c7n/credentials.py``'s
  ``assumed_session`` (c7n 0.9.53). The credentials refresh themselves before they expire (botocore's
  ``RefreshableCredentials``, as c7n does), so a long run never fails on an hour-old session.
- **Once per account, not per region**: c7n-org assumes the role again for every region it runs
  in; an IAM role and its credentials are global, so here every region of an account shares one
  session (fewer STS calls, and STS's quota is the *caller's* account's, shared by every account's
  assumption).
- **One rate for the whole run.** botocore's adaptive retry mode gives each client its own token
  bucket (``botocore/retries/adaptive.py``, ``register_retry_handler``), so 150 clients back off
  without knowing of each other (c7n-org's throttling reports, cloud-custodian #1813 and #7641).
  Here the clients use the standard retry mode and every one of them sends through the same
  ``ClientRateLimiter`` (botocore's own CUBIC limiter, built as ``register_retry_handler`` builds
  it): a throttle anywhere lowers the rate everywhere, and the rate recovers for all together.
- **A failure is an answer, not a crash**: :func:`across_places` runs one piece of work per account
  and region side by side and returns, for each place, its value or one line saying why it has none
  (a role that is missing or denied, a region the account has not enabled); the other places are
  still answered.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from botocore.config import Config
from botocore.credentials import RefreshableCredentials
from botocore.exceptions import BotoCoreError, ClientError
from botocore.retries import adaptive, bucket, standard, throttling

from guardrails.accounts import ALL_REGIONS, Account
from guardrails.settings import aws_region
from lambdas.clients import RETRIES, new_session

ClientFactory = Callable[[str, str | None], Any]
T = TypeVar("T")

SESSION_NAME = "parkbrake"
# Standard retries (throttling and transient errors retried with jittered backoff); the rate itself
# is the shared limiter's, not a per-client bucket's.
SHARED_RATE_RETRIES = RETRIES.merge(Config(retries={"mode": "standard", "max_attempts": 8}))
# How many accounts and regions are read at once: enough to hide each call's round trip, few enough
# that a 170-account organisation does not open 500 connections from one laptop.
DEFAULT_CONCURRENCY = 16


class SharedRateLimit:
    """botocore's adaptive client rate limiter, one for every client it is attached to."""

    def __init__(self) -> None:
        clock = bucket.Clock()
        self.limiter = adaptive.ClientRateLimiter(
            rate_adjustor=throttling.CubicCalculator(starting_max_rate=0, start_time=clock.current_time()),
            rate_clocker=adaptive.RateClocker(clock),
            token_bucket=bucket.TokenBucket(max_rate=1, clock=clock),
            throttling_detector=standard.ThrottlingErrorDetector(
                retry_event_adapter=standard.RetryEventAdapter()
            ),
            clock=clock,
        )

    def attach(self, client: Any) -> Any:
        """``client``, its every request sent through the shared bucket and its every answer counted."""
        client.meta.events.register("before-send", self.limiter.on_sending_request)
        client.meta.events.register("needs-retry", self.limiter.on_receiving_response)
        return client


@dataclass(frozen=True)
class AccountAccess:
    """How to reach one account: a role chain (ARNs, assumed in order) or a named profile."""

    account_id: str
    role_chain: tuple[str, ...] = ()
    external_id: str | None = None
    profile: str | None = None


class AssumeFailed(Exception):
    """A role of an account's chain could not be assumed; the message is one line for the answer."""


class AccountSessions:
    """Sessions and clients per account for one run (a command, or one invocation of a hub Lambda)."""

    def __init__(
        self,
        *,
        rate_limit: SharedRateLimit | None = None,
        session_name: str = SESSION_NAME,
        region: str | None = None,
    ) -> None:
        self.rate_limit = rate_limit or SharedRateLimit()
        self.session_name = session_name
        self.region = region or aws_region(os.environ)  # where STS is called
        self._sessions: dict[AccountAccess, Any] = {}  # Any: service names are runtime values
        self._clients: dict[tuple[AccountAccess, str, str | None], Any] = {}
        self._locks: dict[AccountAccess, threading.Lock] = {}
        self._guard = threading.Lock()

    def clients(self, access: AccountAccess) -> ClientFactory:
        """A client factory ``(service, region)`` acting in ``access``'s account; the role chain is
        assumed on the first client asked for (AssumeFailed then, one line naming the role)."""

        def client_of(service: str, region: str | None = None) -> Any:
            key = (access, service, region)
            with self._lock_of(access):
                if key not in self._clients:
                    made = self._session(access).client(
                        service, region_name=region, config=SHARED_RATE_RETRIES
                    )
                    self._clients[key] = self.rate_limit.attach(made)
                return self._clients[key]

        return client_of

    def _lock_of(self, access: AccountAccess) -> threading.Lock:
        with self._guard:  # regions of one account wait for one assumption, other accounts do not
            return self._locks.setdefault(access, threading.Lock())

    def _session(self, access: AccountAccess) -> Any:
        if access not in self._sessions:
            self._sessions[access] = self._new_session(access)
        return self._sessions[access]

    def _new_session(self, access: AccountAccess) -> Any:
        if access.profile:
            session = new_session()
            session._session.set_config_variable("profile", access.profile)
            return session
        session = new_session()
        for role_arn in access.role_chain:
            session = self._assumed(session, role_arn, access.external_id)
        return session

    def _assumed(self, caller: Any, role_arn: str, external_id: str | None) -> Any:
        sts = self.rate_limit.attach(
            caller.client("sts", region_name=self.region, config=SHARED_RATE_RETRIES)
        )
        parameters = {"RoleArn": role_arn, "RoleSessionName": self.session_name}
        if external_id is not None:
            parameters["ExternalId"] = external_id

        def fetch() -> dict[str, str]:
            try:
                credentials = sts.assume_role(**parameters)["Credentials"]
            except ClientError as error:
                raise AssumeFailed(f"cannot assume {role_arn}: {_error_line(error)}") from error
            return {
                "access_key": credentials["AccessKeyId"],
                "secret_key": credentials["SecretAccessKey"],
                "token": credentials["SessionToken"],
                "expiry_time": credentials["Expiration"].isoformat(),
            }

        refreshable = RefreshableCredentials.create_from_metadata(
            metadata=fetch(), refresh_using=fetch, method="sts-assume-role"
        )
        assumed: Any = new_session()
        assumed._session._credentials = refreshable  # botocore has no public setter; c7n does the same
        return assumed


@dataclass(frozen=True)
class Place:
    """One account and region of a run: what a line of the answer names."""

    account_id: str
    account_name: str
    region: str
    access: AccountAccess

    @property
    def account_shown(self) -> str:
        """The account as a line names it: its name and, when that is not the id, the id."""
        if self.account_name == self.account_id:
            return self.account_name
        return f"{self.account_name} ({self.account_id})"

    @property
    def label(self) -> str:
        return f"{self.account_shown} {self.region}"


@dataclass(frozen=True)
class PlaceOutcome(Generic[T]):
    place: Place
    value: T | None = None
    failure: str | None = None  # one line: why this place has no answer


def access_of(account: Account) -> AccountAccess:
    """How to reach an account of the organisation's list (guardrails/accounts.py)."""
    return AccountAccess(account.account_id, account.role_chain, account.external_id, account.profile)


def places_of(accounts: Iterable[Account], default_regions: Sequence[str]) -> list[Place]:
    """Every account in each of its regions (``default_regions`` where the list gives none), in the
    list's order. An account's ``all`` is the caller's to expand first (it needs DescribeRegions in
    that account): here it is refused, so it never reaches AWS as a region name."""
    places: list[Place] = []
    for account in accounts:
        regions = account.regions or tuple(default_regions)
        if ALL_REGIONS in regions:
            raise ValueError(
                f"account {account.name}'s regions [all] must be expanded before its places are made"
            )
        places.extend(
            Place(account.account_id, account.name, region, access_of(account)) for region in regions
        )
    return places


def across_places(
    places: Sequence[Place],
    work: Callable[[Place, ClientFactory], T],
    *,
    sessions: AccountSessions,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> list[PlaceOutcome[T]]:
    """``work(place, clients)`` for every place, ``concurrency`` at a time, in daemon threads (Ctrl-C
    ends the command even while a call waits on the network); outcomes in the order of ``places``.

    AWS's errors (a denied or missing role, an access-denied read, an endpoint that cannot be
    reached) become the place's failure line; anything else is a bug and is raised."""
    outcomes: list[PlaceOutcome[T] | None] = [None] * len(places)
    bugs: list[BaseException] = []
    waiting: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in range(len(places)):
        waiting.put(index)

    def worker() -> None:
        while True:
            try:
                index = waiting.get_nowait()
            except queue.Empty:
                return
            place = places[index]
            try:
                outcomes[index] = PlaceOutcome(place, value=work(place, sessions.clients(place.access)))
            except AssumeFailed as failure:
                outcomes[index] = PlaceOutcome(place, failure=str(failure))
            except (ClientError, BotoCoreError) as error:
                outcomes[index] = PlaceOutcome(place, failure=_error_line(error))
            except BaseException as error:  # handed to the caller's thread
                bugs.append(error)
                return

    threads = [
        threading.Thread(target=worker, name=f"places-{number}", daemon=True)
        for number in range(max(1, min(concurrency, len(places))))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if bugs:
        raise bugs[0]
    return [outcome for outcome in outcomes if outcome is not None]


def failures_of(outcomes: Iterable[PlaceOutcome[Any]]) -> list[str]:
    """One line per place without an answer: ``<account> <region>: <why>``."""
    return [
        f"{outcome.place.label}: {outcome.failure}" for outcome in outcomes if outcome.failure is not None
    ]


def _error_line(error: BaseException) -> str:
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "error")
        message = " ".join(str(error.response.get("Error", {}).get("Message", "")).split())
        return f"{code}: {message}" if message else str(code)
    return " ".join(str(error).split())
