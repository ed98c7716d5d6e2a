"""A GPU fleet's day in virtual time against moto, under each guardrail configuration.

    python -m benchmarks.fleet_day            # full run: fleet day + sweeps over 5,000 and 10,000 hosts
    python -m benchmarks.fleet_day --quick    # sweeps over 1,000 and 2,000 hosts only

The day: six nightly training jobs at 01:07 (three finish in 70 minutes, one ends early, one host's
self-stop fails, one job hangs), an interactive host used for 45 minutes at 10:13 and forgotten, and
an inference pool (an Auto Scaling group) serving all day with a burst from 14:04 to 16:04. Start
times are off the sweeps' quarter hours, as real ones are.

Configurations: none; the baseline (a 15-minute sweep stopping every GPU host older than 90 minutes);
Cloud Custodian (an ``ec2`` policy with ``instance-uptime`` and ``stop``, run every 15 minutes against
the same moto endpoint, from its own virtual environment); and parkbrake's lines of defence: the
sweep alone, deadlines + sweep, and all three lines (with the host's own self-stop).

The guardrails under test reach moto over HTTP through a counting proxy exactly as they reach AWS.
The simulation itself (the "world": launching hosts, a host shutting itself down, the virtual clock)
works on moto's in-process backends, which also stand in for what moto cannot do: deliver EC2's
state-change events, fire EventBridge Scheduler schedules, and replace an Auto Scaling group's
stopped instances.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from benchmarks.harness import ACCOUNT, AMI, BASELINE_CAP, CUSTODIAN_POLICY, REGION, STACK, Custodian, Moto
from guardrails import names, tags
from guardrails.durations import parse_duration
from guardrails.pricing import load_price_table
from guardrails.settings import Settings
from lambdas import deadline, reaper

DAY_START = datetime(2025, 3, 3, tzinfo=UTC)
DAY_MINUTES = 24 * 60
SCHEDULER_DELAY = 1  # minutes: the modelled worst case between a schedule's time and its invocation
INFERENCE_GROUP = names.autoscaling_group(STACK, "inference")


@dataclass(frozen=True)
class PlannedHost:
    """One host of the day and the work it is for (all times in minutes since midnight)."""

    name: str
    instance_type: str
    pool: str
    start: int
    work: int  # minutes of useful work it was started for
    cap: str  # its parkbrake:max-runtime tag
    self_stop: str = "none"  # line one: "works", "fails", "hung" (killed at the cap), "idle" (agent)
    in_group: bool = False
    leaves_at: int | None = None  # the workload scales it in (inference burst)


DAY = (
    *(PlannedHost(f"train-{n}", "g5.12xlarge", "training", 67, 70, "90m", "works") for n in (1, 2, 3)),
    PlannedHost("train-early", "g5.12xlarge", "training", 67, 25, "90m", "works"),
    PlannedHost("train-selfstop-fails", "g5.12xlarge", "training", 67, 60, "90m", "fails"),
    PlannedHost("train-hung", "g5.12xlarge", "training", 67, 30, "90m", "hung"),
    PlannedHost("interactive-forgotten", "g5.xlarge", "interactive", 613, 45, "4h", "idle"),
    PlannedHost("inference-base", "g5.2xlarge", "inference", 0, DAY_MINUTES, "24h", in_group=True),
    *(
        PlannedHost(
            f"inference-burst-{n}", "g5.2xlarge", "inference", 844, 120, "24h", in_group=True, leaves_at=964
        )
        for n in (1, 2, 3)
    ),
)
IDLE_AFTER = 15  # parkbrake agent --idle-after
GRACE = 1  # parkbrake run --grace, in minutes


@dataclass(frozen=True)
class Guardrails:
    name: str
    line_one: bool = False  # the host stops itself (parkbrake run / agent)
    deadlines: bool = False  # line two
    sweep_every: int | None = None  # line three, minutes
    baseline_every: int | None = None
    custodian_every: int | None = None


CONFIGURATIONS = (
    Guardrails("none"),
    Guardrails("baseline: 15m sweep, 90m cap", baseline_every=15),
    Guardrails("Cloud Custodian, every 15m", custodian_every=15),
    Guardrails("parkbrake: sweep (5m)", sweep_every=5),
    Guardrails("parkbrake: deadlines + sweep", deadlines=True, sweep_every=5),
    Guardrails("parkbrake: all three lines", line_one=True, deadlines=True, sweep_every=5),
)


@dataclass
class HostRecord:
    plan: PlannedHost
    instance_id: str
    started: int
    stopped: int | None = None
    cause: str | None = None  # "self", "workload", "guardrail"
    replaced_by_group: bool = False  # stopped in place while its group still counted it


@dataclass
class DayResult:
    configuration: str
    records: list[HostRecord]
    guardrail_calls: int
    seconds: float
    end: int = DAY_MINUTES

    def gpu_hours(self, minutes_of: Callable[[HostRecord], float]) -> float:
        prices = load_price_table()
        return (
            sum(prices.instance(r.plan.instance_type).accelerators * minutes_of(r) for r in self.records) / 60
        )

    def billed_minutes(self, record: HostRecord) -> float:
        ran = (record.stopped if record.stopped is not None else self.end) - record.started
        return max(ran, 1)  # AWS bills at least 60 seconds per start

    def needed_minutes(self, record: HostRecord) -> float:
        return min(record.plan.work, self.end - record.started)

    @property
    def billed(self) -> float:
        return self.gpu_hours(self.billed_minutes)

    @property
    def needed(self) -> float:
        return self.gpu_hours(self.needed_minutes)

    @property
    def waste(self) -> float:
        return self.gpu_hours(lambda r: max(self.billed_minutes(r) - self.needed_minutes(r), 0))

    @property
    def unserved(self) -> float:
        return self.gpu_hours(lambda r: max(self.needed_minutes(r) - self.billed_minutes(r), 0))

    @property
    def cost(self) -> Decimal:
        prices = load_price_table()
        return sum(
            (
                prices.instance(r.plan.instance_type).usd_per_hour * Decimal(self.billed_minutes(r)) / 60
                for r in self.records
            ),
            Decimal(0),
        )

    @property
    def worst_overrun(self) -> float:
        """Minutes past its own cap, worst host; a host still up at midnight counts to midnight."""
        return max(
            [
                (r.stopped if r.stopped is not None else self.end)
                - (r.started + parse_duration(r.plan.cap) / timedelta(minutes=1))
                for r in self.records
            ]
            + [0.0]
        )

    @property
    def stopped_before_cap(self) -> list[HostRecord]:
        return [
            r
            for r in self.records
            if r.cause == "guardrail"
            and r.stopped is not None
            and r.stopped < r.started + parse_duration(r.plan.cap) / timedelta(minutes=1)
        ]

    @property
    def interrupted(self) -> list[HostRecord]:
        return [
            r
            for r in self.stopped_before_cap
            if r.stopped is not None and r.stopped < r.started + r.plan.work
        ]

    @property
    def replaced(self) -> list[HostRecord]:
        return [r for r in self.records if r.replaced_by_group]


class Day:
    """One configuration's day: the world acts on moto's backends; the guardrails call moto over HTTP."""

    def __init__(self, moto: Moto, guardrails: Guardrails, custodian: Custodian | None) -> None:
        self.moto, self.guardrails, self.custodian = moto, guardrails, custodian
        moto.reset()
        self.world = moto.clients(counted=False)
        self.clients = moto.clients(counted=True)
        self.ec2 = moto.backend("ec2")
        self.records: dict[str, HostRecord] = {}
        self.states: dict[str, str] = {}
        self.causes: dict[str, str] = {}
        self.settings = Settings(
            stack=STACK,
            regions=(REGION,),
            default_max_runtime=BASELINE_CAP,
            deadline_target_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{names.function_name(STACK, 'reaper')}",
            scheduler_role_arn=f"arn:aws:iam::{ACCOUNT}:role/{names.prefix(STACK)}-scheduler",
        )
        self.world("scheduler", None).create_schedule_group(Name=names.deadline_schedule_group(STACK))
        self.world("ec2", None).create_launch_template(
            LaunchTemplateName=f"{INFERENCE_GROUP}-lt",
            LaunchTemplateData={"ImageId": AMI, "InstanceType": "g5.2xlarge"},
        )
        self.world("autoscaling", None).create_auto_scaling_group(
            AutoScalingGroupName=INFERENCE_GROUP,
            LaunchTemplate={"LaunchTemplateName": f"{INFERENCE_GROUP}-lt", "Version": "$Latest"},
            MinSize=0,
            MaxSize=8,
            DesiredCapacity=0,
            AvailabilityZones=[f"{REGION}a"],
            Tags=[
                {"Key": key, "Value": value, "PropagateAtLaunch": True}
                for key, value in host_tags(next(h for h in DAY if h.in_group)).items()
            ],
        )

    def at(self, minute: int) -> datetime:
        return DAY_START + timedelta(minutes=minute)

    # The world -------------------------------------------------------------------------------------

    def launch(self, minute: int, planned: list[PlannedHost]) -> None:
        alone = [p for p in planned if not p.in_group]
        for plan in alone:
            reservation = self.ec2.run_instances(
                AMI,
                1,
                None,
                [],
                instance_type=plan.instance_type,
                is_instance_type_default=False,
                tags={"instance": host_tags(plan)},
            )
            self.started(reservation.instances[0], plan, minute)
        grouped = [p for p in planned if p.in_group]
        if grouped:
            before = set(self.group_members())
            autoscaling = self.world("autoscaling", None)
            desired = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[INFERENCE_GROUP])[
                "AutoScalingGroups"
            ][0]["DesiredCapacity"]
            autoscaling.set_desired_capacity(
                AutoScalingGroupName=INFERENCE_GROUP, DesiredCapacity=desired + len(grouped)
            )
            for instance_id, plan in zip(sorted(set(self.group_members()) - before), grouped, strict=True):
                self.started(self.ec2.get_instance(instance_id), plan, minute)

    def started(self, instance: Any, plan: PlannedHost, minute: int) -> None:
        instance.launch_time = self.at(minute).replace(tzinfo=None)  # moto keeps naive UTC
        self.records[instance.id] = HostRecord(plan, instance.id, minute)

    def group_members(self) -> list[str]:
        group = self.moto.backend("autoscaling").autoscaling_groups[INFERENCE_GROUP]
        return [state.instance.id for state in group.instance_states]

    def shut_down(self, instance_id: str) -> None:
        """The host's own `shutdown -h now` (line one): no API permission involved."""
        self.causes[instance_id] = "self"
        self.ec2.stop_instances([instance_id])

    def scale_in(self, instance_id: str) -> None:
        self.causes[instance_id] = "workload"
        self.world("autoscaling", None).terminate_instance_in_auto_scaling_group(
            InstanceId=instance_id, ShouldDecrementDesiredCapacity=True
        )

    def observe(self, minute: int) -> None:
        """Record transitions and deliver EC2's state-change events, as EventBridge would."""
        for instance_id, record in self.records.items():
            state = self.ec2.get_instance(instance_id).state
            previous = self.states.get(instance_id)
            if state == previous:
                continue
            self.states[instance_id] = state
            if state != "running" and record.stopped is None:
                record.stopped = minute
                record.cause = self.causes.get(instance_id, "guardrail")
                record.replaced_by_group = record.cause == "guardrail" and instance_id in self.group_members()
            if self.guardrails.deadlines:
                deadline.handle(
                    state_change(instance_id, state, self.at(minute)),
                    settings=self.settings,
                    clients=self.clients,
                    now=self.at(minute),
                )

    # The guardrails --------------------------------------------------------------------------------

    def fire_deadlines(self, minute: int) -> None:
        """EventBridge Scheduler: invoke each due one-time schedule with its payload, then delete it."""
        group = self.moto.backend("scheduler").schedule_groups[names.deadline_schedule_group(STACK)]
        for name, schedule in list(group.schedules.items()):
            due = datetime.fromisoformat(schedule.schedule_expression[3:-1]).replace(tzinfo=UTC)
            if due + timedelta(minutes=SCHEDULER_DELAY) <= self.at(minute):
                del group.schedules[name]
                payload = json.loads(schedule.target["Input"])
                reaper.handle(payload, settings=self.settings, clients=self.clients, now=self.at(minute))

    def baseline_sweep(self, minute: int) -> None:
        """What teams write first: stop every running GPU host older than 90 minutes, in one call."""
        ec2 = self.clients("ec2", REGION)
        hosts = reaper.list_hosts(ec2, REGION)
        due = [h.instance_id for h in hosts if self.at(minute) - h.launch_time >= BASELINE_CAP]
        if due:
            ec2.stop_instances(InstanceIds=due)

    def custodian_run(self, minute: int) -> None:
        """Custodian judges uptime against the real clock: present each host's virtual age as real age."""
        assert self.custodian is not None
        real_now = datetime.now(UTC).replace(tzinfo=None)
        running = [r for r in self.records.values() if self.states.get(r.instance_id) == "running"]
        for record in running:
            self.ec2.get_instance(record.instance_id).launch_time = real_now - timedelta(
                minutes=minute - record.started
            )
        try:
            self.custodian.run(CUSTODIAN_POLICY)
        finally:
            for record in running:
                self.ec2.get_instance(record.instance_id).launch_time = self.at(record.started).replace(
                    tzinfo=None
                )

    def run(self) -> DayResult:
        started = time.perf_counter()
        g = self.guardrails
        for minute in range(DAY_MINUTES):
            starting = [p for p in DAY if p.start == minute]
            if starting:
                self.launch(minute, starting)
            for record in list(self.records.values()):
                if self.states.get(record.instance_id) != "running":
                    continue
                if record.plan.leaves_at == minute:
                    self.scale_in(record.instance_id)
                elif g.line_one and self_stop_minute(record.plan) == minute - record.started:
                    self.shut_down(record.instance_id)
            self.observe(minute)
            if g.deadlines:
                self.fire_deadlines(minute)
            if g.sweep_every and minute % g.sweep_every == 0:
                reaper.handle({}, settings=self.settings, clients=self.clients, now=self.at(minute))
            if g.baseline_every and minute % g.baseline_every == 0:
                self.baseline_sweep(minute)
            if g.custodian_every and minute % g.custodian_every == 0:
                self.custodian_run(minute)
            self.observe(minute)
        return DayResult(
            g.name,
            list(self.records.values()),
            sum(self.moto.proxy.calls.values()),
            time.perf_counter() - started,
        )


