"""The sweeping engine, shared by the reaper, the deadlines and ``parkbrake reap``: list and judge every
accelerator host in the configured regions, stop the ones due through the one stop path, retire the
managed hosts stopped too long (snapshots, then termination), re-arm the deadlines that moved, and
publish the sweep's notices; then (:func:`sweep_and_record`, the reaper's run) record its decisions,
count its actions and findings, and earn the heartbeat.

The decisions are :mod:`guardrails.sweep`'s; this module only talks to AWS.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from guardrails import tags
from guardrails.accounts import REGION_NAME
from guardrails.decisions import Decision, notification_decision, sweep_decisions
from guardrails.hosts import Host
from guardrails.ledger import is_account_id
from guardrails.pricing import load_price_table
from guardrails.rotation import is_serving
from guardrails.rules.base import SweepPolicy, instant
from guardrails.settings import Settings
from guardrails.storage import Storage, storage_of
from guardrails.sweep import Verdict, judge, names_another_stack, owner_stack, policy_from_settings
from guardrails.sweep_notice import KIND_OF_RULE, Notice, sweep_notices
from lambdas.aws import heartbeat
from lambdas.aws.deadline_schedules import HostPlace, arm_deadline
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.ec2_hosts import PAGE_SIZE, list_hosts, live_stacks
from lambdas.aws.environment import ClientFactory
from lambdas.aws.errors import AWS_ERRORS, describe_error
from lambdas.aws.notices import Publication, publish_notices
from lambdas.aws.serving_rotation import RotationOutcome, rotate_serving_hosts
from lambdas.aws.stop_path import StopOutcome, stop_hosts
from lambdas.aws.stopped_hosts import Retirement, retire_hosts, stopped_managed_hosts, volumes_by_host

log = logging.getLogger(__name__)
# What taking a host off the bill may fail at (a host that could not be tagged was not stopped either).
STOP_ACTIONS = frozenset({"tag", "stop", "terminate", "remove-from-group", "retire"})


def parse_event(event: Mapping[str, Any] | None) -> tuple[bool, list[str] | None]:
    """``(dry_run, instance_ids)`` from the reaper's events; anything else is refused loudly."""
    event = event or {}
    if not isinstance(event, Mapping):
        raise ValueError(f"the reaper's event is a JSON object, not {str(event)[:80]!r}")
    if event.get("detail-type") == "Scheduled Event":  # EventBridge's own scheduled-rule payload
        return False, None
    dry_run = event.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ValueError(f"dry_run must be true or false, not {dry_run!r}")
    instance_ids = event.get("instance_ids")
    if instance_ids is None:
        return dry_run, None
    return dry_run, instance_ids_of("instance_ids", instance_ids)


def event_place(event: Mapping[str, Any] | None) -> HostPlace | None:
    """The member account and region a hub's deadline or warning payload names (``account`` and
    ``region``, both or neither, with the hosts); None for one about the stack's own account."""
    if not isinstance(event, Mapping) or ("account" not in event and "region" not in event):
        return None
    account, region = event.get("account"), event.get("region")
    if not isinstance(account, str) or not account or not is_account_id(account):
        raise ValueError(f"account must be a 12-digit AWS account id, not {account!r}")
    if not isinstance(region, str) or REGION_NAME.fullmatch(region) is None:
        raise ValueError(f"region must be an AWS region name (us-east-1), not {str(region)[:40]!r}")
    if "instance_ids" not in event and "warn" not in event:
        raise ValueError("account and region name where instance_ids (or warn) run; give those hosts too")
    return HostPlace(account, region)


def instance_ids_of(key: str, value: object) -> list[str]:
    """``value`` as the event's ``key``: a non-empty list of instance ids, each once, in order."""
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(i, str) and i.startswith("i-") for i in value)
    ):
        raise ValueError(f"{key} must be a non-empty list of instance ids, not {value!r}")
    return list(dict.fromkeys(value))


class DeadlineStopFailed(RuntimeError):
    """A host judged at its deadline could not be stopped; raised so that the invocation is retried."""


