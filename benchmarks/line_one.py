"""Line one of the fleet day: the code behind ``parkbrake run`` and ``parkbrake agent``, in virtual time.

For each host the benchmark runs, from the host's launch, the same functions the commands run:
``run_and_shut_down`` (cap, ``--hang-after``, grace, shutdown, EC2 API fallback), the watchdog's
``take_over`` once the wrapper is SIGKILLed, and ``run_agent`` (idle and hang windows, shutdown,
API fallback). Each runs on its own :class:`ManualClock` and reads GPU samples replayed from a
recording generated from the host's plan (busy while the job works; then quiet, with the CUDA
contexts still held for a hung job or a forgotten notebook).

Modelled, and named so wherever a figure depends on it:
- the job process (:class:`ModelledJob`): it exits when its work is done, on SIGTERM unless it is
  hung (a job stuck in a collective does not run its handler), and on SIGKILL;
- the OS shutdown: the real shutdown code runs the real command ``true``; whether the host then
  goes down is the plan's (``os_shutdown_works``);
- the EC2 API: the fallback's calls are real code up to the client; the client records them
  (:class:`DeferredEc2`) and the world makes each one against moto at the instant it was made.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cli.host.api_stop import ApiFallback, ApiStopResult
from cli.host.group_release import HostIdentity
from cli.host.job_wrapper import run_and_shut_down
from cli.host.nvml_agent import AgentEvent, GpuMetrics, Recorded, TimedReplay, observation_from, run_agent
from cli.host.supervision import HangWatch, ShutdownCommand
from cli.host.watchdog import Charge, take_over
from guardrails.clock import Clock, ManualClock
from guardrails.idle import GpuSample, IdlePolicy
from guardrails.job_policy import CapPolicy, OnExit

SAMPLE_EVERY = timedelta(seconds=10)  # the agent's and run's --interval
IDLE_AFTER = timedelta(minutes=15)  # parkbrake agent --idle-after (its default)
HANG_AFTER = timedelta(minutes=10)  # --hang-after, agent default and the training jobs' flag
IDLE_AFTER_EMPTY = timedelta(minutes=2)  # parkbrake agent --idle-after-empty (its default)
GRACE = timedelta(seconds=60)  # parkbrake run --grace (its default)
API_STOP_AFTER = timedelta(seconds=120)  # --api-stop-after (its default)
THRESHOLD = 5.0
# The OS shutdown command: the real code runs a real program that succeeds.
OS_SHUTDOWN = ShutdownCommand(("true",))


class WrapperKilled(Exception):
    """The wrapper got SIGKILL: its loop stops where it was."""


@dataclass
class ModelledJob:
    """A modelled job process (see the module docstring), moving the wrapper's clock as it waits."""

    clock: ManualClock
    ends_at: datetime | None  # when its work is done and it exits 0; None: it never does (hung)
    honours_sigterm: bool = True
    wrapper_killed_at: datetime | None = None
    pid: int = 1
    returncode: int | None = None

    def wait(self, seconds: float) -> int | None:
        if self.returncode is not None:
            return self.returncode
        until = self.clock.now() + timedelta(seconds=seconds)
        if self.wrapper_killed_at is not None and self.wrapper_killed_at <= until:
            self.clock.sleep((self.wrapper_killed_at - self.clock.now()).total_seconds())
            self.wrapper_killed_at = None
            raise WrapperKilled
        if self.ends_at is not None and self.ends_at <= until:
            self.clock.sleep((self.ends_at - self.clock.now()).total_seconds())
            self.returncode = 0
            return 0
        self.clock.sleep(seconds)
        return None

    def signal_group(self, signum: int) -> None:
        if signum == signal.SIGKILL or (signum == signal.SIGTERM and self.honours_sigterm):
            self.returncode = -signum


@dataclass
class DeferredEc2:
    """An EC2 client that records each call with its virtual instant; the world replays it on moto."""

    clock: ManualClock
    calls: list[tuple[datetime, str, list[str]]] = field(default_factory=list)

    def stop_instances(self, InstanceIds: list[str]) -> dict[str, Any]:  # boto3's names
        self.calls.append((self.clock.now(), "stop", InstanceIds))
        return {}

    def terminate_instances(self, InstanceIds: list[str]) -> dict[str, Any]:
        self.calls.append((self.clock.now(), "terminate", InstanceIds))
        return {}


@dataclass(frozen=True)
class KnownIdentity:
    """What IMDSv2 would answer on this host."""

    host: HostIdentity

    def identity(self) -> HostIdentity:
        return self.host


@dataclass(frozen=True)
class HostPlan:
    """What line one needs to know about a host (times in seconds since it launched)."""

    instance_id: str
    region: str
    gpus: int
    work: float  # seconds of useful work
    after_work: str  # "exits" (the job or user is done), "hung" (the context stays, at 0 %)
    wrapper: bool  # the job runs under parkbrake run (training)
    cap: timedelta | None  # parkbrake run --max-runtime
    wrapper_killed_after: float | None = None
    in_group: bool = False
    day_left: float = 86400.0  # seconds from launch to the end of the simulated day