def self_stop_minute(plan: PlannedHost) -> int | None:
    """When line one stops the host, in minutes after it started; None when it cannot."""
    cap = int(parse_duration(plan.cap) / timedelta(minutes=1))
    return {
        "works": plan.work,
        "hung": cap + GRACE,  # parkbrake run: SIGTERM at the cap, SIGKILL after the grace, then shutdown
        "idle": plan.work + IDLE_AFTER,  # parkbrake agent: idle for the whole window
    }.get(plan.self_stop)


def host_tags(plan: PlannedHost) -> dict[str, str]:
    return {
        tags.MANAGED: "true",
        tags.STACK: STACK,
        tags.POOL: plan.pool,
        tags.TENANT: "research",
        tags.MAX_RUNTIME: plan.cap,
        tags.REVISION: "bench",
    }


def state_change(instance_id: str, state: str, at: datetime) -> dict[str, Any]:
    return {
        "version": "0",
        "id": f"{instance_id}-{state}-{at:%H%M}",
        "detail-type": "EC2 Instance State-change Notification",
        "source": "aws.ec2",
        "account": ACCOUNT,
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, "state": state},
    }


# One sweep over a large fleet ------------------------------------------------------------------------


@dataclass
class SweepFigures:
    tool: str
    hosts: int
    calls: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    stopped: int = 0


