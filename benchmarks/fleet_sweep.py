"""One sweep over a large fleet, parkbrake's against Cloud Custodian's: API calls and wall time.

    python -m benchmarks.fleet_sweep                 # the four fleet shapes, 5 rounds each
    python -m benchmarks.fleet_sweep --rounds 3 --shapes mixed-1000 stopped-1000

Both tools call moto's server through the counting proxy; moto's backends seed the fleet. Cloud
Custodian runs from its own virtual environment (:class:`benchmarks.harness.Custodian`), never the
project's, so neither tool's boto3 is the other's. Each round seeds the fleet afresh and runs both
tools over it, restoring the hosts the first one stopped before the second runs; the order alternates
from round to round, and each tool runs once on the first round's fleet untimed, so that neither pays
for warming up (imports, sessions, moto's caches) in a timed run. parkbrake's clients are made before
its timed region, as a warm Lambda's are. Every run is printed with the load average at its end, and
each shape's medians with their spread (min–max) and the load beside them.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.harness import AMI, CUSTODIAN_POLICY, GPU_HOST_TAGS, REGION, STACK, Custodian, Moto
from guardrails import names, tags
from guardrails.settings import Settings
from lambdas.aws.environment import ClientFactory
from lambdas.engines import sweeping

# moto counts MaxResults in reservations where AWS counts instances: seeded 50 hosts a reservation,
# 20 reservations a page are AWS's 1,000 hosts a page, for both tools.
HOSTS_PER_RESERVATION = 50
PAGE_OF_RESERVATIONS = 20
PARKBRAKE, CUSTODIAN = "parkbrake", "Cloud Custodian"
# Another stack that exists in the region: a stopped host of it makes the sweep read the stack list.
OTHER_STACK = "other"


@dataclass(frozen=True)
class FleetShape:
    """``hosts`` running hosts in reservations: every ``gpu_every``-th reservation GPU, every
    ``due_every``-th past its 90m cap (the rest 30 minutes old, CPU hosts too), and ``stopped``
    managed GPU hosts stopped just now (within the retention), the first of another live stack."""

    name: str
    hosts: int
    gpu_every: int
    due_every: int
    stopped: int = 0


SHAPES = (
    FleetShape("mixed-1000", 1000, gpu_every=4, due_every=8),
    FleetShape("mixed-5000", 5000, gpu_every=4, due_every=8),
    FleetShape("gpu-due-2000", 2000, gpu_every=1, due_every=1),
    FleetShape("stopped-1000", 1000, gpu_every=4, due_every=8, stopped=5),
)


def seed_fleet(ec2: Any, shape: FleetShape, *, per_reservation: int = HOSTS_PER_RESERVATION) -> list[str]:
    """Seed ``shape`` in moto's EC2 backend ``ec2``; returns the ids of the hosts past their cap."""
    now = datetime.now(UTC).replace(tzinfo=None)
    overdue: list[str] = []
    for batch in range(math.ceil(shape.hosts / per_reservation)):
        gpu = batch % shape.gpu_every == 0
        due = gpu and batch % shape.due_every == 0
        reservation = ec2.run_instances(
            AMI,
            min(per_reservation, shape.hosts - batch * per_reservation),
            None,
            [],
            instance_type="g5.xlarge" if gpu else "m5.large",
            is_instance_type_default=False,
            tags={"instance": GPU_HOST_TAGS if gpu else {"Name": "web"}},
        )
        for instance in reservation.instances:
            instance.launch_time = now - timedelta(minutes=100 if due else 30)
            if due:
                overdue.append(instance.id)
    if shape.stopped:
        reservation = ec2.run_instances(
            AMI,
            shape.stopped,
            None,
            [],
            instance_type="g5.xlarge",
            is_instance_type_default=False,
            tags={"instance": GPU_HOST_TAGS},
        )
        stopped = [instance.id for instance in reservation.instances]
        ec2.create_tags([stopped[0]], {tags.STACK: OTHER_STACK})
        ec2.stop_instances(stopped)
    return overdue


def custodian_calls(shape: FleetShape, *, per_reservation: int, page: int) -> int:
    """Cloud Custodian's calls over ``shape``, derived: its query lists every running host, of any type
    (pages of ``page`` reservations on moto), and its ``stop`` sends every due host in one
    ``StopInstances`` (c7n/resources/ec2.py, ``Stop._run_instances_op``); it never reads SSM. (Every
    shape's first reservation is GPU and due.)"""
    reservations = math.ceil(shape.hosts / per_reservation)
    due = any(batch % shape.gpu_every == 0 and batch % shape.due_every == 0 for batch in range(reservations))
    return max(1, math.ceil(reservations / page)) + (1 if due else 0)  # an empty listing is a call too


def live_stacks_parameters(ssm: Any) -> None:
    """The stacks that exist in the region: this one and the other stack's stopped host's."""
    for stack in (STACK, OTHER_STACK):
        ssm.put_parameter(Name=names.park_parameter(stack), Value="false", Type="String", Overwrite=True)


@dataclass
class Run:
    shape: str
    round: int
    tool: str
    calls: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    stopped: int = 0
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


