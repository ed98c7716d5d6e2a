"""The metering engine: EC2's state changes of accelerator hosts, attributed and appended to the ledger.

Each host is looked up with ``DescribeInstances`` (tags, type, region, pricing model and a spot host's
zone; what the ledger last knew when EC2 no longer describes it), its accelerator count taken from the
price table, and the change appended. A database or AWS error raises, so EventBridge delivers again; a
duplicate is then ignored. After a new event (:func:`meter_event`, the meter Lambda's run) the tenant's
budget is checked at once (:mod:`lambdas.engines.budgeting`), so a crossed limit does not wait for the
next minute.

Every event carries the account its host is in (EventBridge's envelope ``account``). The meter
reaches EC2 through one injected function, ``lambdas.aws.spoke_clients.PlaceClients``: the clients
of an (account, region). A stack's own meter reads its own account; the organisation's hub meter
reads a member account's hosts through that account's spoke role, assumed from the hub, and takes
events only from its own and its member accounts (:func:`refusal_of`).

``parkbrake ledger ingest`` backfills files of the same events: :func:`attribute_changes` a batch at a
time, queued, then :func:`account` once the backfill is settled; the reconciler's repairs and the
dead-letter replay go through :func:`meter`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from guardrails.instance_types import is_accelerator
from guardrails.ledger import (
    UNATTRIBUTED,
    Attribution,
    PriceKey,
    StateChange,
    Transition,
    attribution_for,
    from_ms,
    from_the_future,
    tenant_refused,
    to_ms,
)
from guardrails.owners import owner_of, owners_line
from guardrails.price_list import accelerator_info
from guardrails.pricing import PriceTable, load_price_table
from guardrails.settings import Settings
from guardrails.settings_table import MEMBER_ACCOUNTS
from lambdas.aws import heartbeat, notices
from lambdas.aws.environment import ClientFactory
from lambdas.aws.errors import AWS_ERRORS, describe_error
from lambdas.aws.spoke_clients import PlaceClients, account_of_arn, own_place_clients, place_clients_for
from lambdas.aws.spoke_list import SpokeList, with_spoke_accounts
from lambdas.engines import budgeting
from lambdas.ledger.appends import APPENDED, AppendResult
from lambdas.ledger.store import UNBOUNDED_MS, LedgerStore

log = logging.getLogger(__name__)
GUARDRAIL = "meter"
FILTER_VALUES_LIMIT = 200  # ids per DescribeInstances filter
# Events this long before EC2's LaunchTime still belong to that launch (pending precedes it).
LAUNCH_SLACK_MS = 60_000


def refusal_of(change: StateChange, *, settings: Settings, own_account: str | None) -> str | None:
    """Why the meter refuses ``change``'s account, or None: it takes its own account's events (and
    those naming none), and a hub's (``settings.member_accounts`` set: listed, or learned from the
    spokes parameter) its member accounts'. A meter that does not know its own account takes any."""
    account = change.account
    if account == "" or own_account is None or account == own_account:
        return None
    members = settings.member_accounts or frozenset()
    if account in members:
        return None
    listed = settings.spokes_parameter is None
    source = MEMBER_ACCOUNTS if listed else f"the spokes listed in {settings.spokes_parameter}"
    admitted = f"the stack's own account {own_account}" + (
        f" and its {len(members)} member account(s) ({source})" if members or not listed else ""
    )
    return (
        f"event {change.event_id} of {change.instance_id} is from account {account}, which is not "
        f"{admitted}: not metered; add the account to the organisation's member accounts if it is one"
    )