# moto counts MaxResults in reservations where AWS counts instances: seeded 50 hosts a reservation,
# 20 reservations a page are AWS's 1,000 hosts a page, for both tools.
HOSTS_PER_RESERVATION = 50
PAGE_OF_RESERVATIONS = 20


def seed_fleet(moto: Moto, size: int) -> list[str]:
    """``size`` hosts in reservations of 50: a quarter GPU (half of those past a 90m cap), the rest CPU."""
    moto.reset()
    ec2 = moto.backend("ec2")
    now = datetime.now(UTC).replace(tzinfo=None)
    overdue: list[str] = []
    gpu_tags = {
        tags.MANAGED: "true",
        tags.STACK: STACK,
        tags.POOL: "training",
        tags.TENANT: "research",
        tags.MAX_RUNTIME: "90m",
        tags.REVISION: "bench",
    }
    for batch in range(math.ceil(size / HOSTS_PER_RESERVATION)):
        gpu = batch % 4 == 0
        reservation = ec2.run_instances(
            AMI,
            min(HOSTS_PER_RESERVATION, size - batch * HOSTS_PER_RESERVATION),
            None,
            [],
            instance_type="g5.xlarge" if gpu else "m5.large",
            is_instance_type_default=False,
            tags={"instance": gpu_tags if gpu else {"Name": "web"}},
        )
        age = timedelta(minutes=100 if batch % 8 == 0 else 30)
        for instance in reservation.instances:
            instance.launch_time = now - age
            if gpu and batch % 8 == 0:
                overdue.append(instance.id)
    return overdue


