"""Removing 10,000 hosts from their Auto Scaling groups: the stop path's removals, one call at a time
and side by side, against moto's server over HTTP.

    python -m benchmarks.group_removal                                  # 10,000 hosts, 1 and 16 workers
    python -m benchmarks.group_removal --hosts 2000 --workers 1 4 16 32 --latency-ms 0 100
    python -m benchmarks.group_removal --sweep                          # + the reaper's whole sweep

``TerminateInstanceInAutoScalingGroup`` takes one host, so a sweep that finds 10,000 grouped hosts
due makes 10,000 calls. ``--sweep`` also times the reaper's whole sweep (listing, judging, the
removals, the notice) over the same 10,000 hosts, all past their cap, as the Lambda runs it. The hosts are seeded in groups of 500 on moto's backends; the removals reach
moto only over HTTP, through the counting proxy, as the reaper's do. moto answers from this process;
AWS answers from across a network, which ``--latency-ms`` models by holding every removal's answer
that long at the proxy (a modelled figure, named as such in the table). moto's backends are not
thread-safe, so the proxy hands moto one call at a time; the modelled latency is spent outside that
lock, as a network's would be.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from benchmarks.harness import AMI, GPU_HOST_TAGS, REGION, STACK, Moto
from guardrails.hosts import Host
from guardrails.settings import Settings
from lambdas.aws.stop_path import GROUP_REMOVAL_WORKERS, StopOutcome, remove_from_groups
from lambdas.engines import sweeping

GROUP_SIZE = 500
# moto counts MaxResults in reservations (a group's launch is one): two groups a page are AWS's 1,000.
GROUPS_A_PAGE = 2


@dataclass
class RemovalFigures:
    hosts: int
    workers: int
    latency_ms: int
    seconds: float
    calls: int
    removed: int
    errors: int
    left_in_groups: int
    load: tuple[float, float, float]


@dataclass
class SweepFigures:
    hosts: int
    listing_s: float
    executing_s: float
    removed: int
    errors: int
    calls: dict[str, int]
    load: tuple[float, float, float]


def seed_groups(moto: Moto, size: int) -> list[Host]:
    """``size`` GPU hosts in groups of 500, made over HTTP by CreateAutoScalingGroup (moto launches them),
    tagged as managed hosts of the stack and started 100 minutes ago (past their 90m cap)."""
    moto.reset()
    clients = moto.clients(counted=False)
    ec2, autoscaling = clients("ec2", REGION), clients("autoscaling", REGION)
    ec2.create_launch_template(
        LaunchTemplateName="bench-gpu", LaunchTemplateData={"ImageId": AMI, "InstanceType": "g5.xlarge"}
    )
    hosts: list[Host] = []
    now = datetime.now(UTC)
    for index in range(0, size, GROUP_SIZE):
        name = f"parkbrake-bench-pool-{index // GROUP_SIZE:03d}"
        members = min(GROUP_SIZE, size - index)
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchTemplate={"LaunchTemplateName": "bench-gpu", "Version": "$Latest"},
            MinSize=0,
            MaxSize=members,
            DesiredCapacity=members,
            AvailabilityZones=[f"{REGION}a"],
            Tags=[
                {"Key": key, "Value": value, "PropagateAtLaunch": True, "ResourceId": name}
                for key, value in GPU_HOST_TAGS.items()
            ],
        )
        group = moto.backend("autoscaling").autoscaling_groups[name]
        for state in group.instance_states:
            state.instance.launch_time = (now - timedelta(minutes=100)).replace(tzinfo=None)
        hosts += [
            Host(
                state.instance.id, "g5.xlarge", "running", now, GPU_HOST_TAGS, REGION, autoscaling_group=name
            )
            for state in group.instance_states
        ]
    return hosts


def hold_answers(latency_ms: int) -> Callable[[bytes], bytes]:
    def hold(answer: bytes) -> bytes:
        time.sleep(latency_ms / 1000)
        return answer

    return hold


def remove_all(moto: Moto, size: int, workers: int, latency_ms: int) -> RemovalFigures:
    hosts = seed_groups(moto, size)
    autoscaling = moto.clients(counted=True)("autoscaling", REGION)
    moto.proxy.clear()
    if latency_ms:
        moto.proxy.rewrite("TerminateInstanceInAutoScalingGroup", hold_answers(latency_ms))
    outcome = StopOutcome()
    started = time.perf_counter()
    remove_from_groups(hosts, autoscaling, outcome, reason="benchmark", workers=workers)
    seconds = time.perf_counter() - started
    groups = moto.backend("autoscaling").autoscaling_groups.values()
    return RemovalFigures(
        size,
        workers,
        latency_ms,
        seconds,
        moto.proxy.calls["TerminateInstanceInAutoScalingGroup"],
        len(outcome.removed_from_group),
        len(outcome.errors),
        sum(len(group.instance_states) for group in groups),
        os.getloadavg(),
    )


def sweep_all(moto: Moto, size: int) -> SweepFigures:
    """The reaper's sweep over ``size`` grouped hosts, all due: listing and judging, then acting."""
    seed_groups(moto, size)
    clients = moto.clients(counted=True)
    settings = Settings(stack=STACK, regions=(REGION,))
    moto.proxy.clear()
    now = datetime.now(UTC)
    started = time.perf_counter()
    plan = sweeping.plan_sweep(settings, now=now, clients=clients, page_size=GROUPS_A_PAGE)
    listed = time.perf_counter()
    report = sweeping.execute_sweep(plan, settings, now=now, clients=clients, dry_run=False)
    return SweepFigures(
        size,
        listed - started,
        time.perf_counter() - listed,
        len(report.outcome.removed_from_group),
        len(report.errors),
        dict(moto.proxy.calls),
        os.getloadavg(),
    )