@dataclass
class MeterResult:
    inserted: int = 0
    duplicates: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)  # not appended, with the reason
    unattributed: list[dict[str, str]] = field(default_factory=list)  # unknown to EC2 and the ledger
    # appended for tenant unattributed (what EC2 and the ledger know does not say whose), with the reason
    metered_unattributed: list[dict[str, str]] = field(default_factory=list)
    unpriced: list[dict[str, str]] = field(default_factory=list)  # started hosts the ledger cannot price
    # appended for tenant unattributed because the host's tenant tag names no declared tenant, with the reason
    unknown_tenants: list[dict[str, str]] = field(default_factory=list)
    tenants: set[str] = field(default_factory=set)  # whose usage changed
    outcomes: dict[str, str] = field(default_factory=dict)  # event id → appended, duplicate

    def add(self, other: MeterResult) -> None:
        self.inserted += other.inserted
        self.duplicates += other.duplicates
        self.skipped += other.skipped
        self.unattributed += other.unattributed
        self.metered_unattributed += other.metered_unattributed
        self.unpriced += other.unpriced
        self.unknown_tenants += other.unknown_tenants
        self.tenants |= other.tenants
        self.outcomes |= other.outcomes

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"tenants": sorted(self.tenants)}


@dataclass(frozen=True)
class Described:
    """What EC2 says of a host now: its attribution (None: no accelerators), its last launch and owner."""

    attribution: Attribution | None
    launched_ms: int
    owner: str | None = None  # the parkbrake:owner tag, when valid
    tenant_refused: str | None = None  # why its parkbrake:tenant tag names no tenant (metered unattributed)


def accelerator_counts(instance_types: set[str], *, prices: PriceTable, ec2: Any) -> dict[str, int]:
    """The price table's accelerator count of each type (``PriceTable.accelerators``: taken from EC2
    with the prices); EC2's DescribeInstanceTypes for the rest, read as the price refresh reads it."""
    counts: dict[str, int] = {}
    for name in instance_types:
        known = prices.accelerators(name)
        if known is not None:
            counts[name] = known
    missing = sorted(instance_types - counts.keys())
    if missing:
        pages = ec2.get_paginator("describe_instance_types").paginate(
            Filters=[{"Name": "instance-type", "Values": missing}]
        )
        for page in pages:
            for description in page["InstanceTypes"]:
                info = accelerator_info(description)
                if info is not None:
                    counts[description["InstanceType"]] = int(info["count"])
    return counts


def attribute_instances(
    instances: Sequence[Mapping[str, Any]], *, region: str, prices: PriceTable, settings: Settings, ec2: Any
) -> dict[str, Attribution]:
    """The attribution of each accelerator host among ``DescribeInstances`` entries of ``region``, by id."""
    accelerated = {item["InstanceType"] for item in instances if is_accelerator(item["InstanceType"])}
    counts = accelerator_counts(accelerated, prices=prices, ec2=ec2) if accelerated else {}
    found = {}
    for instance in instances:
        kind = instance["InstanceType"]
        if kind not in counts:
            continue
        attribution = attribution_for(
            kind,
            {tag["Key"]: tag["Value"] for tag in instance.get("Tags", [])},
            counts[kind],
            region=region,
            lifecycle=instance.get("InstanceLifecycle"),
            zone=instance.get("Placement", {}).get("AvailabilityZone"),
            pool_caps=settings.pool_max_runtimes,
            default_cap=settings.default_max_runtime,
            tenants=settings.tenants,
        )
        if attribution is not None:
            found[instance["InstanceId"]] = attribution
    return found


def describe_hosts(
    changes: Sequence[StateChange], *, place_clients: PlaceClients, prices: PriceTable, settings: Settings
) -> dict[str, Described]:
    """What EC2 says now of each host it still describes, asked in the host's account and region.

    Keyed by instance id alone: EC2 gives every instance a unique id, in every account (docs/ledger.md,
    *Accounts*), so a host's events from two accounts cannot be confused."""
    by_place: dict[tuple[str, str], set[str]] = defaultdict(set)
    for change in changes:
        by_place[(change.account, change.region)].add(change.instance_id)
    found: dict[str, Described] = {}
    for (account, region), instance_ids in sorted(by_place.items()):
        ordered = sorted(instance_ids)
        ec2 = place_clients(account, region)("ec2", region)
        instances = []
        for start in range(0, len(ordered), FILTER_VALUES_LIMIT):
            chunk = ordered[start : start + FILTER_VALUES_LIMIT]
            # A filter, not InstanceIds: an id EC2 has forgotten is absent, not an error for all.
            pages = ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": "instance-id", "Values": chunk}]
            )
            instances += [
                item for page in pages for group in page["Reservations"] for item in group["Instances"]
            ]
        attributions = attribute_instances(
            instances, region=region, prices=prices, settings=settings, ec2=ec2
        )
        for instance in instances:
            host_tags = {tag["Key"]: tag["Value"] for tag in instance.get("Tags", [])}
            found[instance["InstanceId"]] = Described(
                attributions.get(instance["InstanceId"]),
                to_ms(instance["LaunchTime"]),
                owner_of(host_tags),
                tenant_refused(host_tags, settings.tenants),
            )
    return found


