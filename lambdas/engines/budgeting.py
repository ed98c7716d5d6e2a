"""The budgeting engine: act on each tenant's runway, as its budget's ``actions`` say
(guardrails.runway.budget_decisions):
- notify: one SNS message when spent + committed first crosses a soft threshold (or the limit) in a
  period, never again that period, whatever runs or processes check it;
- deny: once the limit is reached the launcher and ``parkbrake run`` refuse (:class:`LedgerBudgetGate`);
- stop: once *spent* reaches the limit, the tenant's running managed GPU hosts are stopped through
  lambdas.aws.stop_path, the sweep's one Auto Scaling-aware stop path, and one SNS message lists them.

Every message names the owners of the hosts it is about (the running ones for a threshold, the
stopped ones for a stop) and carries them as the ``owner`` attribute, the tenant as ``tenant``.

Every action is written to the ledger's ``guardrail_actions`` with its reason, which makes it a
decision in the decision log in the same transaction, and is logged as a decision line. The actions go through
an :class:`~guardrails.runway.Enforcer`; :class:`AwsEnforcer` is the AWS one.

The budget Lambda's run is :func:`check_budgets`: on the one-minute clock it first asks EC2 whether
any managed accelerator host runs; with none, spend cannot grow and nothing can be stopped, so it
leaves the database alone and a parked Aurora cluster can pause (a clock every minute would hold it
awake at 0.5 ACU around the clock). The meter checks the tenants an event changed at once
(:func:`enforce_budgets`), and the launcher and ``parkbrake run`` admit through :class:`LedgerBudgetGate`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from guardrails import names, tags
from guardrails.decisions import Decision
from guardrails.errors import ParkbrakeError
from guardrails.hosts import Host
from guardrails.launch import Admission, AdmissionRequest
from guardrails.owners import owner_of, owners_line, owners_of
from guardrails.runway import (
    BudgetDecision,
    Enforcer,
    StopReport,
    TenantRunway,
    budget_decisions,
    budget_notice,
    crossing_at,
)
from guardrails.settings import Settings
from lambdas.aws import heartbeat, notices
from lambdas.aws.assumed import AssumeFailed
from lambdas.aws.deadline_schedules import arm_budget_crossing, disarm_budget_crossing
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.ec2_hosts import list_hosts
from lambdas.aws.environment import ClientFactory, default_clients, ledger_configured
from lambdas.aws.errors import AWS_ERRORS, describe_error
from lambdas.aws.spoke_clients import (
    PlaceClients,
    account_of_arn,
    guarded_places,
    own_place_clients,
    place_clients_for,
)
from lambdas.aws.spoke_list import SpokeList, member_reach
from lambdas.aws.stop_path import SpotAction, stop_hosts
from lambdas.ledger.store import LedgerStore, container_store

log = logging.getLogger(__name__)
GUARDRAIL = "budget"
# How long an admission holds its money for hosts that have not started yet.
DEFAULT_LEASE = timedelta(minutes=30)


@dataclass(frozen=True)
class CrossingTarget:
    """Where a budget crossing schedule lives and what it invokes, as whom."""

    group: str  # the Scheduler group (Settings.deadline_schedule_group)
    target_arn: str  # the budget Lambda
    role_arn: str  # the Scheduler role


def budget_function_arn(invoked_function_arn: str, stack: str) -> str:
    """The stack's budget Lambda, next to the function now running (the meter's or its own)."""
    parts = invoked_function_arn.split(":")
    return ":".join([*parts[:6], names.function_name(stack, GUARDRAIL)])


def crossing_target_of_caller(stack: str, *, caller_arn: str, region: str) -> CrossingTarget:
    """The stack's budget Lambda and Scheduler role as the Guardrails component names them in the
    caller's account (``sts get-caller-identity``): how the CLI arms a crossing after a change."""
    partition, account = caller_arn.split(":")[1], caller_arn.split(":")[4]
    return CrossingTarget(
        names.deadline_schedule_group(stack),
        f"arn:{partition}:lambda:{region}:{account}:function:{names.function_name(stack, GUARDRAIL)}",
        f"arn:{partition}:iam::{account}:role/{names.scheduler_role(stack)}",
    )


