"""The deadlines engine: on a host's state change, arm or disarm its one-time deadline schedule.

``running`` arms ``at(launch time + cap)`` (or the end of a valid exemption) in UTC, and the owner's
warning ``warn_before`` ahead of it; ``stopping``, ``stopped``, ``shutting-down`` and ``terminated``
disarm both. EventBridge delivers at least once and
out of order, so every event is checked against the instance as it is now: a ``running`` from an
earlier start, or one that arrives after the host stopped, changes nothing; a stop event older than
the host's current start does not disarm the new deadline. A host already past its deadline when
its event arrives is judged at once, through the sweep (:mod:`lambdas.engines.sweeping`).

A tag change of a host (EventBridge's ``Tag Change on Resource`` from ``aws.tag``) judges it again as
it is now: a lowered cap moves its schedule earlier, and a host already past its new cap is swept at once.

An organisation's hub (``PARKBRAKE_SPOKES_PARAMETER``, ``sweep: central``) also takes the events its
spokes forward to the hub bus ("central deadlines", docs/organisation.md): an event of a member
account's place (account and region) that the spokes document lists is read through that place's spoke
role (``lambdas.aws.spoke_clients.clients_in_place``), and its schedules are armed in the hub's own group,
their payloads naming the place. An event of any other account is refused with one log line.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from guardrails import settings as variables
from guardrails.deadlines import Deadline
from guardrails.decisions import Decision
from guardrails.durations import format_duration
from guardrails.hosts import Host, as_utc
from guardrails.ledger import is_account_id
from guardrails.rules.base import instant
from guardrails.settings import Settings, SettingsError
from guardrails.sweep import (
    host_deadline,
    names_another_stack,
    orphan_reason,
    owner_stack,
    policy_from_settings,
)
from lambdas.aws import heartbeat
from lambdas.aws.assumed import AccountSessions, AssumeFailed
from lambdas.aws.deadline_schedules import HostPlace, arm_deadline, disarm_deadline
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.ec2_hosts import list_hosts, live_stacks
from lambdas.aws.environment import ClientFactory
from lambdas.aws.spoke_clients import clients_in_place
from lambdas.aws.spoke_list import SpokeList
from lambdas.engines import sweeping

log = logging.getLogger(__name__)
STOPPED_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


@dataclass(frozen=True)
class StateChange:
    instance_id: str
    state: str  # EC2's instance state, or TAGS_CHANGED for a tag change
    time: datetime
    region: str
    account: str = ""  # the envelope's ``account``; '' when the event names none (the stack's own)


STATE_CHANGE = "EC2 Instance State-change Notification"
TAG_CHANGE = "Tag Change on Resource"
TAGS_CHANGED = "tags-changed"
# A tag change names its resource by ARN only (EventBridge events reference, "Tag Change on Resource").
INSTANCE_ARN = re.compile(
    r"arn:aws[a-z-]*:ec2:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):instance/(?P<instance>i-[0-9a-f]+)"
)


class RefusedPlace(ValueError):
    """An event of an account (and region) that is not the hub's own nor one of its spokes'."""


def _shown(event: object) -> str:
    return json.dumps(event, default=str)[:300] if isinstance(event, Mapping) else repr(event)[:300]


def _account_problems(event: Mapping[str, Any]) -> list[str]:
    """EventBridge's envelope ``account`` is "the 12-digit number identifying an AWS account" (Amazon
    EventBridge events reference, *event structure*); absent, the event is the stack's own."""
    if "account" not in event:
        return []
    account = event["account"]
    if isinstance(account, str) and account and is_account_id(account):
        return []
    return [f"account {str(account)[:40]!r} is not a 12-digit AWS account id"]


def parse_deadline_event(event: object) -> StateChange:
    """A state change or, for ``Tag Change on Resource``, the tag change of an instance; ValueError else."""
    if isinstance(event, Mapping) and event.get("detail-type") == TAG_CHANGE:
        return parse_tag_change(event)
    return parse_state_change(event)


