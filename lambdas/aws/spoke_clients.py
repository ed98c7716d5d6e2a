"""The hub's reach into the organisation's accounts: the clients of one place (account, region).

A stack's own guardrails act in their own account. The organisation's hub (``PARKBRAKE_MEMBER_ACCOUNTS``
set, or learned from its spokes parameter: lambdas/aws/spoke_list.py; docs/organisation.md) also acts in each member account, through the spoke role that account's
spoke stack made for the region (``guardrails.names.spoke_role_arn``), assumed from the hub once per
account and region and kept for the run (``lambdas.aws.assumed.AccountSessions``: one shared rate,
credentials that refresh themselves). The meter reads a member account's hosts this way
(``lambdas.engines.metering``), a budget stop lists and stops a tenant's hosts in every account
(``lambdas.engines.budgeting``) and the reconciler lists every account's hosts
(``lambdas.engines.reconciling``): one injected function, :data:`PlaceClients`, serves them all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from guardrails import names
from guardrails.settings import Settings
from lambdas.aws.assumed import AccountAccess, AccountSessions, ClientFactory

# The client factory acting in an account, for a region: ``place_clients(account, region)(service,
# region)``. Account '' is the caller's own (an event that names none, a stack without a hub).
PlaceClients = Callable[[str, str], ClientFactory]
OWN_ACCOUNT = ""


def account_of_arn(arn: object) -> str | None:
    """The account field of an ARN (``arn:PARTITION:SERVICE:REGION:ACCOUNT:...``: the running
    Lambda's own account, from its ``invoked_function_arn``), None when it has none."""
    parts = arn.split(":") if isinstance(arn, str) else []
    return parts[4] if len(parts) > 4 and parts[4] else None


def own_place_clients(clients: ClientFactory) -> PlaceClients:
    """Every place reached with ``clients``: a stack acting in its own account."""
    return lambda account, region: clients


def hub_place_clients(
    clients: ClientFactory, *, stack: str, own_account: str | None, sessions: AccountSessions | None = None
) -> PlaceClients:
    """The hub's own account with ``clients``; a member account through its spoke role for the region."""
    made = sessions or AccountSessions()

    def clients_of(account: str, region: str) -> ClientFactory:
        if account in (OWN_ACCOUNT, own_account):
            return clients
        return made.clients(AccountAccess(account, (names.spoke_role_arn(stack, account, region),)))

    return clients_of


def place_clients_for(settings: Settings, clients: ClientFactory, *, own_account: str | None) -> PlaceClients:
    """The hub's reach when ``settings`` name member accounts, else the stack's own account's."""
    if settings.member_accounts is None:
        return own_place_clients(clients)
    return hub_place_clients(clients, stack=settings.require_stack(), own_account=own_account)


def guarded_places(
    settings: Settings, *, own_account: str | None, spoke_places: Sequence[tuple[str, str]] = ()
) -> list[tuple[str, str]]:
    """Every (account, region) the guardrails act in, once each: the own account ('' when it is not
    known) and each member account, in each of ``settings.regions``, then every spoke's own place
    (``lambdas.aws.spoke_list``: a spoke's region need not be the hub's)."""
    own = own_account or OWN_ACCOUNT
    accounts: Sequence[str] = [own, *sorted((settings.member_accounts or frozenset()) - {own})]
    places = [(account, region) for account in accounts for region in settings.regions]
    places += [(own if account == own_account else account, region) for account, region in spoke_places]
    return list(dict.fromkeys(places))


# What acts on a member account's hosts (lists, stops, reads its stacks): its spoke role's. Everything
# else a guardrail calls (Scheduler, SNS, DynamoDB, CloudWatch, Secrets Manager) stays the hub's.
HOST_SERVICES = frozenset({"ec2", "autoscaling", "ssm"})


def clients_in_place(
    clients: ClientFactory,
    *,
    stack: str,
    account: str,
    region: str,
    sessions: AccountSessions | None = None,
) -> ClientFactory:
    """The hub's ``clients``, but the host services of ``account`` through its spoke role for ``region``
    (the role is assumed on the first such client: ``AssumeFailed`` then, one line naming it)."""
    place = hub_place_clients(clients, stack=stack, own_account=None, sessions=sessions)(account, region)

    def routed(service: str, region: str | None) -> Any:
        return place(service, region) if service in HOST_SERVICES else clients(service, region)

    return routed