class AwsEnforcer:
    """Budget actions on AWS: SNS for notices, the shared stop path for hosts."""

    def __init__(
        self,
        *,
        clients: ClientFactory,
        regions: Sequence[str],
        topic_arn: str | None,
        spot_action: SpotAction,
        crossing: CrossingTarget | None = None,
        places: Sequence[tuple[str, str]] | None = None,
        place_clients: PlaceClients | None = None,
    ) -> None:
        """``places`` are the (account, region) pairs a tenant's hosts are looked for in (default:
        the own account, ``regions``); ``place_clients`` reaches each (lambdas.aws.spoke_clients):
        the hub's budget stops a tenant's hosts in every member account, since a tenant may span
        accounts."""
        self._clients = clients
        self._regions = tuple(regions)
        self._places = tuple(places) if places is not None else tuple(("", region) for region in regions)
        self._place_clients = place_clients or own_place_clients(clients)
        self._topic_arn = topic_arn
        self._spot_action = spot_action
        self._crossing = crossing

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        clients: ClientFactory,
        *,
        invoked_function_arn: str | None = None,
        spoke_places: Sequence[tuple[str, str]] = (),
    ) -> AwsEnforcer:
        """``invoked_function_arn`` (the running Lambda's) locates the budget Lambda the crossing
        checks invoke; without it (the CLI) no crossing is armed and the one-minute rule decides.
        ``spoke_places``: a hub's spokes (lambdas.aws.spoke_list), each looked in too."""
        spot_action: SpotAction = "stop" if settings.spot_action == "stop" else "terminate"
        crossing = None
        if invoked_function_arn and settings.stack and settings.scheduler_role_arn:
            crossing = CrossingTarget(
                settings.deadline_schedule_group(),
                budget_function_arn(invoked_function_arn, settings.stack),
                settings.scheduler_role_arn,
            )
        own_account = account_of_arn(invoked_function_arn)
        return cls(
            clients=clients,
            regions=settings.regions,
            topic_arn=settings.sns_topic_arn,
            spot_action=spot_action,
            crossing=crossing,
            places=guarded_places(settings, own_account=own_account, spoke_places=spoke_places),
            place_clients=place_clients_for(settings, clients, own_account=own_account),
        )

    def any_managed_host_running(self) -> bool:
        """Whether a managed accelerator host runs in any place; a failed listing counts as yes, so
        an EC2 error (or a spoke role denied) never skips the budget check."""
        try:
            return any(
                host.managed
                for account, region in self._places
                for host in list_hosts(self._place_clients(account, region)("ec2", region), region)
            )
        except Exception:
            log.exception("could not list the running hosts; checking the budgets anyway")
            return True

    @property
    def arms_crossings(self) -> bool:
        """Whether it knows where crossing checks go (a Lambda's, or the CLI's with a stack)."""
        return self._crossing is not None

    def arm_crossing(self, tenant: str, at: datetime | None) -> None:
        if self._crossing is None:
            return
        scheduler = self._clients("scheduler", self._regions[0])
        if at is None:
            disarm_budget_crossing(scheduler, group=self._crossing.group, tenant=tenant)
            return
        arm_budget_crossing(
            scheduler,
            group=self._crossing.group,
            tenant=tenant,
            at=at,
            target_arn=self._crossing.target_arn,
            role_arn=self._crossing.role_arn,
        )

    def notify(self, tenant: str, subject: str, message: str) -> None:
        """Tell the owners of the tenant's running hosts (whose spend it is), by name and attribute."""
        self._publish(tenant, subject, message, self.running_hosts(tenant))

    def _publish(self, tenant: str, subject: str, message: str, hosts: Sequence[Host]) -> None:
        if self._topic_arn is None:
            raise ParkbrakeError(f"cannot notify about tenant {tenant!r}: PARKBRAKE_SNS_TOPIC_ARN is not set")
        owner_names = owners_of(host.tags for host in hosts)
        notices.publish(
            self._topic_arn,
            subject,
            f"{message}\n{owners_line(owner_names)}",
            owner_names,
            clients=self._clients,
            attributes={"tenant": tenant},
        )

    def deny(self, tenant: str, reason: str) -> None:
        # Nothing to change on AWS: the launcher and `parkbrake run` ask LedgerBudgetGate first.
        log.warning("denying new work: %s", reason)

    def running_hosts(self, tenant: str) -> list[Host]:
        """The tenant's running managed accelerator hosts, in every guarded account and region."""
        return [host for hosts in self._running_by_place(tenant, []).values() for host in hosts]

    def _running_by_place(
        self, tenant: str, errors: list[dict[str, str]]
    ) -> dict[tuple[str, str], list[Host]]:
        """The tenant's running hosts by (account, region); a place that cannot be listed (a role
        missing or denied) is an error in ``errors`` naming it, and the other places are still listed."""
        found: dict[tuple[str, str], list[Host]] = {}
        for account, region in self._places:
            try:
                found[(account, region)] = self._running_in(tenant, account, region)
            except (AssumeFailed, *AWS_ERRORS) as error:
                where = f"{account or 'own account'}/{region}"
                why = str(error) if isinstance(error, AssumeFailed) else describe_error(error)
                log.error("cannot list tenant %s's hosts in %s: %s", tenant, where, why)
                errors.append({"action": "list", "place": where, "error": why})
        return found

    def _running_in(self, tenant: str, account: str, region: str) -> list[Host]:
        pages = (
            self._place_clients(account, region)("ec2", region)
            .get_paginator("describe_instances")
            .paginate(
                Filters=[
                    {"Name": f"tag:{tags.TENANT}", "Values": [tenant]},
                    {"Name": "instance-state-name", "Values": ["running"]},
                ]  # one tenant's hosts are few: accelerators are picked out below
            )
        )
        hosts = []
        for page in pages:
            for reservation in page["Reservations"]:
                for instance in reservation["Instances"]:
                    host = Host.from_instance(instance, region)
                    if host.managed and host.accelerator:
                        hosts.append(host)
        return hosts

    def stop(self, tenant: str, reason: str, *, dry_run: bool) -> StopReport:
        report = StopReport()
        by_region = self._running_by_place(tenant, report.errors)
        for (account, region), hosts in sorted(by_region.items()):
            if not hosts:
                continue
            clients = self._place_clients(account, region)
            outcome = stop_hosts(
                hosts,
                reason=reason,
                ec2=clients("ec2", region),
                autoscaling=clients("autoscaling", region),
                dry_run=dry_run,
                spot_action=self._spot_action,
            )
            report.acted += outcome.acted
            report.errors += outcome.errors
        if report.acted and not dry_run:
            stopped = [
                host for hosts in by_region.values() for host in hosts if host.instance_id in report.acted
            ]
            report.errors += self._stopped_notice(tenant, reason, stopped)
        return report

    def _stopped_notice(self, tenant: str, reason: str, stopped: Sequence[Host]) -> list[dict[str, str]]:
        """Tell the stopped hosts' owners; a failure is returned as a ``notify`` error, never raised."""
        lines = [
            f"  {host.instance_id} {host.instance_type} owner={owner_of(host.tags) or '-'}"
            for host in stopped
        ]
        subject = f"parkbrake: stopped {len(stopped)} host(s) of tenant {tenant} at its budget"
        try:
            self._publish(tenant, subject[:100], "\n".join([reason, "", *lines, ""]), stopped)
        except (ParkbrakeError, *AWS_ERRORS) as error:
            log.error("could not notify the budget stop of tenant %s: %s", tenant, describe_error(error))
            return [{"action": "notify", "error": describe_error(error)}]
        return []


