"""``parkbrake status`` without click: what is running right now, and what it is costing.

Regions are read concurrently (one thread each); inside a region every listing is paginated, so the
number of calls grows with pages, not hosts. GPU hosts are listed exactly as the reaper lists them
(``lambdas.aws.ec2_hosts.list_hosts``), so status shows what the sweep judges.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from cli.oncall.concurrently import side_by_side
from cli.oncall.ecs import cluster_services, describe_task_definition
from cli.oncall.fleet.alarms import AlarmTopic, RegionAlarmTopics
from cli.oncall.fleet.capacity import GroupStatus, groups_of, service_traffic
from cli.oncall.fleet.stopped import StoppedHost, stopped_too_long_in
from cli.oncall.nightly.schedules import Schedule, closed_days_of, list_schedules
from cli.oncall.park.records import ParkRecord
from cli.oncall.stack_inventory import ecs_tags, park_parameter_value, unknown_stack
from guardrails import names, tags
from guardrails.closed_days import ClosedDays
from guardrails.deadlines import Deadline
from guardrails.errors import ParkbrakeError
from guardrails.hosts import Host
from guardrails.pricing import PriceTable, load_price_table
from guardrails.rules.base import SweepPolicy
from guardrails.settings import Settings
from guardrails.sweep import host_deadline, policy_from_settings
from lambdas.aws.ec2_hosts import list_hosts, live_stacks
from lambdas.aws.environment import ClientFactory
from lambdas.aws.errors import describe_error
from lambdas.aws.park_switches import OrganisationSwitch, organisation_switches_on

if TYPE_CHECKING:
    from guardrails.runway import TenantRunway

MINIMUM_BILLED = timedelta(seconds=60)  # AWS bills per second, with a minute's minimum per start
SECONDS_PER_HOUR = Decimal(3600)
CENTS = Decimal("0.01")
REVISION_LABEL = "parkbrake.revision"  # the docker label deploys put on task definitions
LedgerSource = Callable[[Sequence[str]], "list[TenantRunway]"]


@dataclass(frozen=True)
class HostStatus:
    host: Host
    deadline: Deadline | None  # None for a host outside the guardrails (not managed)
    usd_per_hour: Decimal | None  # None when the price table lacks the type
    accelerators: int | None
    now: datetime
    account: str | None = None  # across the organisation: the account's name (cli/oncall/organisation.py)

    @property
    def age(self) -> timedelta:
        return self.now - self.host.launch_time

    @property
    def time_left(self) -> timedelta | None:
        return None if self.deadline is None else self.deadline.enforce_at - self.now

    @property
    def exempt(self) -> bool:
        exempt_until = self.deadline.exempt_until if self.deadline else None
        return exempt_until is not None and exempt_until > self.now

    @property
    def cost_so_far(self) -> Decimal | None:
        """On-demand cost since the last start, billed per second with AWS's 60-second minimum."""
        if self.usd_per_hour is None:
            return None
        billed = max(self.age, MINIMUM_BILLED)
        return self.usd_per_hour * Decimal(int(billed.total_seconds())) / SECONDS_PER_HOUR

    @property
    def cost_today(self) -> Decimal:
        """On-demand cost since midnight UTC (or the last start, if later); 0 when the price is unknown."""
        if self.usd_per_hour is None:
            return Decimal(0)
        midnight = self.now.replace(hour=0, minute=0, second=0, microsecond=0)
        billed = self.now - max(self.host.launch_time, midnight)
        if self.host.launch_time >= midnight:
            billed = max(billed, MINIMUM_BILLED)
        return self.usd_per_hour * Decimal(int(billed.total_seconds())) / SECONDS_PER_HOUR

    @property
    def state(self) -> str:
        """What it needs: overdue (past its deadline), unmanaged, tag problems, exempt, or running."""
        if not self.host.managed or self.deadline is None:
            return "unmanaged"
        if self.deadline.due(self.now):
            return "overdue"
        if self.deadline.problems:
            return "bad-tags"
        return "exempt" if self.exempt else "running"

    def as_dict(self) -> dict[str, Any]:
        host, deadline, time_left = self.host, self.deadline, self.time_left
        return {
            "instance_id": host.instance_id,
            **({"account": self.account} if self.account is not None else {}),
            "region": host.region,
            "stack": host.tags.get(tags.STACK),
            "pool": host.pool,
            "tenant": host.tenant,
            "instance_type": host.instance_type,
            "accelerators": self.accelerators,
            "managed": host.managed,
            "autoscaling_group": host.autoscaling_group,
            "launched": host.launch_time.isoformat(),
            "age_seconds": int(self.age.total_seconds()),
            "deadline": deadline.enforce_at.isoformat() if deadline else None,
            "time_left_seconds": None if time_left is None else int(time_left.total_seconds()),
            "exempt": self.exempt,
            "exempt_until": deadline.exempt_until.isoformat() if deadline and deadline.exempt_until else None,
            "usd_per_hour": _number(self.usd_per_hour),
            "cost_so_far_usd": _number(self.cost_so_far),
            "problems": list(deadline.problems) if deadline else [],
            "state": self.state,
        }


