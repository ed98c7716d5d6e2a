"""The fleet day's hosts: what each is for, its tags, and what line one needs to know about it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.harness import REGION, STACK
from benchmarks.line_one import HostPlan
from guardrails import names, tags
from guardrails.durations import parse_duration
from guardrails.pricing import load_price_table

DAY_START = datetime(2025, 3, 3, tzinfo=UTC)
DAY_MINUTES = 24 * 60
INFERENCE_GROUP = names.autoscaling_group(STACK, "inference")
# What the guardrails enforce for a host whose tags do not say: the stack's default, and its ceiling.
DEFAULT_CAP = timedelta(minutes=90)
CEILING = timedelta(hours=24)


@dataclass(frozen=True)
class PlannedHost:
    """One host of the day and the work it is for (minutes since midnight; before 0: yesterday)."""

    name: str
    scenario: str
    instance_type: str
    pool: str
    start: int
    work: int  # minutes of useful work it was started for
    cap: str | None  # its parkbrake:max-runtime tag
    stack: str = STACK
    managed: bool = True
    wrapper: bool = False  # the job runs under parkbrake run --max-runtime CAP --hang-after 10m
    after_work: str = "exits"  # "hung": the context stays, at 0 %
    os_shutdown_works: bool = True
    wrapper_killed_after: int | None = None
    in_group: bool = False
    leaves_at: int | None = None  # the workload scales it in (inference burst)

    @property
    def enforced_cap(self) -> timedelta | None:
        """The cap the guardrails should hold the host to: its tag clamped to the ceiling, else the
        stack's default (an orphan's too); None for an unmanaged host, which they may not stop."""
        if not self.managed:
            return None
        if self.cap is None or self.stack != STACK:
            return DEFAULT_CAP
        return min(parse_duration(self.cap), CEILING)


def nightly(name: str, scenario: str, work: int, **quirks: Any) -> PlannedHost:
    """A nightly training job at 01:07 under ``parkbrake run --max-runtime 90m --hang-after 10m``."""
    return PlannedHost(name, scenario, "g5.12xlarge", "training", 67, work, "90m", wrapper=True, **quirks)


DAY = (
    *(nightly(f"train-{n}", "training job", 70) for n in (1, 2, 3)),
    nightly("train-early", "training job", 25),
    nightly("train-hung", "hung job, CUDA context at 0 %", 30, after_work="hung"),
    nightly("train-shutdown-fails", "OS shutdown fails", 60, os_shutdown_works=False),
    nightly("train-wrapper-killed", "wrapper SIGKILLed", 70, wrapper_killed_after=20),
    PlannedHost(
        "train-tag-typo", "tag typo (stack)", "g5.12xlarge", "training", 142, 60, "90m", stack="bnech"
    ),
    PlannedHost(
        "notebook-forgotten",
        "forgotten notebook",
        "g5.xlarge",
        "interactive",
        613,
        45,
        "4h",
        after_work="hung",
    ),
    PlannedHost(
        "dev-unmanaged", "managed tag removed", "g5.xlarge", "interactive", 540, 120, "4h", managed=False
    ),
    PlannedHost("train-31d", "31d cap tag", "g5.xlarge", "training", -360, 20 * 60, "31d"),
    PlannedHost("inference-base", "serving", "g5.2xlarge", "inference", 0, DAY_MINUTES, "24h", in_group=True),
    *(
        PlannedHost(
            f"inference-burst-{n}",
            "serving burst",
            "g5.2xlarge",
            "inference",
            844,
            120,
            "24h",
            in_group=True,
            leaves_at=964,
        )
        for n in (1, 2, 3)
    ),
)


def host_plan(plan: PlannedHost, instance_id: str) -> HostPlan:
    return HostPlan(
        instance_id=instance_id,
        region=REGION,
        gpus=load_price_table().instance(plan.instance_type).accelerators,
        work=plan.work * 60.0,
        after_work=plan.after_work,
        wrapper=plan.wrapper,
        cap=parse_duration(plan.cap) if plan.wrapper and plan.cap else None,
        wrapper_killed_after=None if plan.wrapper_killed_after is None else plan.wrapper_killed_after * 60.0,
        in_group=plan.in_group,
        day_left=(DAY_MINUTES - plan.start) * 60.0,
    )


def host_tags(plan: PlannedHost) -> dict[str, str]:
    found = {
        tags.MANAGED: "true",
        tags.STACK: plan.stack,
        tags.POOL: plan.pool,
        tags.TENANT: "research",
        tags.REVISION: "bench",
        "Name": plan.name,
    }
    if plan.cap is not None:
        found[tags.MAX_RUNTIME] = plan.cap
    if not plan.managed:
        del found[tags.MANAGED]
    return found