@dataclass
class BudgetRun:
    checked: list[str] = field(default_factory=list)
    notified: list[dict[str, str]] = field(default_factory=list)  # {"tenant", "threshold"}
    denied: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    would: list[dict[str, Any]] = field(default_factory=list)  # dry run: {"tenant", "action", "reason", ...}
    errors: list[dict[str, str]] = field(default_factory=list)
    armed: list[dict[str, str | None]] = field(
        default_factory=list
    )  # {"tenant", "at"}: armed (at None: removed)
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def enforce_budgets(
    store: LedgerStore,
    enforcer: Enforcer,
    *,
    now: datetime,
    default_cap: timedelta,
    tenants: Sequence[str] | None = None,
    dry_run: bool = False,
) -> BudgetRun:
    """Act on every tenant's (or ``tenants``') budget; one tenant's failure never stops the others."""
    run = BudgetRun(dry_run=dry_run)
    for status in store.runways(now=now, default_cap=default_cap, tenants=tenants):
        run.checked.append(status.tenant)
        decisions = budget_decisions(status)
        if dry_run:
            for decision in decisions:
                would: dict[str, Any] = {"tenant": decision.tenant, "action": decision.action}
                if decision.action == "stop":
                    would["instance_ids"] = enforcer.stop(
                        decision.tenant, decision.reason, dry_run=True
                    ).acted
                run.would.append(would | {"reason": decision.reason})
            continue
        at = crossing_at(status)
        # A targeted check (the meter's, a crossing's) removes a check nothing would reach any more;
        # the every-minute one does not call Scheduler for every idle tenant (a stale check is harmless).
        if (at is not None and at > now) or (
            at is None and tenants is not None and "stop" in status.budget.actions
        ):
            try:
                enforcer.arm_crossing(status.tenant, at)
                run.armed.append({"tenant": status.tenant, "at": at.isoformat() if at else None})
            except Exception as error:  # the one-minute rule still stands; the run reports the failure
                log.exception("arming the budget crossing of tenant %s failed", status.tenant)
                run.errors.append({"tenant": status.tenant, "action": "arm", "error": describe_error(error)})
        for action in ("notify", "deny", "stop"):
            chosen = [decision for decision in decisions if decision.action == action]
            if not chosen:
                continue
            try:
                _act(store, enforcer, status, chosen, run, now=now)
            except Exception as error:  # one tenant's or action's failure must not spare the others
                log.exception("budget action %s for tenant %s failed", action, status.tenant)
                run.errors.append({"tenant": status.tenant, "action": action, "error": describe_error(error)})
    return run