@dataclass
class SweepPlan:
    verdicts: list[Verdict]
    errors: list[dict[str, str]]  # regions that could not be listed
    instance_ids: tuple[str, ...] | None = None  # None for a full sweep
    # The stacks deployed in each region (None where they could not be listed): who owns which host.
    live_stacks: dict[str, Collection[str] | None] = field(default_factory=dict)
    # The volumes of the stopped hosts reported, and what they cost a month.
    storage: dict[str, Storage] = field(default_factory=dict)

    @property
    def to_retire(self) -> list[Verdict]:
        """Managed hosts stopped too long, with terminate_stopped on: snapshotted, then terminated."""
        return [verdict for verdict in self.verdicts if verdict.action == "terminate"]

    @property
    def to_stop(self) -> list[Verdict]:
        return [verdict for verdict in self.verdicts if verdict.action == "stop" and not _rotated(verdict)]

    @property
    def to_rotate(self) -> list[Verdict]:
        """Serving hosts in a group past their lifetime: replaced first, never just stopped."""
        return [verdict for verdict in self.verdicts if verdict.action == "stop" and _rotated(verdict)]


def _rotated(verdict: Verdict) -> bool:
    return is_serving(verdict.host.tags) and verdict.host.autoscaling_group is not None


@dataclass
class SweepReport:
    plan: SweepPlan
    outcome: StopOutcome
    dry_run: bool
    errors: list[dict[str, str]] = field(default_factory=list)
    rearmed: list[str] = field(default_factory=list)
    publication: Publication = field(default_factory=Publication)
    rotation: RotationOutcome | None = None
    retirement: Retirement = field(default_factory=Retirement)

    def as_dict(self) -> dict[str, Any]:
        acted = set(self.outcome.acted)
        retired = set(self.retirement.terminated)
        failed = {error["instance_id"] for error in self.errors if "instance_id" in error}
        return {
            "checked": len(self.plan.verdicts),
            "stopped": [] if self.dry_run else self.outcome.acted,
            "would_stop": self.outcome.acted if self.dry_run else [],
            "skipped": [
                {"instance_id": verdict.host.instance_id, "reason": verdict.reason}
                for verdict in self.plan.verdicts
                if verdict.action == "skip"
            ],
            "errors": self.errors,
            "rotations": self.rotation.steps if self.rotation else [],
            "retired": [] if self.dry_run else self.retirement.terminated,
            "would_retire": self.retirement.terminated if self.dry_run else [],
            "snapshots": self.retirement.snapshots,
            "dry_run": self.dry_run,
            "notified": self.publication.subject,
            "hosts": [
                _host_row(verdict, self.outcome, acted | retired, failed, self.plan.storage)
                for verdict in self.plan.verdicts
            ],
        }

    def decisions(self, *, actor: str, now: datetime) -> list[Decision]:
        """What the sweep decided, for the decision log; a dry run decided nothing."""
        if self.dry_run:
            return []
        acted = {instance_id: str(self.outcome.action_of(instance_id)) for instance_id in self.outcome.acted}
        acted |= dict.fromkeys(self.rotation.removed if self.rotation else [], "rotate")
        acted |= dict.fromkeys(self.retirement.terminated, "retire")
        failed = {
            error["instance_id"]: f"{error.get('action')}: {error['error']}"
            for error in self.errors
            if "instance_id" in error and error.get("action") in STOP_ACTIONS
        }
        adopted = [
            verdict.host.instance_id
            for verdict in self.plan.to_stop
            if not verdict.host.managed and verdict.host.instance_id not in failed
        ]
        decisions = sweep_decisions(
            self.plan.verdicts,
            actor=actor,
            now=now,
            acted=acted,
            adopted=adopted,
            failed=failed,
            full_sweep=self.plan.instance_ids is None,
        )
        if self.publication.subject:
            hosts = [notice.subject for notice in self.publication.sent]
            decisions.append(
                notification_decision(actor=actor, now=now, subject=self.publication.subject, hosts=hosts)
            )
        return decisions