@dataclass(frozen=True)
class LineOneAction:
    """A self-stop request: the OS shutdown, or an EC2 API call the world makes on moto."""

    at: datetime
    kind: str  # "os-shutdown" or "api-stop"
    by: str  # what asked: run, run --hang-after, watchdog, agent, agent (hung GPU)
    api_call: tuple[str, list[str]] | None = None


def recording(plan: HostPlan) -> list[Recorded]:
    """Samples every 10 s from launch to the end of the day, as the agent would have recorded them."""
    records = []
    for step in range(int(plan.day_left // SAMPLE_EVERY.total_seconds()) + 1):
        t = step * SAMPLE_EVERY.total_seconds()
        working = t < plan.work
        holds_context = working or plan.after_work == "hung"
        gpus = [
            GpuSample(
                index=index,
                uuid=f"GPU-{plan.instance_id}-{index}",
                utilization_percent=93.0 if working else 0.0,
                memory_used_bytes=20 * 2**30 if holds_context else 2**29,
                compute_pids=(4242 + index,) if holds_context else (),
            )
            for index in range(plan.gpus)
        ]
        records.append(Recorded(t, gpus))
    return records


@dataclass(frozen=True)
class NotedFallback(ApiFallback):
    """The real fallback, noting when it was handed the host: the instant the OS shutdown ran."""

    shutdowns: list[datetime] = field(default_factory=list)

    def after_shutdown(self, shutdown_ok: bool, clock: Clock) -> ApiStopResult | None:
        self.shutdowns.append(clock.now())
        return super().after_shutdown(shutdown_ok, clock)


def _fallback(plan: HostPlan, ec2: DeferredEc2, *, terminate: bool = False) -> NotedFallback:
    return NotedFallback(
        after=API_STOP_AFTER,
        terminate=terminate,
        metadata=KnownIdentity(HostIdentity(plan.instance_id, plan.region, None)),
        ec2_for=lambda _region: ec2,
    )


def _actions(fallback: NotedFallback, ec2: DeferredEc2, by: str) -> list[LineOneAction]:
    return [LineOneAction(at, "os-shutdown", by) for at in fallback.shutdowns] + [
        LineOneAction(at, "api-stop", by, (action, ids)) for at, action, ids in ec2.calls
    ]


def run_wrapper(plan: HostPlan, launched: datetime) -> list[LineOneAction]:
    """``parkbrake run --max-runtime CAP --hang-after 10m -- JOB`` from launch; its watchdog if it is killed."""
    clock = ManualClock(launched)
    ec2 = DeferredEc2(clock)
    job = ModelledJob(
        clock,
        ends_at=None if plan.after_work == "hung" else launched + timedelta(seconds=plan.work),
        honours_sigterm=plan.after_work != "hung",
        wrapper_killed_at=None
        if plan.wrapper_killed_after is None
        else launched + timedelta(seconds=plan.wrapper_killed_after),
    )
    samples = TimedReplay(recording(plan), clock, launched)
    hang = HangWatch(lambda: observation_from(samples), HANG_AFTER, THRESHOLD, SAMPLE_EVERY)
    policy = CapPolicy(max_runtime=plan.cap, grace=GRACE)
    fallback = _fallback(plan, ec2)
    try:
        report = run_and_shut_down(
            ("python", "train.py"),
            policy,
            on_exit=OnExit.STOP,
            shutdown_command=OS_SHUTDOWN,
            hang=hang,
            fallback=fallback,
            clock=clock,
            start=lambda _argv: job,
        )
    except WrapperKilled:
        take_over(Charge(policy, OnExit.STOP, OS_SHUTDOWN, fallback), job, launched, clock, log=_ignore)
        return _actions(fallback, ec2, "watchdog")
    return _actions(fallback, ec2, "run --hang-after" if report.job.hung else "run")


def _ignore(_message: str) -> None:
    """The watchdog's log, which goes to the wrapper's stderr on a host."""


def run_host_agent(plan: HostPlan, launched: datetime) -> list[LineOneAction]:
    """``parkbrake agent`` (its defaults) from launch to its shutdown or the end of the day."""
    clock = ManualClock(launched)
    ec2 = DeferredEc2(clock)
    events: list[AgentEvent] = []
    fallback = _fallback(plan, ec2, terminate=plan.in_group)
    run_agent(
        TimedReplay(recording(plan), clock, launched),
        clock,
        IdlePolicy(
            IDLE_AFTER,
            THRESHOLD,
            max_gap=SAMPLE_EVERY * 3,
            hang_after=HANG_AFTER,
            idle_after_empty=IDLE_AFTER_EMPTY,
        ),
        interval=SAMPLE_EVERY,
        metrics=GpuMetrics(),
        shutdown_command=OS_SHUTDOWN,
        emit=events.append,
        fallback=fallback,
    )
    return _actions(fallback, ec2, "agent (hung GPU)" if any(e.kind == "hung" for e in events) else "agent")


def line_one(plan: HostPlan, launched: datetime) -> list[LineOneAction]:
    """Every self-stop request the host makes, earliest first."""
    actions = run_host_agent(plan, launched)
    if plan.wrapper:
        actions += run_wrapper(plan, launched)
    return sorted(actions, key=lambda action: action.at)


Runner = Callable[[HostPlan, datetime], list[LineOneAction]]
