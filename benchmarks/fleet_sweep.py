"""One sweep over a large fleet: Cloud Custodian and parkbrake's sweep, API calls and wall time.

Part of ``python -m benchmarks.fleet_day``; both tools call moto's server through the counting proxy.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from benchmarks.harness import AMI, CUSTODIAN_POLICY, GPU_HOST_TAGS, REGION, STACK, Custodian, Moto
from guardrails.settings import Settings
from lambdas.engines import sweeping

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
    for batch in range(math.ceil(size / HOSTS_PER_RESERVATION)):
        gpu = batch % 4 == 0
        reservation = ec2.run_instances(
            AMI,
            min(HOSTS_PER_RESERVATION, size - batch * HOSTS_PER_RESERVATION),
            None,
            [],
            instance_type="g5.xlarge" if gpu else "m5.large",
            is_instance_type_default=False,
            tags={"instance": GPU_HOST_TAGS if gpu else {"Name": "web"}},
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
    plan = sweeping.plan_sweep(settings, now=now, clients=clients, page_size=PAGE_OF_RESERVATIONS)
    report = sweeping.execute_sweep(plan, settings, now=now, clients=clients, dry_run=False)
    parkbrake_figures = SweepFigures(
        "parkbrake", size, dict(moto.proxy.calls), time.perf_counter() - started, len(report.outcome.acted)
    )
    return [custodian_figures, parkbrake_figures]


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