@dataclass
class Attributed:
    """Changes made transitions (:func:`attribute_changes`), before they are appended."""

    transitions: list[Transition] = field(default_factory=list)
    result: MeterResult = field(default_factory=MeterResult)  # what was skipped, and why
    owners: dict[str, str | None] = field(default_factory=dict)  # instance id → parkbrake:owner

    def add(self, other: Attributed) -> None:
        self.transitions += other.transitions
        self.result.add(other.result)
        self.owners |= other.owners


def meter(
    changes: Sequence[StateChange],
    *,
    store: LedgerStore,
    clients: ClientFactory,
    settings: Settings,
    received_at: datetime,
    source: str = GUARDRAIL,
    prices: PriceTable | None = None,
    place_clients: PlaceClients | None = None,
) -> MeterResult:
    """Attribute and append ``changes``; raises on AWS or database errors (nothing is half-written).
    ``place_clients`` reaches each host's account (default: ``clients``'s own)."""
    attributed = attribute_changes(
        changes, store=store, clients=clients, settings=settings, prices=prices, received_at=received_at,
        place_clients=place_clients,
    )  # fmt: skip
    # Settled in the same call: the budget check that follows reads the runway at once.
    appended = store.append(attributed.transitions, source=source, received_at=received_at, settled=True)
    return account(attributed, appended, store=store, received_at=received_at)


def attribute_changes(
    changes: Sequence[StateChange],
    *,
    store: LedgerStore,
    clients: ClientFactory,
    settings: Settings,
    prices: PriceTable | None = None,
    received_at: datetime | None = None,
    place_clients: PlaceClients | None = None,
) -> Attributed:
    """Each change with its host's attribution, or skipped with the reason; one more than the clock
    skew after ``received_at`` is refused as from the future (every path: meter, replay,
    reconciler, ingest).

    A host's attribution is captured when its interval opens: EC2's description applies from the
    host's current launch on; for earlier events the ledger's own record of the host stands, and a
    start the ledger has no record of is metered as the host's current type for tenant and pool
    ``unattributed`` (``metered_unattributed``, with the reason): it was paid for.
    """
    table = prices or load_price_table()
    future = [] if received_at is None else [
        {"event_id": c.event_id, "instance_id": c.instance_id, "reason": why}
        for c in changes if (why := from_the_future(c, received_at)) is not None
    ]  # fmt: skip
    if future:
        refused = {note["event_id"] for note in future}
        changes = [change for change in changes if change.event_id not in refused]
    reach = place_clients or own_place_clients(clients)
    described = describe_hosts(changes, place_clients=reach, prices=table, settings=settings)
    launched = {instance_id: host.launched_ms for instance_id, host in described.items()}
    earlier = [
        (change.instance_id, change.at_ms)
        for change in changes
        if change.at_ms < launched.get(change.instance_id, UNBOUNDED_MS) - LAUNCH_SLACK_MS
    ]
    remembered = store.attributions_at(earlier) if earlier else {}
    attributed = Attributed(owners={instance_id: host.owner for instance_id, host in described.items()})
    result = attributed.result
    result.skipped += future
    for change in changes:
        host = described.get(change.instance_id)
        remembered_then = remembered.get((change.instance_id, change.at_ms))
        if (attribution := _attribution_of(change, host, remembered_then, result)) is not None:
            attributed.transitions.append(
                Transition(
                    change.event_id,
                    change.instance_id,
                    change.state,
                    change.at_ms,
                    attribution,
                    change.account,
                )
            )
    return attributed


