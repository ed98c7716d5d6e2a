"""The one gate every AWS write of a deploy, a rollback or an abort passes: the lease check.

:func:`under_lease` hands a run's steps a :class:`~cli.oncall.deploy.runtime.ServiceAt` whose clients
are wrapped in :class:`LeaseGuardedClient`, whose clock renews the lease before each wait, and whose
local edits (the stack file) confirm it first. A guarded client passes reads through (an operation
named ``Describe…``, ``List…`` or ``Get…``) and marks every other call, whatever it is — an update, a
registration, a tag — as made under the run's lease. botocore emits ``before-send`` right before each
HTTP request goes out, once per attempt, its own retries included (``botocore/endpoint.py``,
``Endpoint._do_get_response``, botocore 1.44), and the handler registered there confirms the lease
(:meth:`~cli.oncall.deploy.lease.DeployLease.check`, a conditional write on the run's token and fence)
for a marked call. A failed check raises there, botocore does not retry what it does not know
(``botocore/retries/standard.py``: only connection errors, throttling and modelled codes), and the
request is never sent.

The mark is a context variable set only for the duration of the guarded call, so other users of the
same client objects (another run's guarded clients, a test's own reads) are not checked against this
run's lease. Unknown operations are guarded: a read the list does not know only costs a check.
"""

from __future__ import annotations

import functools
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

from cli.oncall.deploy.lease import DeployLease, RenewingClock
from cli.oncall.deploy.runtime import AwsClients, ServiceAt

READ_PREFIXES = ("Describe", "List", "Get")
HANDLER_ID = "parkbrake-deploy-lease-check"
# The lease the call being sent is made under; None for every call not made through a guarded client.
_SENDING_UNDER: ContextVar[DeployLease | None] = ContextVar("parkbrake_deploy_lease", default=None)


def is_write(operation: str) -> bool:
    """Whether an AWS operation (``UpdateService``) may change something: all but the plain reads."""
    return not operation.startswith(READ_PREFIXES)


def _confirm_before_send(event_name: str, **_: Any) -> None:
    lease = _SENDING_UNDER.get()
    if lease is None:
        return
    marked = _SENDING_UNDER.set(None)  # the check's own request is not a guarded write
    try:
        lease.check(before=event_name.rsplit(".", 1)[-1])
    finally:
        _SENDING_UNDER.reset(marked)


class LeaseGuardedClient:
    """A boto3 client whose writes are each sent only after the lease is confirmed."""

    def __init__(self, client: Any, lease: DeployLease) -> None:
        self._client = client
        self._lease = lease
        # Registered once per client object (botocore ignores a second handler with the same id).
        client.meta.events.register("before-send", _confirm_before_send, unique_id=HANDLER_ID)
        # Reads pass straight through: bound here once, so a read runs no code of this module.
        for name, operation in client.meta.method_to_api_mapping.items():
            if not is_write(operation):
                setattr(self, name, getattr(client, name))
        self.meta, self.exceptions, self.get_paginator = client.meta, client.exceptions, client.get_paginator

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        operation = self._client.meta.method_to_api_mapping.get(name)
        if operation is None or not is_write(operation):
            return attribute

        @functools.wraps(attribute)
        def under_lease(*args: Any, **kwargs: Any) -> Any:
            marked = _SENDING_UNDER.set(self._lease)
            try:
                return attribute(*args, **kwargs)
            finally:
                _SENDING_UNDER.reset(marked)

        return under_lease


def guarded_clients(clients: AwsClients, lease: DeployLease) -> AwsClients:
    """The run's clients, each write confirming ``lease`` first. The lease's own table is not guarded:
    the lease is what guards."""
    return replace(
        clients,
        ecs=LeaseGuardedClient(clients.ecs, lease),
        elbv2=LeaseGuardedClient(clients.elbv2, lease),
        autoscaling=LeaseGuardedClient(clients.autoscaling, lease),
        ecr_in=lambda region: LeaseGuardedClient(clients.ecr_in(region), lease),
    )


def under_lease(at: ServiceAt, lease: DeployLease) -> ServiceAt:
    """``at`` for a run that holds ``lease``: every AWS write, every wait and the stack file's edit
    confirm it first, and stop the run (:class:`~cli.oncall.deploy.lease.LeaseLost`) once it is lost."""
    return replace(
        at,
        clients=guarded_clients(at.clients, lease),
        clock=RenewingClock(at.clock, lease),
        confirm_lease=lease.check,
    )


def service_lease(at: ServiceAt, operation: str, revision: str) -> DeployLease:
    """The deploy lease of the service ``at`` names, timed by the run's own clock (tests move it)."""
    from lambdas.clients import client

    dynamodb = at.clients.dynamodb if at.clients.dynamodb is not None else client("dynamodb")
    return DeployLease(
        dynamodb,
        stack=at.target.stack,
        service=at.target.service,
        operation=operation,
        revision=revision,
        now=at.clock.now,
    )
