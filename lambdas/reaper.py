"""The sweep: stop every running managed GPU host past its deadline, in every configured region.

Events: ``{"dry_run": bool}`` (or EventBridge's own scheduled-event payload, or ``{}``) sweeps;
``{"instance_ids": [...]}`` judges just those hosts, which is how a deadline schedule fires.
Returns ``{"checked", "stopped", "skipped": [{"instance_id", "reason"}], "errors"}`` and more.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from guardrails.hosts import Host
from guardrails.instance_types import accelerator_filter_values, is_accelerator
from guardrails.rotation import is_serving
from guardrails.rules.base import instant
from guardrails.settings import Settings
from guardrails.sweep import Verdict, judge, owner_stack, policy_from_settings
from lambdas.aws import heartbeat
from lambdas.aws.deadline_schedules import arm_deadline
from lambdas.aws.environment import ClientFactory, container_settings, default_clients, utc_now
from lambdas.aws.serving_rotation import RotationOutcome, rotate_serving_hosts
from lambdas.aws.stop_path import AWS_ERRORS, StopOutcome, describe_error, stop_hosts

log = logging.getLogger(__name__)
PAGE_SIZE = 1000  # EC2's maximum: API calls grow with pages of hosts, not with hosts


@dataclass
class SweepPlan:
    verdicts: list[Verdict]
    errors: list[dict[str, str]]  # regions that could not be listed
    instance_ids: tuple[str, ...] | None = None  # None for a full sweep

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
    rotation: RotationOutcome | None = None

    def as_dict(self) -> dict[str, Any]:
        acted = set(self.outcome.acted)
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
            "dry_run": self.dry_run,
            "hosts": [_host_row(verdict, self.outcome, acted, failed) for verdict in self.plan.verdicts],
        }


def _host_row(verdict: Verdict, outcome: StopOutcome, acted: set[str], failed: set[str]) -> dict[str, Any]:
    host = verdict.host
    instance_id = host.instance_id
    return {
        "instance_id": instance_id,
        "region": host.region,
        "instance_type": host.instance_type,
        "pool": host.pool,
        "tenant": host.tenant,
        "autoscaling_group": host.autoscaling_group,
        "launch_time": instant(host.launch_time),
        "deadline": instant(verdict.deadline.enforce_at) if verdict.deadline else None,
        "verdict": verdict.action,
        "rule": verdict.rule,
        "action": outcome.action_of(instance_id) if instance_id in acted else None,
        "failed": instance_id in failed,
        "reason": verdict.reason,
        "reports": [{"rule": finding.rule, "reason": finding.reason} for finding in verdict.reports],
    }


def list_hosts(
    ec2: Any, region: str, *, instance_ids: Sequence[str] | None = None, page_size: int = PAGE_SIZE
) -> list[Host]:
    """Running accelerator hosts, filtered server-side; or just ``instance_ids``, in whatever state.

    Ids go in a filter rather than ``InstanceIds`` so that one vanished id does not fail the call.
    """
    if instance_ids is not None:
        filters = [{"Name": "instance-id", "Values": list(instance_ids)}]
    else:
        filters = [
            {"Name": "instance-state-name", "Values": ["running"]},
            {"Name": "instance-type", "Values": accelerator_type_filter(ec2)},
        ]
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=filters, PaginationConfig={"PageSize": page_size}
    )
    return [
        Host.from_instance(instance, region)
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
    ]


def accelerator_type_filter(ec2: Any) -> list[str]:
    """Values for the ``instance-type`` filter: the family wildcards, and every accelerator type by name.

    EC2 matches the wildcards (``g*``), which also catch types newer than this botocore; the exact
    names, from botocore's own model of EC2, are for emulators that match filter values literally
    (moto does), so the same listing works against both.
    """
    known = ec2.meta.service_model.shape_for("InstanceType").enum
    return [*accelerator_filter_values(), *sorted(t for t in known if is_accelerator(t))]


def plan_sweep(
    settings: Settings,
    *,
    now: datetime,
    clients: ClientFactory,
    instance_ids: Sequence[str] | None = None,
    page_size: int = PAGE_SIZE,
) -> SweepPlan:
    """List and judge; changes nothing."""
    policy = policy_from_settings(settings)
    verdicts: list[Verdict] = []
    errors: list[dict[str, str]] = []
    found: set[str] = set()
    for region in settings.regions:
        try:
            hosts = list_hosts(clients("ec2", region), region, instance_ids=instance_ids, page_size=page_size)
        except AWS_ERRORS as error:
            log.error("could not list hosts in %s: %s", region, describe_error(error))
            errors.append({"region": region, "action": "list", "error": describe_error(error)})
            continue
        for host in hosts:
            found.add(host.instance_id)
            # A full sweep leaves other stacks' hosts to their own sweeps; asked by id, it says why not.
            if instance_ids is None and owner_stack(host, policy) is not None:
                continue
            verdicts.append(judge(host, policy, now))
    if instance_ids is not None and not errors:
        missing = [instance_id for instance_id in instance_ids if instance_id not in found]
        if missing:
            log.info("not found in %s (terminated and gone?): %s", ",".join(settings.regions), missing)
    return SweepPlan(verdicts, errors, tuple(instance_ids) if instance_ids is not None else None)


def execute_sweep(
    plan: SweepPlan, settings: Settings, *, now: datetime, clients: ClientFactory, dry_run: bool
) -> SweepReport:
    """Stop what the plan says to stop, through the one stop path; count, notify and re-arm."""
    by_region: dict[str, list[Verdict]] = defaultdict(list)
    for verdict in plan.to_stop:
        by_region[verdict.host.region].append(verdict)
    outcome = StopOutcome(dry_run=dry_run)
    for region, verdicts in by_region.items():
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
    report = SweepReport(
        plan, outcome, dry_run, errors=[*plan.errors, *outcome.errors, *rotation.errors], rotation=rotation
    )
    if dry_run:
        return report
    _count(plan, outcome)
    if plan.instance_ids is not None:
        _rearm_not_due(report, settings, now=now, clients=clients)
    if outcome.acted and settings.sns_topic_arn:
        _notify(report, settings, clients=clients)
    return report


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
    if not dry_run:
        for step in rotation.steps:
            heartbeat.count_action(heartbeat.REAPER, f"rotate-{step['step']}", "past-deadline")
    return rotation


def sweep(
    settings: Settings,
    *,
    now: datetime,
    clients: ClientFactory,
    dry_run: bool = False,
    instance_ids: Sequence[str] | None = None,
) -> SweepReport:
    plan = plan_sweep(settings, now=now, clients=clients, instance_ids=instance_ids)
    return execute_sweep(plan, settings, now=now, clients=clients, dry_run=dry_run)


def _count(plan: SweepPlan, outcome: StopOutcome) -> None:
    for verdict in plan.verdicts:
        action = outcome.action_of(verdict.host.instance_id)
        if action is not None:
            heartbeat.count_action(heartbeat.REAPER, action, str(verdict.rule))
        for finding in verdict.reports:
            heartbeat.count_action(heartbeat.REAPER, "report", finding.rule)


def _rearm_not_due(report: SweepReport, settings: Settings, *, now: datetime, clients: ClientFactory) -> None:
    """A deadline that fired for a host whose cap was extended or exempted moves to the new deadline."""
    if not (settings.stack and settings.deadline_target_arn and settings.scheduler_role_arn):
        return
    policy = policy_from_settings(settings)
    for verdict in report.plan.verdicts:
        deadline = verdict.deadline
        if verdict.action != "skip" or verdict.host.state != "running" or deadline is None:
            continue
        if deadline.enforce_at <= now or owner_stack(verdict.host, policy) is not None:
            continue
        try:
            arm_deadline(
                clients("scheduler", verdict.host.region),
                stack=settings.stack,
                instance_id=verdict.host.instance_id,
                at=deadline.enforce_at,
                target_arn=settings.deadline_target_arn,
                role_arn=settings.scheduler_role_arn,
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


def _notify(report: SweepReport, settings: Settings, *, clients: ClientFactory) -> None:
    outcome = report.outcome
    lines = [
        f"{verdict.host.instance_id} ({verdict.host.region}, {verdict.host.instance_type}, "
        f"pool {verdict.host.pool or '-'}): {outcome.action_of(verdict.host.instance_id)}: {verdict.reason}"
        for verdict in report.plan.to_stop
        if verdict.host.instance_id in outcome.acted
    ]
    lines += [
        f"ERROR {error.get('instance_id', error.get('region'))}: {error['error']}" for error in report.errors
    ]
    subject = f"parkbrake {settings.stack or ''} reaper stopped {len(outcome.acted)} GPU host(s)"
    topic_region = settings.sns_topic_arn.split(":")[3] if settings.sns_topic_arn else None
    try:
        clients("sns", topic_region or None).publish(
            TopicArn=settings.sns_topic_arn, Subject=subject[:100], Message="\n".join(lines)
        )
    except AWS_ERRORS as error:
        report.errors.append({"action": "notify", "error": describe_error(error)})


def parse_event(event: Mapping[str, Any] | None) -> tuple[bool, list[str] | None]:
    """``(dry_run, instance_ids)`` from the reaper's events; anything else is refused loudly."""
    event = event or {}
    if event.get("detail-type") == "Scheduled Event":  # EventBridge's own scheduled-rule payload
        return False, None
    dry_run = event.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ValueError(f"dry_run must be true or false, not {dry_run!r}")
    instance_ids = event.get("instance_ids")
    if instance_ids is None:
        return dry_run, None
    if (
        not isinstance(instance_ids, list)
        or not instance_ids
        or not all(isinstance(i, str) and i.startswith("i-") for i in instance_ids)
    ):
        raise ValueError(f"instance_ids must be a non-empty list of instance ids, not {instance_ids!r}")
    return dry_run, list(dict.fromkeys(instance_ids))


def handle(
    event: Mapping[str, Any] | None, *, settings: Settings, clients: ClientFactory, now: datetime
) -> dict[str, Any]:
    dry_run, instance_ids = parse_event(event)
    report = sweep(settings, now=now, clients=clients, dry_run=dry_run, instance_ids=instance_ids)
    result = report.as_dict()
    log.info("reaper result: %s", json.dumps({k: v for k, v in result.items() if k != "hosts"}))
    # The heartbeat says "the sweep ran and could act": only a full, real, error-free sweep earns it.
    if not report.errors and not dry_run and instance_ids is None:
        heartbeat.record_success(
            heartbeat.REAPER, stack=settings.stack, cloudwatch=clients("cloudwatch", None), now=now
        )
    return result


def handler(event: dict[str, Any] | None, context: object) -> dict[str, Any]:
    return handle(event, settings=container_settings(), clients=default_clients, now=utc_now())