def _attribution_of(
    change: StateChange, host: Described | None, remembered: Attribution | None, result: MeterResult
) -> Attribution | None:
    """The attribution ``change`` is metered under (``remembered``: the ledger's, at its time), or None
    with the reason noted in ``result``."""
    note = {"event_id": change.event_id, "instance_id": change.instance_id}
    attribution = remembered
    if attribution is None and host is not None and change.at_ms >= host.launched_ms - LAUNCH_SLACK_MS:
        if host.attribution is None:
            result.skipped.append(note | {"reason": "not an accelerator instance type"})
            return None
        attribution = host.attribution
        if host.tenant_refused is not None and change.state == "running":
            result.unknown_tenants.append(note | {"owner": host.owner or "-", "reason": host.tenant_refused})
    if attribution is None and host is not None and change.state != "running" and host.attribution:
        # A stop never opens an interval: any attribution closes it. Not the current launch's
        # tenant, though: an event with a tenant says whose its launch was (docs/ledger.md).
        attribution = replace(host.attribution, tenant=UNATTRIBUTED, pool=UNATTRIBUTED)
    if attribution is None and host is not None and host.attribution is not None:
        # Paid for, so metered: as the host's current type (all EC2 still says of it), for
        # tenant and pool unattributed, since its tags then are unknown.
        attribution = replace(host.attribution, tenant=UNATTRIBUTED, pool=UNATTRIBUTED)
        result.metered_unattributed.append(
            note
            | {
                "at": from_ms(change.at_ms).isoformat(),
                "reason": f"before the host's current launch at {from_ms(host.launched_ms).isoformat()}, "
                f"unknown to the ledger: metered as its current type {host.attribution.instance_type} "
                f"for tenant {UNATTRIBUTED}",
            }
        )
    if attribution is None:
        if host is None:
            result.unattributed.append(note | {"reason": "unknown to EC2 and to the ledger"})
        else:
            result.skipped.append(
                note
                | {
                    "reason": f"before the host's current launch at {from_ms(host.launched_ms).isoformat()}: "
                    "its type and tags then are unknown to EC2 and to the ledger"
                }
            )
        return None
    return attribution


def account(
    attributed: Attributed, appended: AppendResult, *, store: LedgerStore, received_at: datetime
) -> MeterResult:
    """The meter's result once ``attributed`` is appended: counts, what the ledger refused, and the
    hosts that started with no price in effect at ``received_at``."""
    result = MeterResult()
    result.add(attributed.result)
    transitions = attributed.transitions
    result.inserted, result.duplicates = appended.inserted, appended.duplicates
    result.tenants = set(appended.tenants)
    result.outcomes = dict(appended.outcomes)
    started = [
        t for t in transitions if t.state == "running" and appended.outcomes.get(t.event_id) == APPENDED
    ]
    if started:
        in_effect = store.prices_at([PriceKey.of(t.attribution) for t in started], received_at)
        result.unpriced = [
            {
                "event_id": t.event_id,
                "instance_id": t.instance_id,
                "instance_type": t.attribution.instance_type,
                "region": t.attribution.region,
                "tenant": t.attribution.tenant,
                "owner": attributed.owners.get(t.instance_id) or "-",
            }
            for t in started
            if in_effect.get(PriceKey.of(t.attribution)) is None
        ]
    return result


def alert_unpriced(
    unpriced: Sequence[Mapping[str, str]], *, settings: Settings, clients: ClientFactory
) -> list[dict[str, str]]:
    """Unpriced hosts reach a person: a counted action (metric) and an SNS message naming the fix.

    Returns the notifier's errors (also counted), never raises: the events are metered already, and
    the heartbeat must not hang on the alert."""
    if not unpriced:
        return []
    kinds = sorted({f"{note['instance_type']} in {note['region']}" for note in unpriced})
    heartbeat.count_action(GUARDRAIL, "unpriced", "no-price", len(unpriced))
    owner_names = [owner for owner in dict.fromkeys(note["owner"] for note in unpriced) if owner != "-"]
    hosts = ", ".join(f"{note['instance_id']} (owner {note['owner']})" for note in unpriced)
    message = (
        f"{len(unpriced)} host(s) of {', '.join(kinds)} started with no price in the ledger: {hosts}. "
        "They are metered in exact seconds and count toward no budget until priced: run `parkbrake "
        "pricing refresh`, then `parkbrake ledger migrate` (which records new prices; a type's first "
        f"price in a region covers its past usage there).\n{owners_line(owner_names)}"
    )
    return alert("unpriced accelerator hosts", message, owner_names, settings=settings, clients=clients)