def _act(
    store: LedgerStore,
    enforcer: Enforcer,
    status: TenantRunway,
    decisions: list[BudgetDecision],
    run: BudgetRun,
    *,
    now: datetime,
) -> None:
    action = decisions[0].action
    if action == "stop":
        decision = decisions[0]
        report = enforcer.stop(status.tenant, decision.reason, dry_run=False)
        if report.acted or report.errors:
            store.record_action(
                decision,
                now=now,
                period_start=status.period_start,
                instance_ids=report.acted,
                errors=report.errors,
            )
            heartbeat.count_action(GUARDRAIL, "stop", "limit", len(report.acted))
            _log_decisions([decision], now=now, instance_ids=report.acted)
        run.stopped += report.acted
        run.errors += [{"tenant": status.tenant, "action": "stop", **error} for error in report.errors]
        return
    with store.claim_once(decisions, now=now, period_start=status.period_start) as claimed:
        if not claimed:
            return
        if action == "notify":
            subject, message = budget_notice(claimed)
            enforcer.notify(status.tenant, subject, message)
            top = max(decision.threshold or Decimal(0) for decision in claimed)
            run.notified.append({"tenant": status.tenant, "threshold": str(top.normalize())})
            heartbeat.count_action(GUARDRAIL, "notify", "threshold")
        else:
            enforcer.deny(status.tenant, claimed[0].reason)
            run.denied.append(status.tenant)
            heartbeat.count_action(GUARDRAIL, "deny", "limit")
        _log_decisions(claimed, now=now)


def _log_decisions(decisions: Sequence[BudgetDecision], *, now: datetime, **details: Any) -> None:
    """The log lines of budget actions; their ledger rows come with their claims (a trigger)."""
    DecisionLog(guardrail=GUARDRAIL, origin=GUARDRAIL).record(
        [
            Decision(
                f"budget-{decision.action}",
                GUARDRAIL,
                decision.reason,
                now,
                tenant=decision.tenant,
                details={"threshold": str(decision.threshold), **details} if decision.threshold else details,
            )
            for decision in decisions
        ]
    )


def rearm_crossing(
    store: LedgerStore, enforcer: Enforcer, *, tenant: str, now: datetime, default_cap: timedelta
) -> datetime | None:
    """After a change to what ``tenant`` may spend (its budget set or removed, an admission): arm its
    crossing check at the instant its spend reaches the limit at the current burn (at once when it
    already has: the check then stops its hosts), or remove it when nothing would cross. Returns the
    instant armed, None when removed."""
    statuses = store.runways(now=now, default_cap=default_cap, tenants=[tenant])
    at = crossing_at(statuses[0]) if statuses else None
    armed = None if at is None else max(at, now)
    enforcer.arm_crossing(tenant, armed)
    return armed