@dataclass(frozen=True)
class ServiceStatus:
    region: str
    stack: str
    name: str
    colour: str | None
    desired: int
    running: int
    pending: int
    task_definition: str | None  # family:revision that the PRIMARY deployment runs
    revision: str | None  # the git commit, from the task definition's tag or label
    rollout: str | None  # the primary deployment's rollout state
    traffic: str | None = None  # where the load balancer sends it traffic; None: behind none
    park_record: ParkRecord | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "stack": self.stack,
            "cluster": names.ecs_cluster(self.stack),
            "name": self.name,
            "colour": self.colour,
            "desired": self.desired,
            "running": self.running,
            "pending": self.pending,
            "task_definition": self.task_definition,
            "revision": self.revision,
            "rollout": self.rollout,
            "traffic": self.traffic,
            "park_record": self.park_record.as_dict() if self.park_record else None,
        }


@dataclass(frozen=True)
class StackStatus:
    stack: str
    region: str
    park_value: str | None  # the SSM park parameter's text; None when absent
    schedules: list[Schedule]
    # The calendars of closed days the nightly starts name, by SSM parameter: their next run skips those.
    calendars: dict[str, ClosedDays] = field(default_factory=dict)
    alarms: AlarmTopic | None = None  # the alarm topic and who it reaches
    account: str | None = None  # across the organisation: the account's name
    # The organisation's park switches on in its account and region: its launcher refuses every start.
    organisation: tuple[OrganisationSwitch, ...] = ()

    @property
    def parked(self) -> bool | None:
        return {"true": True, "false": False}.get((self.park_value or "").strip().lower())

    def next_start(self, now: datetime) -> tuple[Schedule, datetime] | None:
        """The nightly start that fires first, and when."""
        upcoming = [
            (schedule, schedule.next_open_run(now, self.calendars.get(schedule.calendar or ""))[0])
            for schedule in self.schedules
            if schedule.kind == "nightly"
        ]
        timed = [(schedule, moment) for schedule, moment in upcoming if moment is not None]
        return min(timed, key=lambda pair: pair[1]) if timed else None

    def as_dict(self, now: datetime) -> dict[str, Any]:
        start = self.next_start(now)
        return {
            "stack": self.stack,
            **({"account": self.account} if self.account is not None else {}),
            "region": self.region,
            "parked": self.parked,
            "park_parameter": self.park_value,
            "next_start": (
                {"schedule": start[0].name, "pool": start[0].pool, "at": start[1].isoformat()}
                if start
                else None
            ),
            "schedules": [
                schedule.as_dict(now, self.calendars.get(schedule.calendar or ""))
                for schedule in self.schedules
            ],
            "alarms": self.alarms.as_dict() if self.alarms else None,
            "organisation_parked": [{"parameter": on.parameter, "hub": on.hub} for on in self.organisation],
        }