def alert_unattributed(
    metered: Sequence[Mapping[str, str]], *, settings: Settings, clients: ClientFactory
) -> list[dict[str, str]]:
    """Usage metered for tenant ``unattributed`` (``MeterResult.metered_unattributed``) reaches a
    person as unpriced hosts do: a counted action and an SNS message naming the fix, ``parkbrake
    ledger attribute``. Returns the notifier's errors, never raises."""
    if not metered:
        return []
    heartbeat.count_action(GUARDRAIL, "unattributed", "no-tenant", len(metered))
    first: dict[str, str] = {}
    for note in sorted(metered, key=lambda item: item.get("at", "")):
        first.setdefault(note["instance_id"], note.get("at", ""))
    hosts = ", ".join(f"{instance_id} (from {at})" for instance_id, at in sorted(first.items()))
    instance_id, since = min(first.items())
    message = (
        f"{len(metered)} start(s) of {len(first)} host(s) metered for tenant {UNATTRIBUTED}: {hosts}. "
        "Each ran before its host's current launch and the ledger has no record of whose it was; the "
        "usage counts toward no tenant's budget. An event of the same launch that names its tenant "
        "attributes it by itself; else attribute it: `parkbrake ledger attribute "
        f"{instance_id} --tenant TENANT --since {since} --reason TEXT` (and so for each host)."
    )
    return alert("usage metered for no tenant", message, settings=settings, clients=clients)


def alert_unknown_tenants(
    metered: Sequence[Mapping[str, str]], *, settings: Settings, clients: ClientFactory
) -> list[dict[str, str]]:
    """Starts of hosts whose ``parkbrake:tenant`` tag names no declared tenant
    (``MeterResult.unknown_tenants``: metered for ``unattributed``) reach a person: the counted action
    ``unattributed``/``unknown-tenant`` (the UnknownTenantTag alert) and an SNS message to the hosts'
    owners naming the fix. Returns the notifier's errors, never raises."""
    if not metered:
        return []
    heartbeat.count_action(GUARDRAIL, "unattributed", "unknown-tenant", len(metered))
    owner_names = [owner for owner in dict.fromkeys(note["owner"] for note in metered) if owner != "-"]
    hosts = ", ".join(f"{note['instance_id']} ({note['reason']}, owner {note['owner']})" for note in metered)
    declared = (
        ", ".join(sorted(settings.tenants)) if settings.tenants is not None else "any valid tenant name"
    )
    message = (
        f"{len(metered)} start(s) metered for tenant {UNATTRIBUTED}: {hosts}. A host's parkbrake:tenant tag "
        f"must be one of the stack's tenants exactly ({declared}); its usage counts toward no tenant's "
        "budget until it is. Retag the host with its tenant (its next event attributes the launch), or "
        f"attribute it: `parkbrake ledger attribute {metered[0]['instance_id']} --tenant TENANT --since WHEN "
        f"--reason TEXT`.\n{owners_line(owner_names)}"
    )
    return alert(
        "hosts tagged with an unknown tenant", message, owner_names, settings=settings, clients=clients
    )


def account_of(context: object) -> str | None:
    """The account the running Lambda belongs to, from its ARN (``arn:aws:lambda:REGION:ACCOUNT:...``)."""
    return account_of_arn(getattr(context, "invoked_function_arn", None))