def _host_row(
    verdict: Verdict, outcome: StopOutcome, acted: set[str], failed: set[str], storage: dict[str, Storage]
) -> dict[str, Any]:
    host = verdict.host
    instance_id = host.instance_id
    volumes = storage.get(instance_id)
    return {
        "instance_id": instance_id,
        "region": host.region,
        "instance_type": host.instance_type,
        "pool": host.pool,
        "tenant": host.tenant,
        "name": host.tags.get("Name"),
        "managed": host.managed,
        "autoscaling_group": host.autoscaling_group,
        "launch_time": instant(host.launch_time),
        "deadline": instant(verdict.deadline.enforce_at) if verdict.deadline else None,
        "verdict": verdict.action,
        "rule": verdict.rule,
        "action": (outcome.action_of(instance_id) or "retire") if instance_id in acted else None,
        "failed": instance_id in failed,
        "stopped_at": instant(host.stopped_at) if host.stopped_at else None,
        "storage_usd_month": str(volumes.monthly_usd) if volumes else None,
        "reason": verdict.reason,
        "reports": [{"rule": finding.rule, "reason": finding.reason} for finding in verdict.reports],
    }


def plan_sweep(
    settings: Settings,
    *,
    now: datetime,
    clients: ClientFactory,
    instance_ids: Sequence[str] | None = None,
    page_size: int = PAGE_SIZE,
) -> SweepPlan:
    """List and judge every accelerator host, whatever its tags; changes nothing."""
    policy = policy_from_settings(settings)
    verdicts: list[Verdict] = []
    errors: list[dict[str, str]] = []
    found: set[str] = set()
    stacks_by_region: dict[str, Collection[str] | None] = {}
    plan_storage: dict[str, Storage] = {}
    for region in settings.regions:
        # A full sweep lists running and stopped hosts at once (one page serves both); asked by id,
        # it judges those hosts in whatever state they are.
        try:
            listed = list_hosts(
                clients("ec2", region),
                region,
                instance_ids=instance_ids,
                page_size=page_size,
                states=("running", "stopped"),
            )
        except AWS_ERRORS as error:
            log.error("could not list hosts in %s: %s", region, describe_error(error))
            errors.append({"region": region, "action": "list", "error": describe_error(error)})
            continue
        hosts = listed if instance_ids is not None else [host for host in listed if host.state == "running"]
        stopped = stopped_managed_hosts(listed) if instance_ids is None else []
        # Which stacks exist matters only for a host that names another stack (is it alive, or an
        # orphan?): the stack list is read only then, so a sweep of one stack's hosts reads no SSM.
        named_elsewhere = any(names_another_stack(host, policy.stack) for host in [*hosts, *stopped])
        stacks = _live_stacks(clients, region, errors) if named_elsewhere else ()
        stacks_by_region[region] = stacks
        for host in hosts:
            found.add(host.instance_id)
            # A full sweep leaves other live stacks' hosts to their own sweeps; asked by id, it says why not.
            if instance_ids is None and owner_stack(host, policy, stacks) is not None:
                continue
            verdicts.append(judge(host, policy, now, live_stacks=stacks))
        if stopped:
            verdicts += _judge_stopped(
                clients("ec2", region),
                region,
                stopped,
                storage=plan_storage,
                errors=errors,
                policy=policy,
                now=now,
                stacks=stacks,
            )
    if instance_ids is not None and not errors:
        missing = [instance_id for instance_id in instance_ids if instance_id not in found]
        if missing:
            log.info("not found in %s (terminated and gone?): %s", ",".join(settings.regions), missing)
    ids = tuple(instance_ids) if instance_ids is not None else None
    return SweepPlan(verdicts, errors, ids, stacks_by_region, plan_storage)


def _judge_stopped(
    ec2: Any,
    region: str,
    stopped: list[Host],
    *,
    storage: dict[str, Storage],
    errors: list[dict[str, str]],
    policy: SweepPolicy,
    now: datetime,
    stacks: Collection[str] | None,
) -> list[Verdict]:
    """This stack's managed hosts stopped too long (or since a time EC2 does not say), with their
    volumes' monthly cost; stopped hosts within the retention are not part of the sweep's report.

    ``stopped`` is the sweep's own listing of the region's stopped managed hosts, never listed again."""
    hosts = [host for host in stopped if owner_stack(host, policy, stacks) is None]
    reported = [host for host in hosts if judge(host, policy, now, live_stacks=stacks).findings]
    try:
        volumes = volumes_by_host(ec2, [host.instance_id for host in reported]) if reported else {}
    except AWS_ERRORS as error:
        log.error("could not list the stopped hosts' volumes in %s: %s", region, describe_error(error))
        errors.append({"region": region, "action": "list-stopped", "error": describe_error(error)})
        return []
    prices = load_price_table()
    for host in reported:
        storage[host.instance_id] = storage_of(volumes.get(host.instance_id, []), prices, region)
    return [
        judge(host, policy, now, live_stacks=stacks, storage=storage[host.instance_id]) for host in reported
    ]