@dataclass
class FleetStatus:
    now: datetime
    regions: list[str]
    hosts: list[HostStatus] = field(default_factory=list)
    services: list[ServiceStatus] = field(default_factory=list)
    stacks: list[StackStatus] = field(default_factory=list)
    groups: list[GroupStatus] = field(default_factory=list)
    stopped: list[StoppedHost] = field(default_factory=list)  # stopped past guardrails.stopped_retention
    ledger: list[TenantRunway] | None = None  # None: no ledger configured
    errors: list[str] = field(default_factory=list)
    unlisted_regions: list[str] = field(default_factory=list)  # where the GPU hosts could not be listed
    accounts: int | None = None  # across the organisation: how many accounts were asked

    def summary(self) -> dict[str, Any]:
        """The counts an on-call engineer reads first."""
        states = Counter(host.state for host in self.hosts)
        emails = [email for stack in self.stacks if stack.alarms for email in stack.alarms.emails]
        return {
            "hosts": len(self.hosts),
            "accelerators": self.accelerators,
            "usd_per_hour": _number(self.burn_usd_per_hour),
            "spent_today_usd": _number(sum((host.cost_today for host in self.hosts), Decimal(0))),
            "overdue": states["overdue"],
            "unmanaged": states["unmanaged"],
            # What the hosts no guardrail may stop cost each hour: the finding's size, not just its count.
            "unmanaged_usd_per_hour": _number(
                sum((h.usd_per_hour or Decimal(0) for h in self.hosts if h.state == "unmanaged"), Decimal(0))
            ),
            "bad_tags": states["bad-tags"],
            "exempt": states["exempt"],
            "parked_stacks": sorted(stack.stack for stack in self.stacks if stack.parked),
            # Stacks whose launcher an organisation's park switch refuses (their own switch aside).
            "organisation_parked_stacks": sorted(
                {stack.stack for stack in self.stacks if stack.organisation}
            ),
            "stacks": len(self.stacks),
            "stopped_too_long": len(self.stopped),
            "stopped_monthly_usd": _number(sum((h.storage.monthly_usd for h in self.stopped), Decimal(0))),
            # An alarm e-mail still pending confirmation receives nothing: nobody is paged there yet.
            "alarm_emails_confirmed": sum(email.confirmed for email in emails),
            "alarm_emails_unconfirmed": sum(not email.confirmed for email in emails),
        }

    @property
    def burn_usd_per_hour(self) -> Decimal:
        return sum((host.usd_per_hour or Decimal(0) for host in self.hosts), Decimal(0))

    @property
    def cost_so_far(self) -> Decimal:
        return sum((host.cost_so_far or Decimal(0) for host in self.hosts), Decimal(0))

    @property
    def accelerators(self) -> int:
        return sum(host.accelerators or 0 for host in self.hosts)

    def by_tenant(self) -> dict[str, list[HostStatus]]:
        grouped: dict[str, list[HostStatus]] = {}
        for host in self.hosts:
            grouped.setdefault(host.host.tenant or "(untagged)", []).append(host)
        return dict(sorted(grouped.items()))

    def tenant_rows(self) -> list[dict[str, Any]]:
        ledger = {status.tenant: status for status in self.ledger or []}
        rows = []
        for tenant in sorted(self.by_tenant().keys() | ledger.keys()):
            hosts = self.by_tenant().get(tenant, [])
            rows.append(
                {
                    "tenant": tenant,
                    "hosts": len(hosts),
                    "accelerators": sum(host.accelerators or 0 for host in hosts),
                    "usd_per_hour": _number(
                        sum((host.usd_per_hour or Decimal(0) for host in hosts), Decimal(0))
                    ),
                    "cost_so_far_usd": _number(
                        sum((host.cost_so_far or Decimal(0) for host in hosts), Decimal(0))
                    ),
                    "ledger": ledger[tenant].as_dict() if tenant in ledger else None,
                }
            )
        return rows

    def as_dict(self) -> dict[str, Any]:
        return {
            "now": self.now.isoformat(),
            **({"accounts": self.accounts} if self.accounts is not None else {}),
            "regions": self.regions,
            "hosts": [host.as_dict() for host in self.hosts],
            "services": [service.as_dict() for service in self.services],
            "stacks": [stack.as_dict(self.now) for stack in self.stacks],
            "groups": [group.as_dict() for group in self.groups],
            "stopped_too_long": [stopped.as_dict() for stopped in self.stopped],
            "summary": self.summary(),
            "totals": {
                "hosts": len(self.hosts),
                "accelerators": self.accelerators,
                "usd_per_hour": _number(self.burn_usd_per_hour),
                "cost_so_far_usd": _number(self.cost_so_far),
            },
            "tenants": self.tenant_rows(),
            "ledger": "configured" if self.ledger is not None else "not configured",
            "errors": self.errors,
        }


def _number(value: Decimal | None) -> float | None:
    return None if value is None else float(value.quantize(CENTS))


def fleet_status(
    *,
    stack: str | None,
    regions: Sequence[str],
    clients: ClientFactory,
    settings: Settings,
    now: datetime,
    ledger: LedgerSource | None = None,
) -> FleetStatus:
    """Read every region at once; one region's API error is reported and the others still shown."""
    status = FleetStatus(now=now, regions=list(regions))
    parts = side_by_side(
        [partial(read_region, region, stack, clients, settings, now) for region in regions], "status"
    )
    merge_parts(status, parts)
    found = (
        status.hosts
        or status.services
        or status.stopped
        or any(s.park_value or s.schedules for s in status.stacks)
    )
    if stack is not None and not found and not status.errors:
        problem = f"stack {stack!r} has nothing in {', '.join(regions)}: no park parameter, GPU hosts, services or schedules"
        raise unknown_stack(
            problem, stack, regions, lambda region: clients("ssm", region), region_flag="--regions"
        )
    if ledger is not None:
        tenants = sorted({host.host.tenant for host in status.hosts if host.host.tenant})
        status.ledger = ledger(tenants)
    return status


