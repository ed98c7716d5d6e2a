"""The per-stack, per-service lease that keeps two deploys (or a deploy and a rollback or an abort) of the
same service from running at once, and keeps a run that lost it from touching the service again.

Two deploys that interleave leave a service with no serving task: each scales the colour the other
is starting. So ``deploy``, ``rollback`` and ``deploy --abort`` first take a lease in AWS, where every
engineer's run sees it: one item in the stack's guardrails DynamoDB table
(``parkbrake-<stack>-notices``, the table the sweep's notices use), keyed ``deploy-lease/<service>``
and written with conditional writes, so exactly one writer wins. The item says who holds it (user,
host, process), for which revision and operation, since when and until when, and carries the
**fence**: a number that every take (a fresh one or ``--steal-lock``) increments and nothing else
changes. The item outlives its holders (a release only removes the holder), so the fence of a
service only ever grows.

The holder confirms the lease with :meth:`DeployLease.check`, a conditional write that succeeds only
while the item still carries this run's token and fence and has not lapsed, and pushes the expiry
:data:`LEASE_FOR` ahead. It does so before every AWS write of the run (``cli/oncall/deploy/lease_guard.py``
puts each request through it) and before its waits (:class:`RenewingClock`, every
:data:`RENEW_EVERY`). A check that fails raises :class:`LeaseLost`: the run stops at once, with no
rollback (the service is the new holder's now). A lease whose holder is gone (killed, its laptop
closed) lapses at its expiry; it is never taken silently: ``--steal-lock`` takes a lapsed one after a
confirmation (or ``--yes``), and refuses one that is still being renewed.
"""

from __future__ import annotations

import getpass
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from guardrails import names
from guardrails.clock import Clock
from guardrails.errors import ParkbrakeError
from guardrails.rules.base import instant
from lambdas.aws.errors import AWS_ERRORS, describe_error

KEY = "notice"  # the table's hash key (guardrails' components/guardrail_alerting.py)
LEASE_FOR = timedelta(minutes=5)
RENEW_EVERY = timedelta(minutes=1)
# Taking the lease: the holder's fields, the fence one higher. ``expires_at`` is the table's TTL
# attribute (an older version set it on leases); a lease item is kept, so its fence never restarts.
TAKE = (
    "SET holder = :holder, operation = :operation, revision = :revision, #token = :token, "
    "started_at = :started, lease_expires_at = :expires REMOVE expires_at ADD fence :one"
)
RELEASE = "REMOVE holder, operation, revision, #token, started_at, lease_expires_at"
# Still this run's: its token and fence, not lapsed. The clause every check's write is conditioned on.
STILL_MINE = "#token = :mine AND fence = :fence AND lease_expires_at > :now"


class DeployLocked(ParkbrakeError):
    """Another run holds the service's lease (exit 1)."""


class LeaseLost(ParkbrakeError):
    """This run no longer holds the lease it took (taken over, lapsed, or not confirmable): it stops
    before its next AWS write, and rolls nothing back (exit 1)."""


def lease_key(service: str) -> str:
    return f"deploy-lease/{service}"