def _live_stacks(clients: ClientFactory, region: str, errors: list[dict[str, str]]) -> Collection[str] | None:
    """The stacks deployed in ``region``; None (no host is taken for an orphan) when they cannot be read."""
    try:
        return live_stacks(clients("ssm", region))
    except AWS_ERRORS as error:
        log.error("could not list the stacks in %s: %s", region, describe_error(error))
        errors.append({"region": region, "action": "list-stacks", "error": describe_error(error)})
        return None


def execute_sweep(
    plan: SweepPlan,
    settings: Settings,
    *,
    now: datetime,
    clients: ClientFactory,
    dry_run: bool,
    place: HostPlace | None = None,
) -> SweepReport:
    """Stop what the plan says to stop, through the one stop path; re-arm and notify. ``place``: the
    member account and region a hub judges given hosts in (``clients`` reach them there)."""
    report = act_on_plan(plan, settings, now=now, clients=clients, dry_run=dry_run)
    if dry_run:
        return report
    if plan.instance_ids is not None:
        rearm_not_due(report, settings, now=now, clients=clients, place=place)
    report.publication = publish_notices(
        sweep_notices_of(report, now=now), settings, clients=clients, now=now
    )
    report.errors += report.publication.errors
    return report


def act_on_plan(
    plan: SweepPlan, settings: Settings, *, now: datetime, clients: ClientFactory, dry_run: bool
) -> SweepReport:
    """Stop, rotate and retire what the plan says, in the account ``clients`` act in; notifies nobody
    (the organisation's sweep acts in each account and notifies once, from the hub)."""
    by_region: dict[str, list[Verdict]] = defaultdict(list)
    for verdict in plan.to_stop:
        by_region[verdict.host.region].append(verdict)
    outcome = StopOutcome(dry_run=dry_run)
    for region, due in by_region.items():
        verdicts = due if dry_run else _adopt(due, settings, clients("ec2", region), outcome)
        for verdict in verdicts:
            log.info(
                "%s %s: %s", "would stop" if dry_run else "stopping", verdict.host.instance_id, verdict.reason
            )
        result = stop_hosts(
            [verdict.host for verdict in verdicts],
            reason="parkbrake reaper: " + ", ".join(sorted({str(verdict.rule) for verdict in verdicts})),
            ec2=clients("ec2", region),
            autoscaling=clients("autoscaling", region),
            dry_run=dry_run,
            spot_action="stop" if settings.spot_action == "stop" else "terminate",
        )
        outcome.stopped += result.stopped
        outcome.terminated += result.terminated
        outcome.removed_from_group += result.removed_from_group
        outcome.errors += result.errors
    rotation = _rotate(plan, now=now, clients=clients, dry_run=dry_run)
    retirement = _retire(plan, settings, now=now, clients=clients, dry_run=dry_run)
    return SweepReport(
        plan,
        outcome,
        dry_run,
        errors=[*plan.errors, *outcome.errors, *rotation.errors, *retirement.errors],
        rotation=rotation,
        retirement=retirement,
    )


def sweep_notices_of(report: SweepReport, *, now: datetime) -> list[Notice]:
    """The notices of what ``report`` found and did (guardrails/sweep_notice.py decides them)."""
    rotation = report.rotation or RotationOutcome(dry_run=report.dry_run)
    return sweep_notices(
        report.plan.verdicts,
        acted={
            **{
                instance_id: str(report.outcome.action_of(instance_id))
                for instance_id in report.outcome.acted
            },
            **dict.fromkeys(rotation.removed, "rotate"),
            **dict.fromkeys(report.retirement.terminated, "retire"),
        },
        errors=report.errors,
        now=now,
    )