def parse_tag_change(event: object) -> StateChange:
    """An EC2 instance's tag change as a :class:`StateChange` of state :data:`TAGS_CHANGED`; the
    instance, its account and region from the ARN in ``resources[0]``, which must agree with the
    envelope's. ValueError (quoting the event's start) for anything else."""
    shown = _shown(event)
    if (
        not isinstance(event, Mapping)
        or event.get("source") != "aws.tag"
        or event.get("detail-type") != TAG_CHANGE
    ):
        raise ValueError(f"not a {TAG_CHANGE!r} event from aws.tag: {shown}")
    detail, resources = event.get("detail"), event.get("resources")
    arn = resources[0] if isinstance(resources, list) and resources else None
    found = INSTANCE_ARN.fullmatch(arn) if isinstance(arn, str) else None
    problems = _account_problems(event)
    if not isinstance(detail, Mapping) or (detail.get("service"), detail.get("resource-type")) != (
        "ec2",
        "instance",
    ):
        problems.append("detail.service and detail.resource-type are not ec2 and instance")
    if found is None:
        problems.append(f"resources[0] {str(arn)[:80]!r} is not an EC2 instance's ARN")
    elif (event.get("account", found["account"]), event.get("region")) != (found["account"], found["region"]):
        problems.append(f"resources[0] {arn!r} is not in the event's account and region")
    try:
        time = as_utc(event.get("time"))
    except ValueError as error:
        problems.append(f"time: {error}")
    if problems or found is None:
        raise ValueError(f"malformed {TAG_CHANGE} event ({'; '.join(problems)}): {shown}")
    return StateChange(found["instance"], TAGS_CHANGED, time, found["region"], found["account"])


def parse_state_change(event: object) -> StateChange:
    """The state change an event reports; ValueError (quoting at most its first characters) for any
    event that is not one: the wrong type, a field missing, a field of the wrong JSON type."""
    shown = _shown(event)
    if not isinstance(event, Mapping):
        raise ValueError(f"not an {STATE_CHANGE!r} event: {shown}")
    if event.get("detail-type") != STATE_CHANGE or event.get("source") != "aws.ec2":
        raise ValueError(f"not an {STATE_CHANGE!r} event from aws.ec2: {shown}")
    detail = event.get("detail")
    instance_id = detail.get("instance-id") if isinstance(detail, Mapping) else None
    state = detail.get("state") if isinstance(detail, Mapping) else None
    region = event.get("region")
    problems = [
        f"{name} is not text"
        for name, value in (("detail.instance-id", instance_id), ("detail.state", state), ("region", region))
        if not isinstance(value, str) or not value
    ]
    if isinstance(instance_id, str) and not instance_id.startswith("i-"):
        problems.append(f"detail.instance-id {instance_id[:40]!r} is not an instance id")
    problems += _account_problems(event)
    try:
        time = as_utc(event.get("time"))
    except ValueError as error:
        problems.append(f"time: {error}")
    if problems:
        raise ValueError(f"malformed {STATE_CHANGE} event ({'; '.join(problems)}): {shown}")
    return StateChange(
        instance_id=str(instance_id),
        state=str(state),
        time=time,
        region=str(region),
        account=str(event.get("account", "")),
    )


@dataclass(frozen=True)
class DeadlineResult:
    instance_id: str
    state: str
    action: str  # armed, moved, disarmed, judged, ignored
    reason: str
    deadline: datetime | None = None
    tenant: str | None = None
    account: str | None = None  # a member account's host, whose deadline the hub keeps

    def decision(self, now: datetime) -> Decision:
        details = {"state": self.state} | ({"deadline": instant(self.deadline)} if self.deadline else {})
        details |= {"account_id": self.account} if self.account else {}
        return Decision(
            f"deadline-{self.action}",
            heartbeat.DEADLINE,
            self.reason,
            now,
            self.instance_id,
            self.tenant,
            details,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "state": self.state,
            "action": self.action,
            "reason": self.reason,
            "deadline": instant(self.deadline) if self.deadline else None,
        } | ({"account": self.account} if self.account else {})


def require_targets(settings: Settings) -> tuple[str, str, str]:
    """The stack, target and role every deadline schedule needs; all missing ones are named at once."""
    stack, target_arn, role_arn = settings.stack, settings.deadline_target_arn, settings.scheduler_role_arn
    if stack and target_arn and role_arn:
        return stack, target_arn, role_arn
    raise SettingsError(
        [
            f"{name}: not set; the deadline guardrail needs it"
            for name, value in (
                (variables.STACK, stack),
                (variables.DEADLINE_TARGET_ARN, target_arn),
                (variables.SCHEDULER_ROLE_ARN, role_arn),
            )
            if not value
        ]
    )


