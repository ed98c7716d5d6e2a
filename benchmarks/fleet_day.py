"""A GPU fleet's day in virtual time against moto, under each guardrail configuration.

    python -m benchmarks.fleet_day                     # the day at 0 s and 60 s delay
    python -m benchmarks.fleet_day --delays 0 120      # other Scheduler delivery delays, in seconds

(One sweep over a large fleet, against Cloud Custodian's, is ``python -m benchmarks.fleet_sweep``.)

The day (times UTC; starts off the sweeps' quarter hours, as real ones are):
- six nightly training jobs at 01:07 under ``parkbrake run --max-runtime 90m --hang-after 10m``:
  three finish in 70 minutes, one in 25, one hangs after 30 minutes holding its CUDA contexts at
  0 %, one finishes in 60 but its host's OS shutdown is accepted and never happens, and one whose
  wrapper is SIGKILLed 20 minutes in (its job finishes at 70);
- a notebook used for 45 minutes at 10:13 and forgotten with its kernel (and CUDA context) open;
- three hosts whose tags take them out of the guardrails' view: a training host whose
  ``parkbrake:stack`` is a typo (02:22, 60 minutes of work), a dev host with ``parkbrake:managed``
  removed (09:00, 2 hours), and a host tagged ``parkbrake:max-runtime=31d`` started yesterday at
  18:00 for a 20-hour job;
- an inference pool (an Auto Scaling group) serving all day, with a burst from 14:04 to 16:04.
Every host runs ``parkbrake agent`` (the team's image); line one is the code of ``run`` and ``agent``
run in virtual time (``benchmarks/line_one.py`` says what is modelled there).

Configurations: none; two baselines, each also as Cloud Custodian configured the same way (an
``ec2`` policy with ``instance-uptime`` and ``stop``, run every 15 minutes against the same moto
endpoint from its own virtual environment): the case study's (a 15-minute sweep stopping training
hosts older than 90 minutes; serving and other hosts left alone) and a uniform one (every GPU host
older than 90 minutes); then parkbrake's lines: the sweep alone (every 5 minutes), deadlines + sweep,
and all three. EventBridge Scheduler's delivery delay is a parameter: a deadline fires that long
after its time. The guardrails reach moto over HTTP through a counting proxy exactly as they reach
AWS; the world (launching hosts, a host going down, the clock) works on moto's backends, which
also stand in for what moto cannot do: deliver EC2's state-change events and fire schedules.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.fleet_plan import (
    DAY,
    DAY_MINUTES,
    DAY_START,
    DEFAULT_CAP,
    INFERENCE_GROUP,
    PlannedHost,
    host_plan,
    host_tags,
)
from benchmarks.harness import ACCOUNT, AMI, BASELINE_CAP, REGION, STACK, Custodian, Moto, custodian_policy
from benchmarks.line_one import LineOneAction, line_one
from guardrails import names
from guardrails.pricing import load_price_table
from guardrails.settings import Settings
from lambdas import deadline, reaper
from lambdas.aws.ec2_hosts import list_hosts


@dataclass(frozen=True)
class Guardrails:
    name: str
    line_one: bool = False  # the hosts stop themselves (parkbrake run, watchdog, agent)
    deadlines: bool = False  # line two
    sweep_every: int | None = None  # line three, minutes
    baseline_every: int | None = None
    baseline_pools: tuple[str, ...] | None = None  # None: every GPU host
    custodian_every: int | None = None

    @property
    def uses_delay(self) -> bool:
        return self.deadlines


CASE_STUDY = ("training",)
CONFIGURATIONS = (
    Guardrails("none"),
    Guardrails(
        "case-study baseline: 15m sweep, 90m cap, training only", baseline_every=15, baseline_pools=CASE_STUDY
    ),
    Guardrails("uniform baseline: 15m sweep, 90m cap, every GPU host", baseline_every=15),
    Guardrails("Cloud Custodian as the case study", custodian_every=15, baseline_pools=CASE_STUDY),
    Guardrails("Cloud Custodian uniform", custodian_every=15),
    Guardrails("parkbrake: sweep (5m)", sweep_every=5),
    Guardrails("parkbrake: deadlines + sweep", deadlines=True, sweep_every=5),
    Guardrails("parkbrake: all three lines", line_one=True, deadlines=True, sweep_every=5),
)


@dataclass
class HostRecord:
    plan: PlannedHost
    instance_id: str
    started: float  # minutes
    stopped: float | None = None
    cause: str | None = None  # what stopped it
    reported: float | None = None  # first sweep that named it without stopping it
    actions: list[LineOneAction] = field(default_factory=list)
    replaced_by_group: bool = False  # stopped in place while its group still counted it


@dataclass
class DayResult:
    configuration: Guardrails
    delay: float | None  # seconds; None where no deadline is involved
    records: list[HostRecord]
    guardrail_calls: int
    seconds: float

    def gpus(self, record: HostRecord) -> int:
        return load_price_table().instance(record.plan.instance_type).accelerators

    def day_part(self, record: HostRecord) -> tuple[float, float]:
        """The host's billed span inside the day, in minutes."""
        start = max(record.started, 0.0)
        end = record.stopped if record.stopped is not None else DAY_MINUTES
        return start, max(end, start)

    def needed_minutes(self, record: HostRecord) -> float:
        start, _ = self.day_part(record)
        work_end = min(record.started + record.plan.work, DAY_MINUTES)
        return max(work_end - start, 0.0)

    def billed_minutes(self, record: HostRecord) -> float:
        start, end = self.day_part(record)
        return end - start

    def waste_of(self, record: HostRecord) -> float:
        return self.gpus(record) * max(self.billed_minutes(record) - self.needed_minutes(record), 0) / 60

    def unserved_of(self, record: HostRecord) -> float:
        return self.gpus(record) * max(self.needed_minutes(record) - self.billed_minutes(record), 0) / 60

    @property
    def billed(self) -> float:
        return sum(self.gpus(r) * self.billed_minutes(r) for r in self.records) / 60

    @property
    def needed(self) -> float:
        return sum(self.gpus(r) * self.needed_minutes(r) for r in self.records) / 60

    @property
    def waste(self) -> float:
        return sum(self.waste_of(r) for r in self.records)

    @property
    def unserved(self) -> float:
        return sum(self.unserved_of(r) for r in self.records)

    def overrun_of(self, record: HostRecord) -> float:
        """Seconds past the cap the guardrails should enforce; a host still up at midnight counts to midnight."""
        end = record.stopped if record.stopped is not None else DAY_MINUTES
        cap = record.plan.enforced_cap
        if cap is None:
            return 0.0
        due = record.started + cap / timedelta(minutes=1)
        return max((end - due) * 60, 0.0) if due <= DAY_MINUTES else 0.0

    @property
    def worst_overrun(self) -> tuple[float, str]:
        worst = max(self.records, key=self.overrun_of)
        return self.overrun_of(worst), worst.plan.name

    def waste_by_scenario(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for record in self.records:
            totals[record.plan.scenario] = totals.get(record.plan.scenario, 0.0) + self.waste_of(record)
        return totals


class Day:
    """One configuration's day: the world acts on moto's backends; the guardrails call moto over HTTP."""

    def __init__(self, moto: Moto, guardrails: Guardrails, custodian: Custodian | None, delay: float) -> None:
        self.moto, self.guardrails, self.custodian, self.delay = moto, guardrails, custodian, delay
        moto.reset()
        self.world = moto.clients(counted=False)
        self.clients = moto.clients(counted=True)
        self.ec2 = moto.backend("ec2")
        self.records: dict[str, HostRecord] = {}
        self.states: dict[str, str] = {}
        self.settings = Settings(
            stack=STACK,
            regions=(REGION,),
            default_max_runtime=DEFAULT_CAP,
            deadline_target_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{names.function_name(STACK, 'reaper')}",
            scheduler_role_arn=f"arn:aws:iam::{ACCOUNT}:role/{names.prefix(STACK)}-scheduler",
        )
        # The bench stack exists (its park state is how a sweep tells a live stack from a typo).
        self.world("ssm", None).put_parameter(Name=f"/parkbrake/{STACK}/parked", Value="false", Type="String")
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

    def at(self, minute: float) -> datetime:
        return DAY_START + timedelta(minutes=minute)

    # The world -------------------------------------------------------------------------------------

    def launch(self, minute: int, planned: list[PlannedHost]) -> None:
        for plan in (p for p in planned if not p.in_group):
            reservation = self.ec2.run_instances(
                AMI,
                1,
                None,
                [],
                instance_type=plan.instance_type,
                is_instance_type_default=False,
                tags={"instance": host_tags(plan)},
            )
            self.started(reservation.instances[0], plan)
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
                self.started(self.ec2.get_instance(instance_id), plan)

    def started(self, instance: Any, plan: PlannedHost) -> None:
        instance.launch_time = self.at(plan.start).replace(tzinfo=None)  # moto keeps naive UTC
        record = HostRecord(plan, instance.id, float(plan.start))
        if self.guardrails.line_one:
            record.actions = line_one(host_plan(plan, instance.id), self.at(plan.start))
        self.records[instance.id] = record

    def group_members(self) -> list[str]:
        group = self.moto.backend("autoscaling").autoscaling_groups[INFERENCE_GROUP]
        return [state.instance.id for state in group.instance_states]

    def self_stops(self, minute: int) -> None:
        """Line one: each host's own requests up to now, at the instant it made them."""
        for record in self.records.values():
            while record.actions and record.actions[0].at <= self.at(minute):
                action = record.actions.pop(0)
                if self.states.get(record.instance_id) != "running":
                    continue
                moment = (action.at - DAY_START) / timedelta(minutes=1)
                if action.kind == "os-shutdown" and record.plan.os_shutdown_works:
                    self.ec2.stop_instances([record.instance_id])  # EC2 honours the OS's shutdown
                    self.observe(minute, f"line one: {action.by}", exact=moment)
                elif action.api_call is not None:
                    call, ids = action.api_call
                    ec2 = self.world("ec2", None)
                    (ec2.stop_instances if call == "stop" else ec2.terminate_instances)(InstanceIds=ids)
                    self.observe(minute, f"line one: {action.by}, EC2 API", exact=moment)

    def scale_in(self, instance_id: str) -> None:
        self.world("autoscaling", None).terminate_instance_in_auto_scaling_group(
            InstanceId=instance_id, ShouldDecrementDesiredCapacity=True
        )

    def observe(self, minute: int, cause: str, *, exact: float | None = None) -> None:
        """Record transitions and deliver EC2's state-change events, as EventBridge would."""
        for instance_id, record in self.records.items():
            state = self.ec2.get_instance(instance_id).state
            if state == self.states.get(instance_id):
                continue
            self.states[instance_id] = state
            if state != "running" and record.stopped is None:
                record.stopped = exact if exact is not None else float(minute)
                record.cause = cause
                record.replaced_by_group = cause != "workload" and instance_id in self.group_members()
            if self.guardrails.deadlines:
                deadline.handle(
                    state_change(instance_id, state, self.at(minute)),
                    settings=self.settings,
                    clients=self.clients,
                    now=self.at(minute),
                )

    # The guardrails --------------------------------------------------------------------------------

    def fire_deadlines(self, minute: int) -> None:
        """EventBridge Scheduler: invoke each due one-time schedule ``delay`` late, then delete it."""
        group = self.moto.backend("scheduler").schedule_groups[names.deadline_schedule_group(STACK)]
        for name, schedule in list(group.schedules.items()):
            due = datetime.fromisoformat(schedule.schedule_expression[3:-1]).replace(tzinfo=UTC)
            if due + timedelta(seconds=self.delay) <= self.at(minute):
                del group.schedules[name]
                payload = json.loads(schedule.target["Input"])
                reaper.handle(payload, settings=self.settings, clients=self.clients, now=self.at(minute))
                self.observe(minute, "line two: deadline")

    def sweep(self, minute: int) -> None:
        result = reaper.handle({}, settings=self.settings, clients=self.clients, now=self.at(minute))
        self.observe(minute, "line three: sweep")
        named = findings(result)
        for record in self.records.values():
            if record.reported is None and record.instance_id in named:
                record.reported = float(minute)

    def baseline_sweep(self, minute: int) -> None:
        """What teams write first: stop every running GPU host (of the chosen pools) older than 90 minutes."""
        ec2 = self.clients("ec2", REGION)
        pools = self.guardrails.baseline_pools
        due = [
            h.instance_id
            for h in list_hosts(ec2, REGION)
            if self.at(minute) - h.launch_time >= BASELINE_CAP and (pools is None or h.pool in pools)
        ]
        if due:
            ec2.stop_instances(InstanceIds=due)
        self.observe(minute, "baseline sweep")

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
            self.custodian.run(custodian_policy(self.guardrails.baseline_pools))
        finally:
            for record in running:
                self.ec2.get_instance(record.instance_id).launch_time = self.at(record.started).replace(
                    tzinfo=None
                )
        self.observe(minute, "Cloud Custodian")

    def run(self) -> DayResult:
        started = time.perf_counter()
        g = self.guardrails
        for minute in range(DAY_MINUTES):
            starting = [p for p in DAY if max(p.start, 0) == minute]
            if starting:
                self.launch(minute, starting)
                self.observe(minute, "launch")
            for record in self.records.values():
                if record.plan.leaves_at == minute and self.states.get(record.instance_id) == "running":
                    self.scale_in(record.instance_id)
                    self.observe(minute, "workload")
            if g.line_one:
                self.self_stops(minute)
            if g.deadlines:
                self.fire_deadlines(minute)
            if g.sweep_every and minute % g.sweep_every == 0:
                self.sweep(minute)
            if g.baseline_every and minute % g.baseline_every == 0:
                self.baseline_sweep(minute)
            if g.custodian_every and minute % g.custodian_every == 0:
                self.custodian_run(minute)
        return DayResult(
            g,
            self.delay if g.uses_delay else None,
            list(self.records.values()),
            sum(self.moto.proxy.calls.values()),
            time.perf_counter() - started,
        )


# What a sweep's result says about every host it looked at: not a finding for a person.
ROUTINE_KEYS = {"checked", "stopped", "would_stop", "skipped", "errors", "dry_run", "hosts", "rearmed"}


def findings(result: dict[str, Any]) -> str:
    """The parts of a sweep's result that report something about a host to a person, as JSON text."""
    rows = [row for row in result.get("hosts", []) if row.get("reports")]
    extra = {key: value for key, value in result.items() if key not in ROUTINE_KEYS}
    return json.dumps([rows, extra], default=str)


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


# Report ---------------------------------------------------------------------------------------------


def clock_time(minute: float) -> str:
    moment = DAY_START + timedelta(minutes=minute)
    return f"{moment:%H:%M:%S}" if minute >= 0 else f"{moment:%H:%M:%S} (yesterday)"


def delay_label(result: DayResult) -> str:
    return "n/a" if result.delay is None else f"{result.delay:g}s"


def print_tables(results: list[DayResult], delay: float) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=250)
    table = Table(title=f"A fleet day (virtual time, moto), Scheduler delivery delay {delay:g} s")
    for column in (
        "configuration",
        "delay",
        "GPU-h billed",
        "GPU-h needed",
        "waste GPU-h",
        "waste %",
        "unserved GPU-h",
        "worst overrun",
        "ASG would replace",
        "API calls",
    ):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    for r in results:
        overrun, host = r.worst_overrun
        table.add_row(
            r.configuration.name,
            delay_label(r),
            f"{r.billed:.2f}",
            f"{r.needed:.2f}",
            f"{r.waste:.2f}",
            f"{100 * r.waste / r.needed:.1f}",
            f"{r.unserved:.2f}",
            f"{overrun:.0f}s ({host})" if overrun else "0s",
            str(sum(x.replaced_by_group for x in r.records)),
            str(r.guardrail_calls),
        )
    console.print(table)

    causes = Table(title=f"Waste by cause, GPU-h (delay {delay:g} s)")
    causes.add_column("cause (scenario)")
    for r in results:
        causes.add_column(short(r.configuration.name), justify="right")
    scenarios = dict.fromkeys(p.scenario for p in DAY)
    for scenario in scenarios:
        causes.add_row(scenario, *(f"{r.waste_by_scenario().get(scenario, 0.0):.2f}" for r in results))
    console.print(causes)

    rows = Table(title=f"Who stopped each host, and when (delay {delay:g} s)")
    rows.add_column("host")
    rows.add_column("scenario")
    rows.add_column("work ends", justify="right")
    for r in results:
        rows.add_column(short(r.configuration.name))
    for plan in DAY:
        work_end = plan.start + plan.work
        rows.add_row(
            plan.name,
            plan.scenario,
            clock_time(work_end) if work_end < DAY_MINUTES else "-",
            *(caught(next(x for x in r.records if x.plan is plan)) for r in results),
        )
    console.print(rows)