def _rotate(plan: SweepPlan, *, now: datetime, clients: ClientFactory, dry_run: bool) -> RotationOutcome:
    by_region: dict[str, list[Host]] = defaultdict(list)
    for verdict in plan.to_rotate:
        by_region[verdict.host.region].append(verdict.host)
    rotation = RotationOutcome(dry_run=dry_run)
    for region, hosts in by_region.items():
        result = rotate_serving_hosts(
            hosts,
            ec2=clients("ec2", region),
            autoscaling=clients("autoscaling", region),
            now=now,
            dry_run=dry_run,
        )
        rotation.steps += result.steps
        rotation.errors += result.errors
    return rotation


def _retire(
    plan: SweepPlan, settings: Settings, *, now: datetime, clients: ClientFactory, dry_run: bool
) -> Retirement:
    retirement = Retirement()
    by_region: dict[str, list[Host]] = defaultdict(list)
    for verdict in plan.to_retire:
        by_region[verdict.host.region].append(verdict.host)
    for region, hosts in by_region.items():
        volumes = {
            host.instance_id: list(plan.storage[host.instance_id].volumes)
            for host in hosts
            if host.instance_id in plan.storage
        }
        result = retire_hosts(
            hosts, volumes, ec2=clients("ec2", region), stack=settings.stack, now=now, dry_run=dry_run
        )
        retirement.terminated += result.terminated
        retirement.pending += result.pending
        retirement.snapshots.update(result.snapshots)
        retirement.errors += result.errors
    return retirement


def _adopt(verdicts: list[Verdict], settings: Settings, ec2: Any, outcome: StopOutcome) -> list[Verdict]:
    """Tag the hosts to be stopped that are not yet this stack's managed hosts (unmanaged ones, with
    reap_untagged; managed ones without a stack tag) as this stack's: the guardrails' IAM stops only
    the stack's own managed hosts, and lets them adopt only a host of no stack (components/iam_policies.py).

    Returns the verdicts whose hosts may now be stopped; a host that could not be tagged is an error.
    """
    unmanaged = [
        verdict.host.instance_id
        for verdict in verdicts
        if not verdict.host.managed or not verdict.host.tags.get(tags.STACK, "").strip()
    ]
    if not unmanaged:
        return verdicts
    adoption = [{"Key": tags.MANAGED, "Value": "true"}]
    if settings.stack:
        adoption.append({"Key": tags.STACK, "Value": settings.stack})
    failed: set[str] = set()
    for instance_id in unmanaged:  # one by one, so that a refusal lands on its own host
        try:
            ec2.create_tags(Resources=[instance_id], Tags=adoption)
        except AWS_ERRORS as error:
            log.error("could not tag %s as managed: %s", instance_id, describe_error(error))
            outcome.errors.append(
                {"instance_id": instance_id, "action": "tag", "error": describe_error(error)}
            )
            failed.add(instance_id)
        else:
            log.info("tagged %s as managed by stack %s before stopping it", instance_id, settings.stack)
    return [verdict for verdict in verdicts if verdict.host.instance_id not in failed]


def sweep(
    settings: Settings,
    *,
    now: datetime,
    clients: ClientFactory,
    dry_run: bool = False,
    instance_ids: Sequence[str] | None = None,
    place: HostPlace | None = None,
) -> SweepReport:
    plan = plan_sweep(settings, now=now, clients=clients, instance_ids=instance_ids)
    return execute_sweep(plan, settings, now=now, clients=clients, dry_run=dry_run, place=place)