def on_state_change(
    change: StateChange,
    settings: Settings,
    *,
    clients: ClientFactory,
    now: datetime,
    decisions: DecisionLog | None = None,
    place: HostPlace | None = None,
    sessions: AccountSessions | None = None,
) -> DeadlineResult:
    """Arm, move or disarm the host's deadline; ``decisions`` logs what a sweep of a host already due did.
    ``place``: a member account's host, which the hub reads through the place's spoke role and whose
    schedules it arms in its own group (``clients`` are the hub's)."""
    stack, target_arn, role_arn = require_targets(settings)
    group = settings.deadline_schedule_group()
    hosts = clients
    if place is not None:
        hosts = clients_in_place(
            clients, stack=stack, account=place.account, region=place.region, sessions=sessions
        )
    found = list_hosts(hosts("ec2", change.region), change.region, instance_ids=[change.instance_id])
    host = found[0] if found else None
    # A member account's schedules are the hub's, in the hub's region (None: the Lambda's own).
    scheduler_region = change.region if place is None else None

    def result(action: str, reason: str, deadline: datetime | None = None) -> DeadlineResult:
        log.info("%s %s (%s): %s", action, change.instance_id, change.state, reason)
        tenant = host.tenant if host is not None else None
        account = place.account if place is not None else None
        return DeadlineResult(change.instance_id, change.state, action, reason, deadline, tenant, account)

    if change.state in STOPPED_STATES:
        if host is not None and host.state in ("pending", "running") and host.launch_time > change.time:
            return result("ignored", f"stale event: the host started again at {instant(host.launch_time)}")
        if disarm_deadline(
            clients("scheduler", scheduler_region), group=group, instance_id=change.instance_id
        ):
            return result("disarmed", "the host stopped; its deadline schedule is deleted")
        return result("ignored", "no deadline schedule to delete (a duplicate event, or it already fired)")
    if change.state not in ("running", TAGS_CHANGED):
        return result("ignored", f"nothing to do on {change.state!r}")
    if host is None:
        return result("ignored", "the instance no longer exists")
    judged = _judge_running(host, change, settings, hosts=hosts, now=now, decisions=decisions, place=place)
    if isinstance(judged, str):
        return result("ignored", judged)
    deadline = judged
    if deadline.due(now):
        return result(
            "judged", f"already past its deadline when the {_what(change)} arrived", deadline.enforce_at
        )
    armed = arm_deadline(
        clients("scheduler", scheduler_region),
        group=group,
        instance_id=host.instance_id,
        at=deadline.enforce_at,
        target_arn=target_arn,
        role_arn=role_arn,
        dead_letter_arn=settings.deadline_dead_letter_arn,
        warn_before=settings.warn_before,
        now=now,
        place=place,
    )
    return result(
        "armed" if armed == "created" else "moved",
        f"judged at {instant(deadline.enforce_at)} (cap {format_duration(deadline.cap)}, {deadline.cap_source})",
        deadline.enforce_at,
    )


def _judge_running(
    host: Host,
    change: StateChange,
    settings: Settings,
    *,
    hosts: ClientFactory,
    now: datetime,
    decisions: DecisionLog | None,
    place: HostPlace | None,
) -> Deadline | str:
    """The running host's deadline (swept at once when it is already due), or why it gets none."""
    policy = policy_from_settings(settings)
    stacks = _stacks_if_tagged_elsewhere(host, settings, hosts, change.region)
    ignored = _not_ours(host, change, settings, stacks)
    if ignored is not None:
        return ignored
    deadline = host_deadline(host, policy, now, orphan=orphan_reason(host, policy, stacks) is not None)
    if deadline is None:  # _not_ours said why already; this keeps the type honest
        return "not managed by parkbrake"
    for problem in deadline.problems:
        log.warning("%s: %s", host.instance_id, problem)
    if deadline.due(now):
        _sweep_due(host, settings, clients=hosts, now=now, decisions=decisions, place=place)
    return deadline


def _what(change: StateChange) -> str:
    return "tag change" if change.state == TAGS_CHANGED else "event"


def _sweep_due(
    host: Host,
    settings: Settings,
    *,
    clients: ClientFactory,
    now: datetime,
    decisions: DecisionLog | None,
    place: HostPlace | None,
) -> None:
    """Sweep a host already past its deadline now; raise, so that Lambda retries, if it was not stopped.
    A member account's host is swept in its place's region (``clients`` reach it there)."""
    if place is not None:
        settings = replace(settings, regions=(place.region,))
    report = sweeping.sweep(settings, now=now, clients=clients, instance_ids=[host.instance_id], place=place)
    if decisions is not None:
        decided = report.decisions(actor=heartbeat.DEADLINE, now=now)
        if place is not None:
            decided = [replace(d, details={**d.details, "account_id": place.account}) for d in decided]
        report.errors += decisions.record(decided)
    if report.errors:
        raise RuntimeError(f"could not stop {host.instance_id}, already past its deadline: {report.errors}")