def merge_parts(status: FleetStatus, parts: Sequence[RegionPart]) -> None:
    """The regions' (or accounts' and regions') parts as one report, hosts in a stable order."""
    for part in parts:
        status.hosts += part.hosts
        status.services += part.services
        status.stacks += part.stacks
        status.groups += part.groups
        status.stopped += part.stopped
        status.errors += part.errors
        status.unlisted_regions += part.unlisted_regions
    status.hosts.sort(
        key=lambda host: (
            host.account or "",
            host.host.region,
            host.host.tags.get(tags.STACK) or "",
            host.host.instance_id,
        )
    )


@dataclass
class RegionPart:
    hosts: list[HostStatus] = field(default_factory=list)
    services: list[ServiceStatus] = field(default_factory=list)
    stacks: list[StackStatus] = field(default_factory=list)
    groups: list[GroupStatus] = field(default_factory=list)
    stopped: list[StoppedHost] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unlisted_regions: list[str] = field(default_factory=list)


def read_region(
    region: str, stack: str | None, clients: ClientFactory, settings: Settings, now: datetime
) -> RegionPart:
    """One region: the host listing (the longest read) runs while the stacks are read."""
    part = RegionPart()
    alarm_topics = RegionAlarmTopics(partial(clients, "sns"), region, Path("."))
    deployed: list[str] = []
    organisation: list[OrganisationSwitch] = []

    def read_stacks() -> None:
        organisation.extend(_organisation_switches(part, clients("ssm", region), region))
        deployed.extend([stack] if stack else _deployed_stacks(clients("ssm", region), region, part.errors))
        for name in deployed:
            _read_stack(part, name, region, clients, alarm_topics, organisation=organisation)

    listing: tuple[list[HostStatus], list[str]]
    stopped: tuple[list[StoppedHost], list[str]]
    listing, _, stopped = side_by_side(
        [
            partial(_hosts_of, region, stack, clients, settings, now),
            read_stacks,
            partial(
                stopped_too_long_in,
                clients("ec2", region),
                region,
                stack,
                retention=settings.stopped_retention,
                now=now,
            ),
        ],
        f"status-{region}",
    )
    # A region whose instances cannot be listed says so once, not again for its stopped hosts.
    part.hosts, part.errors = listing[0], listing[1] + part.errors + (stopped[1] if not listing[1] else [])
    part.stopped = stopped[0]
    if listing[1]:
        part.unlisted_regions.append(region)
    named = {
        host.host.tags[tags.STACK]
        for host in part.hosts
        if host.host.managed and tags.STACK in host.host.tags
    }
    for name in sorted(named - set(deployed)) if not stack else []:
        _read_stack(part, name, region, clients, alarm_topics, organisation=organisation)
    return part


def _organisation_switches(part: RegionPart, ssm: Any, region: str) -> list[OrganisationSwitch]:
    """A listing that fails or a switch neither true nor false is an error line (exit 1), never "off"."""
    try:
        return organisation_switches_on(ssm, region)
    except ParkbrakeError as error:
        part.errors.append(f"{region}: {error}")
        return []


def _hosts_of(
    region: str, stack: str | None, clients: ClientFactory, settings: Settings, now: datetime
) -> tuple[list[HostStatus], list[str]]:
    try:
        listed = running_accelerator_hosts(clients("ec2", region), region, stack)
    except ClientError as error:
        return [], [f"{region}: cannot list instances: {describe_error(error)}"]
    prices, policy = load_price_table(), policy_from_settings(settings)
    return [_host_status(host, prices, policy, now) for host in listed], []


def _read_stack(
    part: RegionPart,
    name: str,
    region: str,
    clients: ClientFactory,
    alarm_topics: RegionAlarmTopics,
    *,
    organisation: Sequence[OrganisationSwitch] = (),
) -> None:
    try:
        part.services += services_of(clients("ecs", region), clients("elbv2", region), region, name)
        part.groups += groups_of(clients("autoscaling", region), region, name)
        schedules = list_schedules(clients("scheduler", region), name)
        part.stacks.append(
            StackStatus(
                name,
                region,
                park_parameter_value(clients("ssm", region), name),
                schedules,
                _calendars(part, schedules, clients("ssm", region), f"{region} stack {name}"),
                _alarm_topic(part, name, region, alarm_topics),
                organisation=tuple(organisation),
            )
        )
    except ClientError as error:
        part.errors.append(f"{region} stack {name}: {describe_error(error)}")