def rearm_not_due(
    report: SweepReport,
    settings: Settings,
    *,
    now: datetime,
    clients: ClientFactory,
    place: HostPlace | None = None,
) -> None:
    """A deadline that fired for a host whose cap was extended or exempted moves to the new deadline;
    with ``place`` (a member account's host), in the hub's own group, its payload naming the place."""
    if not (settings.stack and settings.deadline_target_arn and settings.scheduler_role_arn):
        return
    policy = policy_from_settings(settings)
    for verdict in report.plan.verdicts:
        deadline, host = verdict.deadline, verdict.host
        if verdict.action != "skip" or host.state != "running" or deadline is None:
            continue
        if deadline.enforce_at <= now or owner_stack(host, policy, report.plan.live_stacks.get(host.region)):
            continue
        try:
            arm_deadline(
                clients("scheduler", verdict.host.region if place is None else None),
                group=settings.deadline_schedule_group(),
                instance_id=verdict.host.instance_id,
                at=deadline.enforce_at,
                target_arn=settings.deadline_target_arn,
                role_arn=settings.scheduler_role_arn,
                dead_letter_arn=settings.deadline_dead_letter_arn,
                warn_before=settings.warn_before,
                now=now,
                place=place,
            )
        except AWS_ERRORS as error:
            report.errors.append(
                {
                    "instance_id": verdict.host.instance_id,
                    "action": "arm-deadline",
                    "error": describe_error(error),
                }
            )
        else:
            report.rearmed.append(verdict.host.instance_id)


def sweep_and_record(
    settings: Settings,
    *,
    now: datetime,
    clients: ClientFactory,
    decisions: DecisionLog,
    dry_run: bool = False,
    instance_ids: Sequence[str] | None = None,
    place: HostPlace | None = None,
) -> dict[str, Any]:
    """The reaper's run: sweep, record what was decided, count it, and (after a full, real sweep with
    no error) record the heartbeat. Judging given hosts (a deadline), a failed stop raises
    :class:`DeadlineStopFailed` so that the invocation is retried. ``place``: a hub's deadline of a
    member account's hosts, judged there (``clients`` reach them; the decisions name the account)."""
    report = sweep(
        settings, now=now, clients=clients, dry_run=dry_run, instance_ids=instance_ids, place=place
    )
    result = report.as_dict()
    decided = report.decisions(actor=heartbeat.REAPER, now=now)
    if place is not None:
        decided = [replace(d, details={**d.details, "account_id": place.account}) for d in decided]
        result["account_id"], result["region"] = place.account, place.region
    # Recorded after the sweep acted: a ledger that is down never holds a stop back.
    recorded = decisions.record(decided)
    result["errors"] = [*result["errors"], *recorded]
    log.info("reaper result", extra={"result": {k: v for k, v in result.items() if k != "hosts"}})
    if dry_run:
        return result
    count(report, stack=settings.stack, full_sweep=instance_ids is None)
    # The chat channel is best effort: its failure is in the result and the notice, never retried for.
    failed = [error for error in report.errors if error.get("action") != "chat"]
    if failed and instance_ids is not None:
        raise DeadlineStopFailed(f"the deadline of {', '.join(instance_ids)} failed: {failed}")
    # The heartbeat says "the sweep ran and could act": only a full, real, error-free sweep earns it
    # (and one whose decisions could not be logged pages too).
    if not report.errors and not recorded and instance_ids is None:
        heartbeat.record_success(
            heartbeat.REAPER, stack=settings.stack, cloudwatch=clients("cloudwatch", None), now=now
        )
    return result


def count(report: SweepReport, *, stack: str | None, full_sweep: bool) -> None:
    """Actions by rule, errors by action, and (after a full sweep) how many hosts each finding is about."""
    actions: Counter[tuple[str, str]] = Counter()
    findings: Counter[str] = Counter(dict.fromkeys(KIND_OF_RULE.values(), 0))
    for verdict in report.plan.verdicts:
        action = report.outcome.action_of(verdict.host.instance_id)
        if action is not None:
            actions[action, str(verdict.rule)] += 1
        for finding in verdict.reports:
            actions["report", finding.rule] += 1
            findings[KIND_OF_RULE.get(finding.rule, finding.rule)] += 1
    for error in report.errors:
        actions["error", error.get("action", "unknown")] += 1
    for step in report.rotation.steps if report.rotation else []:
        actions[f"rotate-{step['step']}", "past-deadline"] += 1
    for _retired in report.retirement.terminated:
        actions["retire", "stopped-too-long"] += 1
    for (action, reason), amount in sorted(actions.items()):
        heartbeat.count_action(heartbeat.REAPER, action, reason, amount)
    if full_sweep:
        heartbeat.record_findings(heartbeat.REAPER, stack=stack, counts=findings)