def parkbrake_sweep(clients: ClientFactory) -> Callable[[], tuple[int, float]]:
    settings = Settings(stack=STACK, regions=(REGION,))
    for service in ("ec2", "ssm", "autoscaling"):  # sessions and clients made outside the timed region
        clients(service, REGION)

    def run() -> tuple[int, float]:
        started = time.perf_counter()
        now = datetime.now(UTC)
        plan = sweeping.plan_sweep(settings, now=now, clients=clients, page_size=PAGE_OF_RESERVATIONS)
        report = sweeping.execute_sweep(plan, settings, now=now, clients=clients, dry_run=False)
        seconds = time.perf_counter() - started
        if report.errors:  # a figure from a sweep that failed part-way would flatter it
            raise RuntimeError(f"parkbrake's sweep failed: {report.errors[:3]}")
        return len(report.outcome.acted), seconds

    return run


def custodian_sweep(custodian: Custodian) -> Callable[[], tuple[int, float]]:
    paged = [
        {"Filters": [{"Name": "instance-state-name", "Values": ["running"]}]},
        {"MaxResults": PAGE_OF_RESERVATIONS},
    ]

    def run() -> tuple[int, float]:
        stopped, seconds = custodian.run({**CUSTODIAN_POLICY, "query": paged})
        return len(stopped), seconds

    return run


def restore(ec2: Any, overdue: Sequence[str]) -> None:
    """The hosts the first tool stopped, running and past their cap again, for the second."""
    ec2.start_instances(list(overdue))
    launched = datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=100)
    for instance_id in overdue:
        ec2.get_instance(instance_id).launch_time = launched


def compare(moto: Moto, custodian: Custodian, shape: FleetShape, rounds: int) -> list[Run]:
    tools = {PARKBRAKE: parkbrake_sweep(moto.clients(counted=True)), CUSTODIAN: custodian_sweep(custodian)}
    runs: list[Run] = []
    for number in range(rounds):
        moto.reset()
        live_stacks_parameters(moto.clients(counted=False)("ssm", REGION))
        ec2 = moto.backend("ec2")
        overdue = seed_fleet(ec2, shape)
        order = [PARKBRAKE, CUSTODIAN] if number % 2 == 0 else [CUSTODIAN, PARKBRAKE]
        if number == 0:  # untimed warm-up of both tools on this fleet
            for tool in order:
                tools[tool]()
                restore(ec2, overdue)
        for position, tool in enumerate(order):
            if position:
                restore(ec2, overdue)
            moto.proxy.clear()
            stopped, seconds = tools[tool]()
            runs.append(
                Run(shape.name, number, tool, dict(moto.proxy.calls), seconds, stopped, os.getloadavg())
            )
            print(
                f"  {shape.name} round {number} {tool}: {sum(runs[-1].calls.values())} calls "
                f"{dict(sorted(runs[-1].calls.items()))}, {seconds:.2f} s, stopped {stopped}, "
                f"load {' '.join(f'{value:.2f}' for value in runs[-1].load)}",
                flush=True,
            )
    return runs


def print_summary(runs: list[Run], shapes: Sequence[FleetShape]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="One sweep per round: medians over the rounds (min–max), load 1m beside each")
    columns = (
        "shape",
        "tool",
        "rounds",
        "calls",
        "Describe",
        "Stop",
        "SSM",
        "derived c7n",
        "stopped",
        "wall s",
    )
    for column in (*columns, "parkbrake/c7n", "load 1m"):
        table.add_column(column, justify="left" if column in ("shape", "tool") else "right")
    for shape in shapes:
        by_tool = {
            tool: [run for run in runs if run.shape == shape.name and run.tool == tool]
            for tool in (PARKBRAKE, CUSTODIAN)
        }
        medians = {tool: statistics.median(run.seconds for run in of) for tool, of in by_tool.items() if of}
        for tool, of in by_tool.items():
            if not of:
                continue
            seconds = [run.seconds for run in of]
            loads = [run.load[0] for run in of]
            calls = sorted({run.total_calls for run in of})
            ratio = (
                medians[PARKBRAKE] / medians[CUSTODIAN] if tool == PARKBRAKE and len(medians) == 2 else None
            )
            table.add_row(
                shape.name,
                tool,
                str(len(of)),
                "/".join(map(str, calls)),
                str(of[0].calls.get("DescribeInstances", 0)),
                str(of[0].calls.get("StopInstances", 0)),
                str(of[0].calls.get("GetParametersByPath", 0) + of[0].calls.get("GetParameter", 0)),
                str(custodian_calls(shape, per_reservation=HOSTS_PER_RESERVATION, page=PAGE_OF_RESERVATIONS)),
                str(of[0].stopped),
                f"{statistics.median(seconds):.2f} ({min(seconds):.2f}–{max(seconds):.2f})",
                f"{ratio:.2f}" if ratio is not None else "",
                f"{statistics.median(loads):.2f} ({min(loads):.2f}–{max(loads):.2f})",
            )
    Console(width=200).print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per fleet shape (default 5)")
    parser.add_argument(
        "--shapes",
        nargs="*",
        default=[shape.name for shape in SHAPES],
        choices=[shape.name for shape in SHAPES],
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    import logging

    logging.disable(logging.WARNING)  # moto's and the sweep's logs would drown the figures
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
    shapes = [shape for shape in SHAPES if shape.name in args.shapes]
    total = time.perf_counter()
    moto = Moto()
    custodian = Custodian(moto.proxy.url)
    try:
        runs = [run for shape in shapes for run in compare(moto, custodian, shape, args.rounds)]
        print_summary(runs, shapes)
    finally:
        custodian.close()
        moto.close()
    print(f"benchmark wall time {time.perf_counter() - total:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