def this_holder() -> str:
    """Who runs this process, as the second run names it: ``ana@laptop (pid 4242)``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()} (pid {os.getpid()})"


@dataclass(frozen=True)
class HeldLease:
    """The lease as the table holds it."""

    holder: str
    operation: str
    revision: str
    started_at: datetime
    expires_at: datetime
    token: str
    fence: int

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> HeldLease:
        def text(name: str) -> str:
            return str(item.get(name, {}).get("S", "?"))

        def number(name: str) -> int:
            return int(item.get(name, {}).get("N", "0"))

        def moment(name: str) -> datetime:
            return datetime.fromtimestamp(number(name), UTC)

        return cls(
            text("holder"), text("operation"), text("revision"), moment("started_at"), moment("lease_expires_at"),
            text("token"), number("fence"),
        )  # fmt: skip

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at

    def describe(self) -> str:
        return (
            f"{self.holder} holds it for {self.operation} of {self.revision}, since {instant(self.started_at)}, "
            f"until {instant(self.expires_at)}"
        )


class DeployLease:
    """One run's hold on ``service`` of ``stack``; :meth:`acquire` first, :meth:`release` always."""

    def __init__(
        self,
        dynamodb: Any,
        *,
        stack: str,
        service: str,
        operation: str,
        revision: str,
        now: Callable[[], datetime],
        holder: str | None = None,
    ) -> None:
        self._dynamodb = dynamodb
        self.table = names.notices_table(stack)
        self.stack, self.service, self.operation, self.revision = stack, service, operation, revision
        self._now = now
        self.holder = holder or this_holder()
        self.token = uuid.uuid4().hex
        self.fence: int | None = None  # the fence this run's take wrote; None until it holds the lease
        self.renewed_at: datetime | None = None

    def _key(self) -> dict[str, Any]:
        return {KEY: {"S": lease_key(self.service)}}

    def _command(self) -> str:
        """The command that takes this lease over: the same operation, with --steal-lock."""
        base = f"parkbrake {{}} {self.service} --stack {self.stack}"
        return {
            "abort": base.format("deploy") + " --abort",
            "rollback": base.format("rollback"),
        }.get(self.operation, base.format("deploy") + f" --image ... --revision {self.revision}")

    def current(self) -> HeldLease | None:
        """The lease as the table holds it now; None when nobody holds it."""
        item = self._read()
        return HeldLease.from_item(item) if "holder" in item else None

    def _read(self) -> dict[str, Any]:
        found = self._call(
            lambda: self._dynamodb.get_item(TableName=self.table, Key=self._key(), ConsistentRead=True)
        )
        item: dict[str, Any] = found.get("Item", {})
        return item

    def refuse_if_held(self, *, steal: bool = False) -> None:
        """Raise :class:`DeployLocked` now when another run holds the lease (a stale one too, unless
        ``steal``): for a command that reads the service before it takes the lease, so that it does
        not report on a service another run is changing. :meth:`acquire` still decides."""
        held = self.current()
        now = self._now()
        if held is not None and held.token != self.token and not (steal and held.expired(now)):
            raise DeployLocked(self._locked_message(held, now, steal=steal))

    def acquire(self, *, steal: bool = False, confirm: Callable[[str], None] | None = None) -> None:
        """Take the lease, or raise :class:`DeployLocked` naming its holder and how to take over.

        ``steal`` takes a lease that has expired (its holder stopped renewing it), after ``confirm``
        (which raises to refuse); one still renewed is never taken.
        """
        now = self._now()
        try:
            self._take(now, "attribute_not_exists(holder)", {})
        except _ConditionFailed:
            held = self.current()
            if held is None:  # released between the write and the read: try once more
                return self.acquire(steal=steal, confirm=confirm)
            if not steal or not held.expired(now):
                raise DeployLocked(self._locked_message(held, now, steal=steal)) from None
            if confirm is not None:
                confirm(f"Take over the expired lease on {self.service}? {held.describe()}.")
            self._take_over(held, now)
        return None

    def _take(self, now: datetime, condition: str, values: dict[str, Any]) -> None:
        """The holder's fields written and the fence incremented, in one conditional write."""
        holding = {
            ":holder": {"S": self.holder},
            ":operation": {"S": self.operation},
            ":revision": {"S": self.revision},
            ":token": {"S": self.token},
            ":started": {"N": str(int(now.timestamp()))},
            ":expires": {"N": str(int((now + LEASE_FOR).timestamp()))},
            ":one": {"N": "1"},
        }
        answer = self._call(
            lambda: self._dynamodb.update_item(
                TableName=self.table,
                Key=self._key(),
                UpdateExpression=TAKE,
                ConditionExpression=condition,
                ExpressionAttributeNames={"#token": "token"},
                ExpressionAttributeValues={**holding, **values},
                ReturnValues="UPDATED_NEW",
            ),
            conditional=True,
        )
        self.fence = int(answer["Attributes"]["fence"]["N"])
        self.renewed_at = now

    def _locked_message(self, held: HeldLease, now: datetime, *, steal: bool) -> str:
        head = (
            f"another run holds the deploy lease on {self.service} of stack {self.stack}: {held.describe()}"
        )
        if not held.expired(now):
            tail = (
                "it is renewed while that run lasts; wait for it to finish"
                if not steal
                else "it is still being renewed, so --steal-lock will not take it; wait for it to finish"
            )
            return f"{head}; {tail} (the run's own output says how it ended)"
        return (
            f"{head}; it expired, so its holder is gone: check that no other deploy of {self.service} is "
            f"still running, then take it over with `{self._command()} --steal-lock`"
        )

    def _take_over(self, held: HeldLease, now: datetime) -> None:
        """Take exactly the lapsed lease that was read: its holder's token and expiry unchanged."""
        try:
            self._take(
                now,
                "#token = :theirs AND lease_expires_at = :their_expiry",
                {
                    ":theirs": {"S": held.token},
                    ":their_expiry": {"N": str(int(held.expires_at.timestamp()))},
                },
            )
        except _ConditionFailed:
            newer = self.current()
            raise DeployLocked(
                f"someone else took the deploy lease on {self.service} first: "
                f"{newer.describe() if newer else 'it was released'}; run the command again"
            ) from None

    def check(self, before: str) -> None:
        """Confirm this run still holds the lease, and push its expiry :data:`LEASE_FOR` ahead: one
        conditional write on this run's token and fence. Raise :class:`LeaseLost` (naming ``before``,
        what the run was about to do) when it does not, or when the table cannot say."""
        now = self._now()
        expires = now + LEASE_FOR
        try:
            self._call(
                lambda: self._dynamodb.update_item(
                    TableName=self.table,
                    Key=self._key(),
                    UpdateExpression="SET lease_expires_at = :expires",
                    ConditionExpression=STILL_MINE,
                    ExpressionAttributeNames={"#token": "token"},
                    ExpressionAttributeValues={
                        ":mine": {"S": self.token},
                        ":fence": {"N": str(self.fence or 0)},
                        ":now": {"N": str(int(now.timestamp()))},
                        ":expires": {"N": str(int(expires.timestamp()))},
                    },
                ),
                conditional=True,
            )
        except _ConditionFailed:
            raise LeaseLost(self._lost_message(before, now)) from None
        except ParkbrakeError as error:
            raise LeaseLost(
                f"could not confirm the deploy lease on {self.service} of stack {self.stack} "
                f"(lease #{self.fence}) before {before}: {error}; stopped, changing nothing more"
            ) from None
        self.renewed_at = now

    def _lost_message(self, before: str, now: datetime) -> str:
        try:
            item = self._read()
        except ParkbrakeError:
            item = {}
        held = HeldLease.from_item(item) if item else None
        if held is not None and held.fence != self.fence:
            why = f"another run took it over as lease #{held.fence}"
            if "holder" in item:
                why = (
                    f"{held.holder} took it over as lease #{held.fence} for {held.operation} of {held.revision} "
                    f"at {instant(held.started_at)}"
                )
            tail = "the service is that run's to change"
        elif held is not None and "holder" in item:
            why = f"it lapsed at {instant(held.expires_at)} while this run stalled (now {instant(now)})"
            tail = "run the same command again to resume"
        else:
            why, tail = "nobody holds it now", "run the same command again to resume"
        return (
            f"lost the deploy lease on {self.service} of stack {self.stack} (lease #{self.fence}): {why}; "
            f"stopped before {before}, changing nothing more; {tail}"
        )

    def renew_if_due(self) -> None:
        if self.renewed_at is None or self._now() - self.renewed_at >= RENEW_EVERY:
            self.check("its next wait")

    def release(self) -> None:
        """Give the lease up if it is still ours (a lease taken over is the new holder's); the item and
        its fence stay."""
        try:
            self._call(
                lambda: self._dynamodb.update_item(
                    TableName=self.table,
                    Key=self._key(),
                    UpdateExpression=RELEASE,
                    ConditionExpression="#token = :mine",
                    ExpressionAttributeNames={"#token": "token"},
                    ExpressionAttributeValues={":mine": {"S": self.token}},
                ),
                conditional=True,
            )
        except _ConditionFailed:
            return

    def _call(self, call: Callable[[], Any], *, conditional: bool = False) -> Any:
        try:
            return call()
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            if conditional and code == "ConditionalCheckFailedException":
                raise _ConditionFailed from None
            if code == "ResourceNotFoundException":
                raise ParkbrakeError(
                    f"the deploy lease lives in the DynamoDB table {self.table}, which does not exist: "
                    f"deploy stack {self.stack}'s guardrails (`pulumi up`) first"
                ) from None
            raise ParkbrakeError(
                f"could not read or write the deploy lease: {describe_error(error)}"
            ) from None
        except AWS_ERRORS as error:
            raise ParkbrakeError(
                f"could not read or write the deploy lease: {describe_error(error)}"
            ) from None


class _ConditionFailed(Exception):
    """The conditional write lost: another run holds (or just took) the lease."""


class RenewingClock:
    """The runtime's clock, confirming and renewing the lease before each wait: a deploy's waits are
    its long parts, and a lease lost while the run stood still stops it here."""

    def __init__(self, clock: Clock, lease: DeployLease) -> None:
        self._clock = clock
        self.lease = lease

    def now(self) -> datetime:
        return self._clock.now()

    def sleep(self, seconds: float) -> None:
        self.lease.renew_if_due()
        self._clock.sleep(seconds)


@contextmanager
def held(lease: DeployLease, *, steal: bool, confirm: Callable[[str], None]) -> Iterator[DeployLease]:
    """The lease for the run inside the block, released however the block ends."""
    lease.acquire(steal=steal, confirm=confirm)
    try:
        yield lease
    finally:
        lease.release()
