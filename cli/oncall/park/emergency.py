"""``park --now`` and ``unpark --now``: the emergency path, straight through the AWS API.

Parking sets the SSM park parameter first (from then on the launcher refuses), disables the stack's
nightly start schedules (never the reaper's), then scales every managed Auto Scaling group and every
ECS service of the stack's cluster to zero. The guardrails keep running.

What parking takes away is recorded in AWS itself, never in a local file, so that any engineer's
``unpark --now`` — another laptop, another day — restores it exactly: a ``parkbrake:parked-capacity``
tag on each group (``{"desired":2,"max":3,"min":1}``), each service (``{"desired":2,"scaling_min":1}``)
and the schedule group (``{"enabled_schedules":[...]}``). A record is written before the capacity is
taken away and removed only after it is restored, and an existing record is never overwritten, so
parking twice (or two engineers at once) never records zeros. One resource's API error is reported
and the others are still processed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from botocore.exceptions import ClientError

from cli.oncall.ecs import cluster_services, set_desired_count, tag_resource, untag_resource
from cli.oncall.nightly.schedules import Schedule, list_schedules, set_state
from cli.oncall.park.actions import (
    ClusterBrake,
    EmergencyResult,
    PartlyDone,
    Run,
    drift_message,
    write_record,
)
from cli.oncall.park.records import ParkedBy, decode_record, encode_record
from cli.oncall.stack_inventory import (
    ECS_DESIRED_COUNT,
    ecs_tags,
    managed_groups,
    park_parameter_value,
    service_resource_id,
    service_scalable_targets,
    unknown_stack,
)
from guardrails import names, tags
from guardrails.plurals import counted
from lambdas.aws.environment import ClientFactory
from lambdas.aws.errors import describe_error


@dataclass
class _Inventory:
    """What the stack has in the region, read before anything is changed."""

    parameter: str | None = None  # the park parameter's value; None when it does not exist
    groups: list[dict[str, Any]] = field(default_factory=list)
    services: list[dict[str, Any]] = field(default_factory=list)
    scalable_targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    schedules: list[Schedule] = field(default_factory=list)
    schedule_group_arn: str | None = None
    schedule_record: dict[str, Any] | None = None

    @property
    def empty(self) -> bool:
        return self.parameter is None and not (self.groups or self.services or self.schedules)

    @property
    def nightly(self) -> list[Schedule]:
        return [schedule for schedule in self.schedules if schedule.kind == "nightly"]


def park_now(
    stack: str,
    *,
    region: str,
    clients: ClientFactory,
    dry_run: bool,
    config_parked: bool | None,
    parked_by: ParkedBy | None = None,
    cluster: ClusterBrake | None = None,
) -> EmergencyResult:
    """Park on AWS and, for a Kubernetes stack (``cluster``), on its cluster after the AWS actions."""
    result = EmergencyResult(stack, region, parking=True, dry_run=dry_run)
    run = Run(stack, region, clients, result, parked_by=parked_by)
    inventory = _inventory(run, cluster is not None)
    _set_parameter(run, inventory, "true")
    _disable_nightly(run, inventory)
    for group in inventory.groups:
        _park_group(run, group)
    for service in inventory.services:
        _park_service(run, service, inventory.scalable_targets.get(_resource_id(stack, service)))
    if cluster is not None:
        run.result.actions.extend(cluster(True, dry_run))
    run.result.reconcile = reconcile_notes(stack, parking=True, config_parked=config_parked)
    return run.result


def unpark_now(
    stack: str,
    *,
    region: str,
    clients: ClientFactory,
    dry_run: bool,
    config_parked: bool | None,
    force: bool = False,
    cluster: ClusterBrake | None = None,
) -> EmergencyResult:
    """Restore what parking recorded; the nightly schedules and the SSM flag follow only when every
    group and service came back, so a partial unpark stays parked where the launcher looks."""
    result = EmergencyResult(stack, region, parking=False, dry_run=dry_run)
    run = Run(stack, region, clients, result, force=force)
    inventory = _inventory(run, cluster is not None)
    for group in inventory.groups:
        _unpark_group(run, group)
    for service in inventory.services:
        _unpark_service(run, service, inventory.scalable_targets.get(_resource_id(stack, service)))
    if cluster is not None:  # the ClusterQueues too, before the launcher's flag says unparked
        run.result.actions.extend(cluster(False, dry_run))
    if run.result.failed:
        _stay_parked(run, inventory)
    else:
        _enable_recorded(run, inventory)
        _set_parameter(run, inventory, "false")
    run.result.reconcile = reconcile_notes(stack, parking=False, config_parked=config_parked)
    return run.result


def _stay_parked(run: Run, inventory: _Inventory) -> None:
    fix = (
        f"{counted(len(run.result.failed), 'group, service or queue', 'groups, services or queues')} not restored (above): fix them, or pass --force "
        "for drift, then run unpark --now again"
    )
    for schedule in inventory.nightly:
        run.add("schedule", schedule.name, f"left {schedule.state.lower()}", "skipped", fix)
    if inventory.parameter is not None:
        run.add(
            "ssm-parameter", names.park_parameter(run.stack), f"left {inventory.parameter}", "skipped", fix
        )


def reconcile_notes(stack: str, *, parking: bool, config_parked: bool | None) -> list[str]:
    """What the next ``pulumi up`` will do to what ``--now`` just did.

    A plain ``pulumi up`` compares the config with Pulumi's state, not with AWS, so it only undoes
    ``--now`` when it updates these resources or runs with ``--refresh`` (as ``--apply`` does).
    """
    file, verb, wanted = f"Pulumi.{stack}.yaml", "park" if parking else "unpark", str(parking).lower()
    if config_parked is None:
        return [
            f"could not read {file} here; make sure its parkbrake:parked says {wanted} before the next `pulumi up`"
        ]
    if config_parked != parking:
        undo = "scales everything back up" if parking else "parks the stack again"
        return [
            f"{file} still says parked: {str(config_parked).lower()}, so the next `pulumi up --refresh` {undo}; "
            f"run `parkbrake {verb} --stack {stack}` to make it stick"
        ]
    if parking:
        return [
            f"{file} says parked: true, as AWS now is; `parkbrake unpark --now` restores the recorded "
            f"capacities, `parkbrake unpark --stack {stack} --apply` the configured ones"
        ]
    return [f"{file} says parked: false, as AWS now is"]


# --- reading -------------------------------------------------------------------------------------


def _inventory(run: Run, has_cluster: bool = False) -> _Inventory:
    inventory = _Inventory()
    inventory.parameter = park_parameter_value(run.client("ssm"), run.stack)
    readers: list[tuple[str, str, Callable[[], None]]] = [
        (
            "autoscaling-group",
            "*",
            lambda: inventory.groups.extend(managed_groups(run.client("autoscaling"), run.stack)),
        ),
        ("ecs-service", names.ecs_cluster(run.stack), lambda: _read_services(run, inventory)),
        ("schedule", names.schedule_group(run.stack), lambda: _read_schedules(run, inventory)),
    ]
    for kind, name, read in readers:
        try:
            read()
        except ClientError as error:
            run.add(kind, name, "could not list", "failed", describe_error(error))
    if inventory.empty and not run.result.failed and not has_cluster:
        problem = (
            f"found nothing of stack {run.stack!r} in {run.region}: no park parameter "
            f"{names.park_parameter(run.stack)}, no managed Auto Scaling groups, no ECS cluster "
            f"{names.ecs_cluster(run.stack)}, no schedules"
        )
        raise unknown_stack(problem, run.stack, [run.region], lambda _: run.client("ssm"))
    return inventory


def _read_services(run: Run, inventory: _Inventory) -> None:
    cluster = names.ecs_cluster(run.stack)
    inventory.services = cluster_services(run.client("ecs"), cluster)
    resource_ids = [service_resource_id(cluster, service["serviceName"]) for service in inventory.services]
    if resource_ids:
        inventory.scalable_targets = service_scalable_targets(
            run.client("application-autoscaling"), resource_ids
        )


def _read_schedules(run: Run, inventory: _Inventory) -> None:
    scheduler = run.client("scheduler")
    inventory.schedules = list_schedules(scheduler, run.stack)
    if not inventory.schedules:
        return
    arn = scheduler.get_schedule_group(Name=names.schedule_group(run.stack))["Arn"]
    inventory.schedule_group_arn = arn
    group_tags = tags.as_dict(scheduler.list_tags_for_resource(ResourceArn=arn)["Tags"])
    if tags.PARKED_CAPACITY in group_tags:
        try:
            inventory.schedule_record = decode_record(
                group_tags[tags.PARKED_CAPACITY], ("enabled_schedules",)
            )
        except ValueError as error:
            run.add(
                "schedule",
                names.schedule_group(run.stack),
                "read the record",
                "failed",
                f"unreadable record: {error}",
            )


def _resource_id(stack: str, service: dict[str, Any]) -> str:
    return service_resource_id(names.ecs_cluster(stack), service["serviceName"])


# --- the park parameter ----------------------------------------------------------------------------


def _set_parameter(run: Run, inventory: _Inventory, value: str) -> None:
    name = names.park_parameter(run.stack)
    if inventory.parameter is None:
        run.add(
            "ssm-parameter",
            name,
            f"set to {value}",
            "failed",
            f"does not exist in {run.region}; is the stack deployed here? (not created: Pulumi owns it)",
        )
        return
    if inventory.parameter == value:
        run.add("ssm-parameter", name, f"already {value}", "unchanged")
        return
    change = f"{inventory.parameter} → {value}"
    run.attempt(
        "ssm-parameter",
        name,
        change,
        lambda: run.client("ssm").put_parameter(Name=name, Value=value, Type="String", Overwrite=True),
    )


# --- schedules -------------------------------------------------------------------------------------


def _disable_nightly(run: Run, inventory: _Inventory) -> None:
    if not inventory.nightly:
        return
    scheduler = run.client("scheduler")
    recorded = set((inventory.schedule_record or {}).get("enabled_schedules", []))
    enabled = {schedule.name for schedule in inventory.nightly if schedule.enabled}
    if inventory.schedule_record is None or not enabled <= recorded:
        record = encode_record({"enabled_schedules": sorted(recorded | enabled)} | run.record_fields())
        run.attempt(
            "schedule",
            names.schedule_group(run.stack),
            f"record enabled nightly schedules {record}",
            lambda: scheduler.tag_resource(
                ResourceArn=inventory.schedule_group_arn,
                Tags=[{"Key": tags.PARKED_CAPACITY, "Value": record}],
            ),
        )
    for schedule in inventory.nightly:
        if not schedule.enabled:
            run.add("schedule", schedule.name, "already disabled", "unchanged")
            continue
        run.attempt(
            "schedule",
            schedule.name,
            "ENABLED → DISABLED",
            partial(set_state, scheduler, schedule, "DISABLED"),
        )


def _enable_recorded(run: Run, inventory: _Inventory) -> None:
    if not inventory.nightly:
        return
    scheduler = run.client("scheduler")
    if inventory.schedule_record is None:
        for schedule in inventory.nightly:
            run.add(
                "schedule",
                schedule.name,
                f"left {schedule.state.lower()}",
                "skipped",
                "no parked-capacity record on the schedule group",
            )
        return
    recorded = set(inventory.schedule_record.get("enabled_schedules", []))
    failed_before = len(run.result.failed)
    for schedule in inventory.nightly:
        if schedule.name not in recorded:
            run.add(
                "schedule",
                schedule.name,
                f"left {schedule.state.lower()} (was not enabled when parked)",
                "skipped",
            )
        elif schedule.enabled:
            run.add("schedule", schedule.name, "already enabled", "unchanged")
        else:
            run.attempt(
                "schedule",
                schedule.name,
                "DISABLED → ENABLED",
                partial(set_state, scheduler, schedule, "ENABLED"),
            )
    if len(run.result.failed) == failed_before:  # keep the record until every schedule is back
        run.attempt(
            "schedule",
            names.schedule_group(run.stack),
            "remove the parked-capacity record",
            lambda: scheduler.untag_resource(
                ResourceArn=inventory.schedule_group_arn, TagKeys=[tags.PARKED_CAPACITY]
            ),
        )


# --- Auto Scaling groups ---------------------------------------------------------------------------


def _park_group(run: Run, group: dict[str, Any]) -> None:
    autoscaling = run.client("autoscaling")
    name = group["AutoScalingGroupName"]
    current = {"min": group["MinSize"], "desired": group["DesiredCapacity"], "max": group["MaxSize"]}
    recorded = tags.PARKED_CAPACITY in tags.as_dict(group.get("Tags"))
    at_zero = current["min"] == 0 and current["desired"] == 0
    if recorded and at_zero:
        run.add("autoscaling-group", name, "already at 0 (capacity recorded)", "unchanged")
        return
    record = encode_record(current | run.record_fields())
    lowered = [f"{key} {current[key]}→0" for key in ("min", "desired") if current[key]]
    change = ", ".join(lowered or ["already at 0"]) + f", max {current['max']} kept"
    change += "" if recorded else f"; record {record}"

    def operation() -> None:
        unrecorded = (
            None
            if recorded
            else write_record(
                lambda: autoscaling.create_or_update_tags(
                    Tags=[
                        {
                            "ResourceId": name,
                            "ResourceType": "auto-scaling-group",
                            "Key": tags.PARKED_CAPACITY,
                            "Value": record,
                            "PropagateAtLaunch": False,
                        }
                    ]
                )
            )
        )
        if not at_zero:
            autoscaling.update_auto_scaling_group(AutoScalingGroupName=name, MinSize=0, DesiredCapacity=0)
        if unrecorded:
            raise PartlyDone(f"scaled to 0, but could not record {record} ({unrecorded}); restore it by hand")

    run.attempt("autoscaling-group", name, change, operation)


def _unpark_group(run: Run, group: dict[str, Any]) -> None:
    autoscaling = run.client("autoscaling")
    name = group["AutoScalingGroupName"]
    text = tags.as_dict(group.get("Tags")).get(tags.PARKED_CAPACITY)
    now = f"min {group['MinSize']}, desired {group['DesiredCapacity']}, max {group['MaxSize']}"
    if text is None:
        run.add("autoscaling-group", name, f"left at {now}", "skipped", None)
        return
    try:
        record = decode_record(text, ("min", "desired", "max"))
    except ValueError as error:
        run.add("autoscaling-group", name, f"left at {now}", "failed", f"unreadable record: {error}")
        return
    change = f"{now} → min {record['min']}, desired {record['desired']}, max {record['max']}"
    left = {"min": 0, "desired": 0, "max": record["max"]}
    current = {"min": group["MinSize"], "desired": group["DesiredCapacity"], "max": group["MaxSize"]}
    drift = [
        f"{key} {left[key]}→{current[key]}" for key in ("min", "desired", "max") if current[key] != left[key]
    ]
    if drift and not run.force:
        run.add("autoscaling-group", name, change, "drift", drift_message(drift))
        return

    def operation() -> None:
        autoscaling.update_auto_scaling_group(
            AutoScalingGroupName=name,
            MinSize=int(record["min"]),
            MaxSize=int(record["max"]),
            DesiredCapacity=int(record["desired"]),
        )
        autoscaling.delete_tags(
            Tags=[{"ResourceId": name, "ResourceType": "auto-scaling-group", "Key": tags.PARKED_CAPACITY}]
        )

    run.attempt("autoscaling-group", name, change, operation)


# --- ECS services ----------------------------------------------------------------------------------


def _park_service(run: Run, service: dict[str, Any], target: dict[str, Any] | None) -> None:
    ecs, scaling = run.client("ecs"), run.client("application-autoscaling")
    name, arn, desired = service["serviceName"], service["serviceArn"], service["desiredCount"]
    scaling_min = None if target is None else target["MinCapacity"]
    recorded = tags.PARKED_CAPACITY in ecs_tags(service)
    if recorded and desired == 0 and not scaling_min:
        run.add("ecs-service", name, "already at 0 (capacity recorded)", "unchanged")
        return
    record = encode_record(
        {"desired": desired}
        | ({} if scaling_min is None else {"scaling_min": scaling_min})
        | run.record_fields()
    )
    change = f"desired {desired}→0" if desired else "already at 0"
    change += f", autoscaling min {scaling_min}→0" if scaling_min else ""
    change += "" if recorded else f"; record {record}"

    def operation() -> None:
        unrecorded = (
            None if recorded else write_record(lambda: tag_resource(ecs, arn, tags.PARKED_CAPACITY, record))
        )
        if scaling_min:  # first, or Application Auto Scaling would put the tasks straight back
            scaling.register_scalable_target(
                ServiceNamespace="ecs",
                ResourceId=_resource_id(run.stack, service),
                ScalableDimension=ECS_DESIRED_COUNT,
                MinCapacity=0,
            )
        if desired:
            set_desired_count(ecs, names.ecs_cluster(run.stack), name, 0)
        if unrecorded:
            raise PartlyDone(f"scaled to 0, but could not record {record} ({unrecorded}); restore it by hand")

    run.attempt("ecs-service", name, change, operation)


def _unpark_service(run: Run, service: dict[str, Any], target: dict[str, Any] | None) -> None:
    ecs, scaling = run.client("ecs"), run.client("application-autoscaling")
    name, arn = service["serviceName"], service["serviceArn"]
    text = ecs_tags(service).get(tags.PARKED_CAPACITY)
    now = f"desired {service['desiredCount']}"
    if text is None:
        run.add("ecs-service", name, f"left at {now}", "skipped", None)
        return
    try:
        record = decode_record(text, ("desired",))
    except ValueError as error:
        run.add("ecs-service", name, f"left at {now}", "failed", f"unreadable record: {error}")
        return
    scaling_min = record.get("scaling_min") if target is not None else None
    change = f"{now} → {record['desired']}" + (
        f", autoscaling min → {scaling_min}" if scaling_min is not None else ""
    )
    if service["desiredCount"] and not run.force:
        drift = [f"desired 0→{service['desiredCount']}"]
        run.add("ecs-service", name, change, "drift", drift_message(drift))
        return

    def operation() -> None:
        if scaling_min is not None:
            scaling.register_scalable_target(
                ServiceNamespace="ecs",
                ResourceId=_resource_id(run.stack, service),
                ScalableDimension=ECS_DESIRED_COUNT,
                MinCapacity=int(scaling_min),
            )
        set_desired_count(ecs, names.ecs_cluster(run.stack), name, int(record["desired"]))
        untag_resource(ecs, arn, tags.PARKED_CAPACITY)

    run.attempt("ecs-service", name, change, operation)