def _alarm_topic(part: RegionPart, name: str, region: str, topics: RegionAlarmTopics) -> AlarmTopic:
    """Subscriptions that cannot be read are an error line; the stack is still shown, its alarms unknown."""
    arn = None
    try:
        arn = topics.topic_arn(name)
        return AlarmTopic(arn, topics.subscriptions(arn) if arn else ())
    except ClientError as error:
        problem = describe_error(error)
        part.errors.append(f"{region} stack {name}: alarm subscriptions unknown: {problem}")
        return AlarmTopic(arn, error=problem)


def _calendars(part: RegionPart, schedules: list[Schedule], ssm: Any, where: str) -> dict[str, ClosedDays]:
    """A calendar that cannot be read is an error line; the next start is then shown without it."""
    try:
        return closed_days_of(schedules, ssm)
    except (ClientError, ParkbrakeError) as error:
        part.errors.append(f"{where}: {error}")
        return {}


def running_accelerator_hosts(ec2: Any, region: str, stack: str | None) -> list[Host]:
    """The sweep's own listing (accelerator types filtered server-side, paginated), narrowed to ``stack``."""
    hosts = list_hosts(ec2, region)
    return hosts if stack is None else [host for host in hosts if host.tags.get(tags.STACK) == stack]


def _host_status(host: Host, prices: PriceTable, policy: SweepPolicy, now: datetime) -> HostStatus:
    price = prices.on_demand_in(host.instance_type, host.region)
    return HostStatus(
        host=host,
        deadline=host_deadline(host, policy, now),
        usd_per_hour=price.usd_per_hour if price else None,
        accelerators=price.accelerators if price else None,
        now=now,
    )


def _deployed_stacks(ssm: Any, region: str, errors: list[str]) -> list[str]:
    """Every stack deployed in the region, known by its park parameter."""
    try:
        return live_stacks(ssm)
    except ClientError as error:
        errors.append(f"{region}: cannot list stacks: {describe_error(error)}")
        return []


def services_of(ecs: Any, elbv2: Any, region: str, stack: str) -> list[ServiceStatus]:
    revisions: dict[str, tuple[str | None, str | None]] = {}
    statuses = []
    described = cluster_services(ecs, names.ecs_cluster(stack))
    traffic = service_traffic(elbv2, described)
    for service in described:
        primary: dict[str, Any] = next(
            (item for item in service.get("deployments", []) if item.get("status") == "PRIMARY"), {}
        )
        # What the PRIMARY deployment runs: after a rollback it differs from what was last asked for.
        arn = primary.get("taskDefinition") or service.get("taskDefinition")
        if arn and arn not in revisions:
            revisions[arn] = _task_definition_revision(ecs, arn)
        family_revision, revision = revisions.get(arn, (None, None)) if arn else (None, None)
        service_tags = ecs_tags(service)
        statuses.append(
            ServiceStatus(
                region=region,
                stack=stack,
                name=service["serviceName"],
                colour=service_tags.get(tags.COLOUR),
                desired=int(service.get("desiredCount", 0)),
                running=int(service.get("runningCount", 0)),
                pending=int(service.get("pendingCount", 0)),
                task_definition=family_revision,
                revision=revision or service_tags.get(tags.REVISION),
                rollout=primary.get("rolloutState"),
                traffic=traffic.get(service["serviceName"]),
                park_record=ParkRecord.parse(service_tags.get(tags.PARKED_CAPACITY)),
            )
        )
    return statuses


def _task_definition_revision(ecs: Any, arn: str) -> tuple[str | None, str | None]:
    """(family:revision, git revision) of a task definition: its tag, else its containers' label."""
    answer = describe_task_definition(ecs, arn)
    definition = answer["taskDefinition"]
    revision = ecs_tags(answer).get(tags.REVISION) or next(
        (
            container["dockerLabels"][REVISION_LABEL]
            for container in definition.get("containerDefinitions", [])
            if REVISION_LABEL in (container.get("dockerLabels") or {})
        ),
        None,
    )
    return f"{definition['family']}:{definition['revision']}", revision
