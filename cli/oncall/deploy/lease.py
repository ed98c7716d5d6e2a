"""The per-stack, per-service lease that keeps two deploys (or a deploy and a rollback or an abort) of the
same service from running at once.

Two deploys that interleave leave a service with no serving task: each scales the colour the other
is starting. So ``deploy``, ``rollback`` and ``deploy --abort`` first take a lease in AWS, where every
engineer's run sees it: one item in the stack's guardrails DynamoDB table
(``parkbrake-<stack>-notices``, the table the sweep's notices use), keyed ``deploy-lease/<service>``
and written with a conditional put, so exactly one writer wins. The item says who holds it (user,
host, process), for which revision and operation, since when and until when.

The holder renews it while it runs: every wait of a deploy goes through the runtime's clock, and
:class:`RenewingClock` renews the lease there (every :data:`RENEW_EVERY`, for :data:`LEASE_FOR`
ahead) before it sleeps. The lease is released when the run ends, however it ends (an error, Ctrl-C).
A lease whose holder is gone (killed, its laptop closed) lapses at its expiry; it is never taken
silently: ``--steal-lock`` takes an expired one after a confirmation (or ``--yes``), and refuses one
that is still being renewed.
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
from lambdas.aws.stop_path import AWS_ERRORS, describe_error

KEY = "notice"  # the table's hash key (guardrails' components/guardrail_alerting.py)
LEASE_FOR = timedelta(minutes=5)
RENEW_EVERY = timedelta(minutes=1)
# The table's TTL attribute: DynamoDB deletes a lease left behind a day after it lapsed.
CLEANUP_AFTER = timedelta(days=1)


class DeployLocked(ParkbrakeError):
    """Another run holds the service's lease (exit 1)."""


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

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> HeldLease:
        def text(name: str) -> str:
            return str(item.get(name, {}).get("S", "?"))

        def moment(name: str) -> datetime:
            return datetime.fromtimestamp(int(item.get(name, {}).get("N", "0")), UTC)

        return cls(
            text("holder"), text("operation"), text("revision"), moment("started_at"), moment("lease_expires_at"),
            text("token"),
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
        self.renewed_at: datetime | None = None
        self.lost: str | None = None  # why a renewal failed, if one did

    def _item(self, started_at: datetime) -> dict[str, Any]:
        expires = started_at + LEASE_FOR
        return {
            KEY: {"S": lease_key(self.service)},
            "holder": {"S": self.holder},
            "operation": {"S": self.operation},
            "revision": {"S": self.revision},
            "token": {"S": self.token},
            "started_at": {"N": str(int(started_at.timestamp()))},
            "lease_expires_at": {"N": str(int(expires.timestamp()))},
            "expires_at": {"N": str(int((expires + CLEANUP_AFTER).timestamp()))},
        }

    def _command(self) -> str:
        """The command that takes this lease over: the same operation, with --steal-lock."""
        base = f"parkbrake {{}} {self.service} --stack {self.stack}"
        return {
            "abort": base.format("deploy") + " --abort",
            "rollback": base.format("rollback"),
        }.get(self.operation, base.format("deploy") + f" --image ... --revision {self.revision}")

    def current(self) -> HeldLease | None:
        found = self._call(
            lambda: self._dynamodb.get_item(
                TableName=self.table, Key={KEY: {"S": lease_key(self.service)}}, ConsistentRead=True
            )
        )
        item = found.get("Item")
        return HeldLease.from_item(item) if item else None

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
            self._call(
                lambda: self._dynamodb.put_item(
                    TableName=self.table,
                    Item=self._item(now),
                    ConditionExpression=f"attribute_not_exists({KEY})",
                ),
                conditional=True,
            )
        except _ConditionFailed:
            held = self.current()
            if held is None:  # released between the put and the read: try once more
                return self.acquire(steal=steal, confirm=confirm)
            if not steal or not held.expired(now):
                raise DeployLocked(self._locked_message(held, now, steal=steal)) from None
            if confirm is not None:
                confirm(f"Take over the expired lease on {self.service}? {held.describe()}.")
            self._take_over(held, now)
        self.renewed_at = now
        return None

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
        try:
            self._call(
                lambda: self._dynamodb.put_item(
                    TableName=self.table,
                    Item=self._item(now),
                    ConditionExpression="#token = :theirs",
                    ExpressionAttributeNames={"#token": "token"},
                    ExpressionAttributeValues={":theirs": {"S": held.token}},
                ),
                conditional=True,
            )
        except _ConditionFailed:
            newer = self.current()
            raise DeployLocked(
                f"someone else took the deploy lease on {self.service} first: "
                f"{newer.describe() if newer else 'it was released'}; run the command again"
            ) from None

    def renew(self) -> None:
        """Push the expiry ahead; a lease lost (taken over after a stall) is recorded, never raised:
        the deploy is mid-way and stopping it there would be worse than finishing it."""
        now = self._now()
        expires = now + LEASE_FOR
        try:
            self._call(
                lambda: self._dynamodb.update_item(
                    TableName=self.table,
                    Key={KEY: {"S": lease_key(self.service)}},
                    UpdateExpression="SET lease_expires_at = :expires, expires_at = :cleanup",
                    ConditionExpression="#token = :mine",
                    ExpressionAttributeNames={"#token": "token"},
                    ExpressionAttributeValues={
                        ":mine": {"S": self.token},
                        ":expires": {"N": str(int(expires.timestamp()))},
                        ":cleanup": {"N": str(int((expires + CLEANUP_AFTER).timestamp()))},
                    },
                ),
                conditional=True,
            )
        except _ConditionFailed:
            self.lost = "the lease was taken over by another run while this one stalled"
        except ParkbrakeError as error:
            self.lost = str(error)
        else:
            self.renewed_at = now

    def renew_if_due(self) -> None:
        if self.renewed_at is None or self._now() - self.renewed_at >= RENEW_EVERY:
            self.renew()

    def release(self) -> None:
        """Delete the lease if it is still ours (a lease taken over is the new holder's)."""
        try:
            self._call(
                lambda: self._dynamodb.delete_item(
                    TableName=self.table,
                    Key={KEY: {"S": lease_key(self.service)}},
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
    """The runtime's clock, renewing the lease before each wait: a deploy's waits are its long parts."""

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