class LedgerBudgetGate:
    """guardrails.launch.BudgetGate from the ledger: reserve, atomically per tenant, what hosts about
    to start can cost; with an ``enforcer`` (the launcher's), each admission re-arms the tenant's
    crossing check."""

    def __init__(
        self,
        store: LedgerStore,
        *,
        default_cap: timedelta,
        lease: timedelta = DEFAULT_LEASE,
        enforcer: Enforcer | None = None,
        region: str | None = None,
    ) -> None:
        self._store = store
        self._region = region  # where the hosts it admits run (their price's region); None: the request's
        self._default_cap = default_cap
        self._lease = lease
        self._enforcer = enforcer

    def admit(self, request: AdmissionRequest, now: datetime) -> Admission:
        if self._region is not None:
            request = replace(request, region=self._region)
        admission = self._store.admit(request, now=now, default_cap=self._default_cap, lease=self._lease)
        if admission.granted and self._enforcer is not None:
            try:
                rearm_crossing(
                    self._store, self._enforcer, tenant=request.tenant, now=now, default_cap=self._default_cap
                )
            except Exception:  # the admission stands; the budget's one-minute rule still checks
                log.exception("re-arming the budget crossing of tenant %s failed", request.tenant)
                heartbeat.count_action(GUARDRAIL, "arm", "failed")
        return admission

    def release(self, reservation_id: int, now: datetime) -> None:
        self._store.release(reservation_id, now=now)


def gate_from_environment(
    settings: Settings, *, invoked_function_arn: str | None = None
) -> LedgerBudgetGate | None:
    """The container's gate when a ledger database is configured, else None (the launcher then says
    "budget not checked"). With the running Lambda's ARN, admissions re-arm crossing checks."""
    if not ledger_configured():
        return None
    enforcer = None
    if invoked_function_arn is not None:
        enforcer = AwsEnforcer.from_settings(
            settings, default_clients, invoked_function_arn=invoked_function_arn
        )
    return LedgerBudgetGate(
        container_store(),
        default_cap=settings.default_max_runtime,
        enforcer=enforcer,
        region=settings.regions[0],
    )


def check_budgets(
    *,
    settings: Settings,
    clients: ClientFactory,
    store: Callable[[], LedgerStore],
    now: datetime,
    tenants: Sequence[str] | None = None,
    dry_run: bool = False,
    clock: bool = False,
    invoked_function_arn: str | None = None,
    spokes: SpokeList | None = None,
) -> BudgetRun | None:
    """The budget Lambda's run over every tenant (or ``tenants``); ``store`` is opened only when the
    budgets are checked. With ``clock`` (the one-minute rule's own event) and no managed accelerator
    host running, nothing is checked: None. The heartbeat is recorded after a run without errors.
    A hub's (``settings.spokes_parameter``) looks in its spokes' accounts too, learned as the meter
    learns them (``spokes``: the container's list, a fresh one by default); a list it cannot read is
    an error of the run, which still judges the hub's own account and the listed ones."""
    reach = member_reach(settings, clients, spokes or SpokeList())
    enforcer = AwsEnforcer.from_settings(
        reach.settings, clients, invoked_function_arn=invoked_function_arn, spoke_places=reach.spoke_places
    )
    if clock and reach.error is None and not enforcer.any_managed_host_running():
        log.info("no managed accelerator host runs: the budgets cannot move, the database is left to sleep")
        heartbeat.record_success(
            GUARDRAIL, stack=settings.stack, cloudwatch=clients("cloudwatch", None), now=now
        )
        return None
    run = enforce_budgets(
        store(),
        enforcer,
        now=now,
        default_cap=settings.default_max_runtime,
        tenants=tenants,
        dry_run=dry_run,
    )
    if reach.error is not None:
        run.errors.append({"action": "list-spokes", "error": reach.error})
    if run.errors:
        log.error("budget run finished with errors: %s", run.errors)
    else:
        heartbeat.record_success(
            GUARDRAIL, stack=settings.stack, cloudwatch=clients("cloudwatch", None), now=now
        )
    return run