def short(name: str) -> str:
    return (
        name.split(":", maxsplit=1)[0]
        if name.startswith(("case-study", "uniform"))
        else name.replace("parkbrake: ", "pb: ")
    )


def caught(record: HostRecord) -> str:
    reported = f"; reported by the sweep {clock_time(record.reported)}" if record.reported is not None else ""
    if record.stopped is None:
        return f"runs on{reported}"
    return f"{record.cause} {clock_time(record.stopped)}{reported}"


def print_goal(results: Iterable[DayResult]) -> None:
    for r in results:
        if not r.configuration.line_one:
            continue
        overrun, host = r.worst_overrun
        assert r.delay is not None
        share = 100 * r.waste / r.needed
        where = f" on {host}" if overrun else ""
        print(
            f"goal, {r.configuration.name} at {r.delay:g} s delay: waste {share:.2f} % of the GPU-hours needed "
            f"(goal <= 1 %: {'met' if share <= 1 else 'NOT met'}); unserved {r.unserved:.2f} GPU-h "
            f"(goal 0: {'met' if r.unserved == 0 else 'NOT met'}); worst overrun {overrun:.0f} s{where} "
            f"(goal <= delay + 60 s = {r.delay + 60:g} s: {'met' if overrun <= r.delay + 60 else 'NOT met'})"
        )