def refuse_relayed(refused: Exception, *, settings: Settings, clients: ClientFactory) -> dict[str, Any]:
    """A relayed ``Guardrail Decisions`` event the decision log does not take (a forgery, or a writer's
    bug): nothing is appended, it is not retried, and it reaches a person: the counted action
    ``refuse``/``forged-decisions`` (which the stack's alarm watches) and an SNS message."""
    log.error("refused relayed decisions: %s", refused)
    heartbeat.count_action(GUARDRAIL, "refuse", "forged-decisions")
    message = (
        f"{refused}. Only the reaper's and the deadlines' roles may put events on the stack's decision bus; "
        "nothing of this event was written to the decision log. Find who sent it in CloudTrail "
        "(eventName PutEvents on the bus) and check the bus's resource policy."
    )
    errors = alert("forged guardrail decisions refused", message, settings=settings, clients=clients)
    return {"refused": str(refused), **({"errors": errors} if errors else {})}


def alert(
    what: str, message: str, owner_names: Sequence[str] = (), *, settings: Settings, clients: ClientFactory
) -> list[dict[str, str]]:
    """Publish an alert to the stack's topic; the notifier's errors (counted), never raised."""
    if settings.sns_topic_arn is None:  # the counted action still shows on the dashboard
        log.error("cannot alert about %s: PARKBRAKE_SNS_TOPIC_ARN is not set. %s", what, message)
        return []
    try:
        notices.publish(settings.sns_topic_arn, f"parkbrake: {what}", message, owner_names, clients=clients)
    except Exception as error:  # the notifier's failure is an error in the result and a metric
        reason = describe_error(error) if isinstance(error, AWS_ERRORS) else type(error).__name__
        log.error("could not alert about %s: %s", what, reason)
        heartbeat.count_action(GUARDRAIL, "error", "notify")
        return [{"action": "notify", "error": reason}]
    return []


def meter_event(
    change: StateChange,
    *,
    store: LedgerStore,
    clients: ClientFactory,
    settings: Settings,
    now: datetime,
    invoked_function_arn: str | None = None,
    place_clients: PlaceClients | None = None,
    spokes: SpokeList | None = None,
) -> dict[str, Any]:
    """The meter Lambda's run: meter ``change``, alert about hosts started with no price, check the
    budgets of the tenants whose usage changed, and record the heartbeat.

    An event of an account the meter does not take (:func:`refusal_of`) is one log line and
    ``{"refused": why}``: nothing is appended, and it is not retried. A hub's meter
    (``settings.member_accounts``, and the spokes' accounts when ``settings.spokes_parameter`` names
    their list: ``spokes`` is the container's, a fresh one by default) reads member accounts' hosts
    through their spoke roles (``lambdas.aws.spoke_clients``), unless ``place_clients`` is given."""
    own_account = account_of_arn(invoked_function_arn)
    spokes = spokes or SpokeList()
    settings = with_spoke_accounts(settings, clients, spokes, account=change.account, own_account=own_account)
    if (refused := refusal_of(change, settings=settings, own_account=own_account)) is not None:
        log.error("refused: %s", refused)
        return {"refused": refused}
    if place_clients is None:
        place_clients = place_clients_for(settings, clients, own_account=own_account)
    result = meter(
        [change],
        store=store,
        clients=clients,
        settings=settings,
        received_at=now,
        place_clients=place_clients,
    )
    for note in result.unattributed + result.skipped:
        log.warning("not metered: %s", note)
    alerted = alert_unpriced(result.unpriced, settings=settings, clients=clients)
    alerted += alert_unattributed(result.metered_unattributed, settings=settings, clients=clients)
    alerted += alert_unknown_tenants(result.unknown_tenants, settings=settings, clients=clients)
    outcome: dict[str, Any] = result.as_dict() | ({"errors": alerted} if alerted else {})
    if result.tenants:
        run = budgeting.enforce_budgets(
            store,
            budgeting.AwsEnforcer.from_settings(
                settings,
                clients,
                invoked_function_arn=invoked_function_arn,
                spoke_places=spokes.known_places(),
            ),
            now=now,
            default_cap=settings.default_max_runtime,
            tenants=sorted(result.tenants),
        )
        outcome["budget"] = run.as_dict()
    heartbeat.record_success(GUARDRAIL, stack=settings.stack, cloudwatch=clients("cloudwatch", None), now=now)
    return outcome