def sweep_comparison(moto: Moto, custodian: Custodian, size: int) -> list[SweepFigures]:
    overdue = seed_fleet(moto, size)
    ec2 = moto.backend("ec2")
    custodian_figures = SweepFigures("Cloud Custodian", size)
    moto.proxy.clear()
    paged = [
        {"Filters": [{"Name": "instance-state-name", "Values": ["running"]}]},
        {"MaxResults": PAGE_OF_RESERVATIONS},
    ]
    stopped, seconds = custodian.run({**CUSTODIAN_POLICY, "query": paged})
    custodian_figures.calls = dict(moto.proxy.calls)
    custodian_figures.seconds = seconds
    custodian_figures.stopped = len(stopped)

    for instance_id in overdue:  # the same fleet again for parkbrake
        ec2.start_instances([instance_id])
        ec2.get_instance(instance_id).launch_time = datetime.now(UTC).replace(tzinfo=None) - timedelta(
            minutes=100
        )
    settings = Settings(stack=STACK, regions=(REGION,))
    clients = moto.clients(counted=True)
    moto.proxy.clear()
    started = time.perf_counter()
    now = datetime.now(UTC)
    plan = reaper.plan_sweep(settings, now=now, clients=clients, page_size=PAGE_OF_RESERVATIONS)
    report = reaper.execute_sweep(plan, settings, now=now, clients=clients, dry_run=False)
    parkbrake_figures = SweepFigures(
        "parkbrake", size, dict(moto.proxy.calls), time.perf_counter() - started, len(report.outcome.acted)
    )
    return [custodian_figures, parkbrake_figures]