def run_days(moto: Moto, custodian: Custodian, delays: list[float]) -> dict[float, list[DayResult]]:
    fixed = {
        g: Day(moto, g, custodian if g.custodian_every else None, 0).run()
        for g in CONFIGURATIONS
        if not g.uses_delay
    }
    by_delay: dict[float, list[DayResult]] = {}
    for delay in delays:
        by_delay[delay] = [
            Day(moto, g, None, delay).run() if g.uses_delay else fixed[g] for g in CONFIGURATIONS
        ]
    return by_delay


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--delays", type=float, nargs="*", default=[0.0, 60.0], help="Scheduler delivery delays, seconds"
    )
    args = parser.parse_args(argv)

    import logging

    logging.disable(logging.WARNING)  # moto's and the Lambdas' logs would drown the figures
    # The Lambdas' embedded-metric lines go to stdout, where the figures are printed.
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
    total = time.perf_counter()
    moto = Moto()
    custodian = Custodian(moto.proxy.url)
    try:
        by_delay = run_days(moto, custodian, args.delays)
        for delay, results in by_delay.items():
            print_tables(results, delay)
        print_goal(r for results in by_delay.values() for r in results)
        print(
            "worst overrun: past the cap the guardrails should enforce (the tag clamped to the ceiling, else the "
            "default); an unmanaged host has none: they may not stop it (reap_untagged off), only report it"
        )
        print(
            "line one is the code of parkbrake run and agent in virtual time; modelled there: the job process, "
            "whether the OS shutdown takes the host down, and the EC2 API calls' arrival (benchmarks/line_one.py)"
        )
    finally:
        custodian.close()
        moto.close()
    print(f"benchmark wall time {time.perf_counter() - total:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