def _stacks_if_tagged_elsewhere(
    host: Host, settings: Settings, clients: ClientFactory, region: str
) -> list[str] | None:
    """The stacks deployed in the region, read only when the host names another stack (is it alive?)."""
    if not names_another_stack(host, settings.stack):
        return None
    return live_stacks(clients("ssm", region))


def _not_ours(host: Host, change: StateChange, settings: Settings, stacks: list[str] | None) -> str | None:
    """Why a ``running`` event arms nothing, or None when it should."""
    if host.state != "running":
        return f"late event: the host is {host.state} now"
    if change.time < host.launch_time:
        return f"late event from an earlier start (the host last started at {instant(host.launch_time)})"
    if not host.accelerator:
        return f"{host.instance_type} is not an accelerator instance type"
    if not host.managed:
        return "not managed by parkbrake (the sweep reports untagged GPU hosts)"
    other = owner_stack(host, policy_from_settings(settings), stacks)
    if other is not None:
        return f"belongs to stack {other!r}"
    return None


def central_place(
    change: StateChange,
    settings: Settings,
    *,
    clients: ClientFactory,
    own_account: str | None,
    spokes: SpokeList,
) -> HostPlace | None:
    """Where a hub's deadline of ``change`` acts: None for the stack's own account (or a stack that
    is no hub), the place for one of the hub's spokes; :class:`RefusedPlace` for any other account,
    ``SpokeListError`` when the spokes cannot be read."""
    if settings.spokes_parameter is None or change.account in ("", own_account):
        return None
    if own_account is None:  # the handler knows it from its own ARN; a caller without one asks STS
        own_account = str(clients("sts", None).get_caller_identity()["Account"])
        if change.account == own_account:
            return None
    # An account the list does not hold has it read again first (one that just joined an OU). A list
    # that cannot be read is the hub's failure, not the event's: SpokeListError propagates, so Lambda
    # delivers the event again and the deadline's errors alarm pages, as the meter does.
    spokes.accounts(settings, clients, expecting=change.account)
    places = spokes.places(settings, clients)
    if any((p.account_id, p.region) == (change.account, change.region) for p in places):
        return HostPlace(change.account, change.region)
    raise RefusedPlace(
        f"{change.instance_id} is in account {change.account} {change.region}, which is neither the hub's "
        f"own ({own_account}) nor a spoke in {settings.spokes_parameter}: no deadline armed"
    )


def act_on_state_change(
    change: StateChange,
    *,
    settings: Settings,
    clients: ClientFactory,
    now: datetime,
    decisions: DecisionLog,
    own_account: str | None = None,
    spokes: SpokeList | None = None,
) -> dict[str, Any]:
    """Act on ``change``, count it, and record what was decided in ``decisions``; the result. A hub
    (``settings.spokes_parameter``) refuses an event of an account that is none of its spokes' and one
    whose spoke role it cannot assume: one log line and ``action: refused`` (the central sweep still
    judges that host within one interval). ``own_account``: the hub's, from the handler's own ARN."""
    try:
        place = central_place(
            change, settings, clients=clients, own_account=own_account, spokes=spokes or SpokeList()
        )
        outcome = on_state_change(
            change, settings, clients=clients, now=now, decisions=decisions, place=place
        )
    except (RefusedPlace, AssumeFailed) as refused:
        log.error("deadline refused: %s", refused)
        heartbeat.count_action(
            heartbeat.DEADLINE,
            "refused",
            "unknown-account" if isinstance(refused, RefusedPlace) else "assume-role",
        )
        return {
            "instance_id": change.instance_id,
            "state": change.state,
            "action": "refused",
            "reason": str(refused),
            "deadline": None,
            "account": change.account,
        }
    heartbeat.count_action(heartbeat.DEADLINE, outcome.action, outcome.state)
    # An ignored event (another host, a stale or duplicate delivery) decides nothing: its log line says why.
    errors = decisions.record([outcome.decision(now)] if outcome.action != "ignored" else [])
    if not errors:
        heartbeat.record_success(
            heartbeat.DEADLINE, stack=settings.stack, cloudwatch=clients("cloudwatch", None), now=now
        )
    return outcome.as_dict() | ({"errors": errors} if errors else {})
