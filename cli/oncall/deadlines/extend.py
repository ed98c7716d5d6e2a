"""``parkbrake extend``: move one host's deadline, record who, when and why, and move its schedules.

The host's tags are the record the guardrails act on (``parkbrake:exempt-until``, bounded as every
exemption is); the deadline and warning schedules then move to the new deadline. If moving them
fails, the extension still holds (the old deadline schedule judges the host by its tags and re-arms
itself), and the failure is an error with a non-zero exit.

A member account's host (central deadlines, docs/organisation.md) has its schedules in the hub, whose
payloads name the host's account and region. Run from the hub, ``extend`` finds that place in the
host's armed deadline (``--account`` names it when none is armed yet), reads and tags the host in
that account through the on-call role (``--org-role``), and moves the schedules in the hub's own
group and region with the place kept in their payloads, as the hub's reaper re-arms them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from guardrails import names, tags
from guardrails.durations import format_duration
from guardrails.errors import InputError, ParkbrakeError
from guardrails.extension import Extension, check_reason, extension_decision, plan_extension
from guardrails.hosts import Host
from guardrails.rules.base import instant
from guardrails.settings import Settings, settings_from_environment
from guardrails.sweep import host_deadline, orphan_reason, owner_stack, policy_from_settings
from lambdas.aws.deadline_schedules import HostPlace, arm_deadline, armed_place
from lambdas.aws.ec2_hosts import list_hosts, live_stacks
from lambdas.aws.environment import ClientFactory
from lambdas.aws.errors import AWS_ERRORS, describe_error

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Planned:
    """A checked extension, and where the host is: ``place`` (a member account's, from the hub) and
    the clients that reach the host there (the caller's own for a host of its own account)."""

    extension: Extension
    host: Host
    settings: Settings
    place: HostPlace | None
    host_clients: ClientFactory


@dataclass
class ExtendOutcome:
    extension: Extension
    host: Host
    dry_run: bool
    warning_at: datetime | None  # when the owner is warned before the new deadline (None: too close)
    account: str | None = None  # a member account's host: its account
    errors: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.extension.as_dict(),
            "region": self.host.region,
            **({"account": self.account} if self.account else {}),
            "warning_at": instant(self.warning_at) if self.warning_at else None,
            "dry_run": self.dry_run,
            "errors": self.errors,
        }


def find_host(
    instance_id: str, settings: Settings, clients: ClientFactory, *, member: bool = False
) -> tuple[Host, list[str]]:
    """The running, managed accelerator host of this stack, and the stacks deployed in its region;
    anything else is refused with why. ``member``: a member account's host, which the hub's stack
    judges though it is not deployed there."""
    stack = settings.require_stack()
    for region in settings.regions:
        found = list_hosts(clients("ec2", region), region, instance_ids=[instance_id])
        if found:
            host = found[0]
            break
    else:
        raise ParkbrakeError(
            f"{instance_id}: no such instance in {', '.join(settings.regions)}; check the id and --region "
            "(a member account's host: --account)"
        )
    if host.state != "running":
        raise ParkbrakeError(f"{instance_id} is {host.state}: only a running host has a deadline to extend")
    if not host.accelerator:
        raise ParkbrakeError(
            f"{instance_id} is a {host.instance_type}, not an accelerator host: it has no deadline"
        )
    if not host.managed:
        raise ParkbrakeError(
            f"{instance_id} is not managed by parkbrake ({tags.MANAGED} is not 'true'): it has no deadline to "
            "extend; tag it with its stack, pool, tenant and max-runtime first"
        )
    stacks = live_stacks(clients("ssm", host.region))
    if not member and stack not in stacks:
        deployed = ", ".join(stacks) or "none"
        raise InputError(
            f"stack {stack!r} is not deployed in {host.region}: no {names.park_parameter(stack)} — "
            f"stacks deployed there: {deployed}; check --stack"
        )
    other = owner_stack(host, policy_from_settings(settings), stacks)
    if other is not None:
        raise ParkbrakeError(f"{instance_id} belongs to stack {other!r}; run this with --stack {other}")
    return host, stacks


def plan(
    instance_id: str,
    *,
    by: timedelta,
    reason: str,
    environ: Mapping[str, str],
    clients: ClientFactory,
    now: datetime,
    account: str | None = None,
    member_clients: Callable[[str, str], ClientFactory] | None = None,
) -> Planned:
    """Check the request against the host and the stack's limits; changes nothing. ``account``
    (``--account``) names a member account's host that has no deadline armed yet; ``member_clients``
    ``(account, caller's ARN)`` reaches a member account (the CLI's: through ``--org-role``)."""
    reason = check_reason(reason)
    account = check_account(account)
    settings = settings_from_environment(environ)
    actor = str(clients("sts", settings.regions[0]).get_caller_identity()["Arn"])
    place = member_place(instance_id, account, settings, clients, caller_account=actor.split(":")[4])
    host_clients = clients
    if place is not None:
        if member_clients is None:
            raise ParkbrakeError(f"{instance_id} is in account {place.account}: no way to reach it given")
        host_clients = member_clients(place.account, actor)
        settings = replace(settings, regions=(place.region,)) if place.region else settings
    host, stacks = find_host(instance_id, settings, host_clients, member=place is not None)
    if place is not None:
        place = HostPlace(place.account, host.region)
    policy = policy_from_settings(settings)
    orphan = orphan_reason(host, policy, stacks) is not None
    deadline = host_deadline(host, policy, now, orphan=orphan)
    if deadline is None:  # find_host refused unmanaged hosts; this keeps the type honest
        raise ParkbrakeError(f"{instance_id} has no deadline")
    extension = plan_extension(
        host,
        deadline,
        by=by,
        reason=reason,
        actor=actor,
        now=now,
        max_exemption=settings.max_exemption,
        ceiling=settings.max_runtime_ceiling,
    )
    return Planned(extension, host, settings, place, host_clients)


def check_account(account: str | None) -> str | None:
    """``--account`` as AWS writes an account id: 12 digits."""
    if account is not None and not (len(account) == 12 and account.isascii() and account.isdigit()):
        raise InputError(f"--account: {account!r} is not a 12-digit AWS account id; give the host's account")
    return account


def member_place(
    instance_id: str, account: str | None, settings: Settings, clients: ClientFactory, *, caller_account: str
) -> HostPlace | None:
    """Where a member account's host is: the place its armed deadline names in the hub's group (the
    caller's own region, where a hub arms its members' deadlines), else ``account`` (its region left
    "" until the host is found); None for a host of the caller's own account. A deadline that cannot
    be read counts as none: the extension is the host's tags, and the old schedule re-arms itself."""
    try:
        armed = armed_place(
            clients("scheduler", None), group=settings.deadline_schedule_group(), instance_id=instance_id
        )
    except AWS_ERRORS as error:
        log.warning("could not read the deadline of %s: %s", instance_id, describe_error(error))
        armed = None
    if armed is not None and account is not None and armed.account != account:
        raise InputError(
            f"--account: the deadline of {instance_id} names account {armed.account}, not {account}; "
            "leave --account out"
        )
    if armed is None and account is not None:
        armed = HostPlace(account, "")
    return armed if armed is not None and armed.account != caller_account else None


def apply(
    planned: Planned, *, environ: Mapping[str, str], clients: ClientFactory, now: datetime
) -> ExtendOutcome:
    """Tag the host with the extension, then move its deadline and warning schedules (a member
    account's: in the hub's own group and region, their payloads naming the place)."""
    extension, host, settings, place = planned.extension, planned.host, planned.settings, planned.place
    warning_at = extension.until - settings.warn_before
    outcome = ExtendOutcome(
        extension, host, False, warning_at if warning_at > now else None, place.account if place else None
    )
    planned.host_clients("ec2", host.region).create_tags(
        Resources=[host.instance_id],
        Tags=[{"Key": key, "Value": value} for key, value in extension.tags().items()],
    )
    outcome.errors += record(extension, host, environ)
    try:
        scheduler = clients(
            "scheduler", host.region if place is None else None
        )  # a member's: the hub's region
        target = schedule_target(settings, extension.actor, scheduler.meta.region_name)
        arm_deadline(
            scheduler,
            group=settings.deadline_schedule_group(),
            instance_id=host.instance_id,
            at=extension.until,
            target_arn=target[0],
            role_arn=target[1],
            dead_letter_arn=target[2],
            warn_before=settings.warn_before,
            now=now,
            place=place,
        )
    except AWS_ERRORS as error:
        outcome.errors.append(
            {"instance_id": host.instance_id, "action": "move-schedules", "error": describe_error(error)}
        )
    return outcome


def record(extension: Extension, host: Host, environ: Mapping[str, str]) -> list[dict[str, str]]:
    """The ``extend`` decision: a log line, and the ledger's decision log when a database is configured
    (a ledger that cannot be written is returned as an error; the extension holds)."""
    from guardrails.settings import ledger_configured
    from lambdas.aws.decision_log import DecisionLog

    opened: list[Any] = []

    def ledger() -> Any:
        from lambdas.ledger.decisions import DecisionLedger
        from lambdas.ledger.store import store_from_environment

        opened.append(store_from_environment(environ))
        return DecisionLedger.of(opened[-1])

    decisions = DecisionLog(
        guardrail="extend",
        origin=f"extend-{uuid.uuid4()}",
        ledger=ledger if ledger_configured(environ) else None,
    )
    try:
        return decisions.record([extension_decision(extension, host)])
    finally:
        for store in opened:
            store.close()


def schedule_target(settings: Settings, caller_arn: str, region: str) -> tuple[str, str, str]:
    """What the host's schedules invoke, as whom, and where a failed delivery goes: the settings' when
    set, else the names the Guardrails component gives them in the caller's account."""
    stack = settings.require_stack()
    partition, account = caller_arn.split(":")[1], caller_arn.split(":")[4]
    return (
        settings.deadline_target_arn
        or f"arn:{partition}:lambda:{region}:{account}:function:{names.function_name(stack, 'reaper')}",
        settings.scheduler_role_arn or f"arn:{partition}:iam::{account}:role/{names.scheduler_role(stack)}",
        settings.deadline_dead_letter_arn
        or f"arn:{partition}:sqs:{region}:{account}:{names.dead_letter_queue(stack, 'reaper')}",
    )


def describe(extension: Extension, host: Host, settings: Settings) -> Sequence[str]:
    """What the extension changes, for people, before it is applied."""
    name = host.tags.get("Name")
    return [
        f"{host.instance_id}{f' ({name})' if name else ''} in {host.region}, tenant {host.tenant or '-'}",
        f"  deadline  {instant(extension.previous)} -> {instant(extension.until)} (+{format_duration(extension.until - extension.previous)})",
        f"  reason    {extension.reason}",
        f"  by        {extension.actor}",
        f"  limits    {format_duration(settings.max_exemption)} from now (exemption limit), "
        f"{format_duration(settings.max_runtime_ceiling)} since its start (ceiling)",
    ]