def print_sweep(figures: SweepFigures) -> None:
    calls = ", ".join(f"{action} {count:,}" for action, count in sorted(figures.calls.items()))
    print(
        f"The reaper's sweep over {figures.hosts:,} hosts in groups, all due: listing and judging "
        f"{figures.listing_s:.1f} s, acting {figures.executing_s:.1f} s (removed {figures.removed:,}, "
        f"errors {figures.errors}); calls: {calls}; load {' '.join(f'{x:.2f}' for x in figures.load)}"
    )


def print_removals(figures: list[RemovalFigures]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Removing hosts from their Auto Scaling groups (moto over HTTP)")
    columns = (
        "hosts",
        "workers",
        "latency (modelled)",
        "calls",
        "removed",
        "errors",
        "left in groups",
        "wall s",
        "ms per host",
        "load 1/5/15",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for f in figures:
        table.add_row(
            f"{f.hosts:,}",
            str(f.workers),
            f"{f.latency_ms} ms",
            f"{f.calls:,}",
            f"{f.removed:,}",
            str(f.errors),
            str(f.left_in_groups),
            f"{f.seconds:.1f}",
            f"{1000 * f.seconds / f.hosts:.2f}",
            " ".join(f"{load:.2f}" for load in f.load),
        )
    Console(width=200).print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, GROUP_REMOVAL_WORKERS])
    parser.add_argument("--latency-ms", type=int, nargs="+", default=[0])
    parser.add_argument("--sweep", action="store_true", help="also time the reaper's whole sweep")
    arguments = parser.parse_args(argv)
    moto = Moto(serial_upstream=True)
    try:
        figures = [
            remove_all(moto, arguments.hosts, workers, latency_ms)
            for latency_ms in arguments.latency_ms
            for workers in arguments.workers
        ]
        print_removals(figures)
        if arguments.sweep:
            print_sweep(sweep_all(moto, arguments.hosts))
    finally:
        moto.close()


if __name__ == "__main__":
    main()