# Report ---------------------------------------------------------------------------------------------


def ratio(value: float, reference: float) -> str:
    if reference == 0:
        return "n/a" if value == 0 else "inf"
    return f"{value / reference:.2f}x"


def print_day(results: list[DayResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="A fleet day (virtual time, moto)", show_lines=False)
    for column in (
        "configuration",
        "GPU-h billed",
        "GPU-h needed",
        "waste GPU-h",
        "unserved GPU-h",
        "cost $",
        "worst overrun",
        "stopped before own cap",
        "of which mid-work",
        "ASG would replace",
        "API calls",
    ):
        table.add_column(column, justify="right" if column != "configuration" else "left")
    for r in results:
        table.add_row(
            r.configuration,
            f"{r.billed:.1f}",
            f"{r.needed:.1f}",
            f"{r.waste:.1f}",
            f"{r.unserved:.1f}",
            f"{r.cost:.2f}",
            f"{r.worst_overrun:.0f}m",
            str(len(r.stopped_before_cap)),
            str(len(r.interrupted)),
            str(len(r.replaced)),
            str(r.guardrail_calls),
        )
    Console(width=200).print(table)
    by_name = {r.configuration: r for r in results}
    best, baseline, peer = results[-1], by_name[CONFIGURATIONS[1].name], by_name[CONFIGURATIONS[2].name]
    for reference in (baseline, peer):
        print(
            f"{best.configuration} vs {reference.configuration}: waste {ratio(best.waste, reference.waste)}, "
            f"billed {ratio(best.billed, reference.billed)}, unserved {best.unserved:.1f} vs "
            f"{reference.unserved:.1f} GPU-h, worst overrun {best.worst_overrun:.0f}m vs "
            f"{reference.worst_overrun:.0f}m, hosts stopped before their cap {len(best.stopped_before_cap)} vs "
            f"{len(reference.stopped_before_cap)}, ASG replacements {len(best.replaced)} vs {len(reference.replaced)}"
        )


def print_sweeps(figures: list[SweepFigures]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="One sweep over a large fleet (a quarter GPU, half of those past their cap)")
    for column in ("tool", "hosts", "API calls", "DescribeInstances", "StopInstances", "stopped", "wall s"):
        table.add_column(column, justify="right" if column != "tool" else "left")
    for f in figures:
        table.add_row(
            f.tool,
            str(f.hosts),
            str(sum(f.calls.values())),
            str(f.calls.get("DescribeInstances", 0)),
            str(f.calls.get("StopInstances", 0)),
            str(f.stopped),
            f"{f.seconds:.1f}",
        )
    Console(width=200).print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="sweep over 1,000 and 2,000 hosts instead of 5,000/10,000"
    )
    parser.add_argument("--sizes", type=int, nargs="*", help="fleet sizes of the sweep comparison")
    args = parser.parse_args(argv)
    sizes = args.sizes or ([1000, 2000] if args.quick else [5000, 10000])

    import logging

    logging.disable(logging.WARNING)  # moto's and the Lambdas' logs would drown the figures
    total = time.perf_counter()
    moto = Moto()
    custodian = Custodian(moto.proxy.url)
    try:
        results = [Day(moto, g, custodian if g.custodian_every else None).run() for g in CONFIGURATIONS]
        print_day(results)
        figures = [f for size in sizes for f in sweep_comparison(moto, custodian, size)]
        print_sweeps(figures)
    finally:
        custodian.close()
        moto.close()
    print(f"benchmark wall time {time.perf_counter() - total:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
