"""``parkbrake agent``: export every GPU's metrics and shut the host down once all have been idle long enough."""

from __future__ import annotations

import json
import threading
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.host.supervision import ShutdownCommand
from cli.options import (
    DURATION,
    OPTIONAL_DURATION,
    api_stop_after_option,
    output_option,
    release_from_group_option,
    shutdown_command_option,
    spot_options,
)
from guardrails.durations import format_duration
from guardrails.idle import QUIET_PERCENT
from guardrails.settings_table import AGENT_IDLE_AFTER

if TYPE_CHECKING:
    from collections.abc import Callable

    from cli.host.nvml_agent import GpuSampler
    from guardrails.clock import Clock


@click.command()
@click.option(
    "--idle-after",
    type=DURATION,
    # The settings table's row: a pool that sets its own passes it here (components.gpu_pool).
    envvar=AGENT_IDLE_AFTER.variable,
    default=format_duration(AGENT_IDLE_AFTER.default),
    show_default=True,
    help=f"Shut down once every GPU has been idle this long (90s, 15m, 1h). Also ${AGENT_IDLE_AFTER.variable}.",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0, 100),
    default=QUIET_PERCENT,
    show_default=True,
    help="A GPU at or under this utilisation (percent) with no compute process is idle.",
)
@click.option(
    "--hang-after",
    type=OPTIONAL_DURATION,
    default="10m",
    show_default=True,
    help="A GPU whose compute process has kept it at or under --threshold this long is hung and "
    "counts as idle (a stuck job, a forgotten notebook). off: a compute process always keeps the GPU busy.",
)
@click.option(
    "--idle-after-empty",
    type=OPTIONAL_DURATION,
    default="2m",
    show_default=True,
    help="Shut down sooner, after this long, when every GPU is idle with no compute process at all (no "
    "CUDA context: nothing to lose). off: only --idle-after.",
)
@click.option(
    "--report-unknown-after",
    type=DURATION,
    default="10m",
    show_default=True,
    help="Report a GPU reading that has been unknown (failed, stale or implausible) this long; unknown is "
    "never counted as idle.",
)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=9400, show_default=True, help="Port of /metrics."
)
@click.option("--address", default="0.0.0.0", show_default=True, help="Address /metrics listens on.")
@click.option("--interval", type=DURATION, default="10s", show_default=True, help="Time between two samples.")
@shutdown_command_option
@release_from_group_option
@api_stop_after_option
@click.option(
    "--replay",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="For tests and demos: play a recorded sample sequence (JSON Lines) instead of reading NVML, "
    "in the recording's own time.",
)
@click.option(
    "--record",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Append every sample to this file, in the format --replay reads.",
)
@spot_options
@output_option
def agent(
    *,
    idle_after: timedelta,
    threshold: float,
    hang_after: timedelta | None,
    idle_after_empty: timedelta | None,
    report_unknown_after: timedelta,
    port: int,
    address: str,
    interval: timedelta,
    shutdown_command: str,
    release_from_group: bool,
    api_stop_after: timedelta | None,
    replay: Path | None,
    record: Path | None,
    spot_watch: bool,
    on_interrupt: str | None,
    on_rebalance: str,
    spot_poll: timedelta,
    output: str,
) -> None:
    """Export GPU metrics on /metrics and shut the host down when every GPU is idle.

    A GPU is idle at or under --threshold percent utilisation (and memory copies) with steady memory
    and no compute process, or with one that has kept it there for --hang-after; the host shuts down
    once every GPU has been idle for the whole --idle-after window (--idle-after-empty when no GPU
    holds any process), and stops itself through the EC2 API if it is still up --api-stop-after
    later. A failed, stale or implausible reading is unknown, never idle. On a spot interruption
    notice the --on-interrupt hook runs (the agent has no job to signal: `parkbrake run` does that).
    Needs an NVIDIA driver (NVML), except with --replay.

    \b
    Example:
      parkbrake agent --idle-after 30m --port 9400
    """
    from cli.host.api_stop import ApiFallback
    from cli.host.nvml_agent import GpuMetrics, run_agent, serve_metrics
    from guardrails.idle import IdlePolicy

    policy = IdlePolicy(
        idle_after=idle_after,
        threshold_percent=threshold,
        # Three missed samples in a row: the agent was not running, so the window starts again.
        max_gap=interval * 3,
        hang_after=hang_after,
        idle_after_empty=idle_after_empty,
        report_unknown_after=report_unknown_after,
    )
    command = ShutdownCommand.parse(shutdown_command, release_from_group=release_from_group)

    from cli.host.spot import check_hook_flags

    check_hook_flags(spot_watch, on_interrupt)
    say = _printer(output)
    with ExitStack() as resources:
        sampler, clock = _open_sampler(replay, resources)
        recording = resources.enter_context(record.open("a")) if record is not None else None
        metrics = GpuMetrics()
        bound_port = resources.enter_context(serve_metrics(metrics, address, port))
        say(
            {"event": "started", "port": bound_port, "source": "replay" if replay else "nvml"},
            f"parkbrake agent: /metrics on {address}:{bound_port}; "
            + _shutdown_rule(idle_after, threshold, idle_after_empty),
        )
        if spot_watch:
            _watch_spot(say, resources, on_interrupt=on_interrupt, on_rebalance=on_rebalance, poll=spot_poll)
        result = run_agent(
            sampler,
            clock,
            policy,
            interval=interval,
            metrics=metrics,
            shutdown_command=command,
            emit=lambda event: say(event.as_json(), f"{event.at:%H:%M:%S} {event.kind}: {event.message}"),
            fallback=ApiFallback(after=api_stop_after),
            recording=recording,
        )
    click.get_current_context().exit(result.exit_status)


def _printer(output: str) -> Callable[[dict[str, object], str], None]:
    """Print one event, as JSON or as text; one at a time, since the spot watch prints from its own thread."""
    printing = threading.Lock()

    def say(event_json: dict[str, object], text: str) -> None:
        with printing:
            click.echo(json.dumps(event_json) if output == "json" else text)

    return say


def _open_sampler(replay: Path | None, resources: ExitStack) -> tuple[GpuSampler, Clock]:
    """The recording replayed (its own clock), or NVML (closed with ``resources``) and the system clock."""
    from cli.host.nvml_agent import NvmlSampler, ReplaySampler, load_recording
    from guardrails.clock import SystemClock

    if replay is not None:
        replayed = ReplaySampler(load_recording(replay), start=datetime.now(UTC))
        return replayed, replayed
    nvml = NvmlSampler()
    resources.callback(nvml.close)
    return nvml, SystemClock()


def _shutdown_rule(idle_after: timedelta, threshold: float, idle_after_empty: timedelta | None) -> str:
    """When the host shuts down, as the agent's first line says it."""
    rule = f"shutdown after {format_duration(idle_after)} with every GPU idle (at or under {threshold:g}%)"
    if idle_after_empty is None:
        return rule
    return f"{rule}, {format_duration(idle_after_empty)} when no GPU holds a process"


def _watch_spot(
    say: Callable[[dict[str, object], str], None],
    resources: ExitStack,
    *,
    on_interrupt: str | None,
    on_rebalance: str,
    poll: timedelta,
) -> None:
    """Watch spot notices on a thread of their own, stopped with ``resources``; each one said."""
    from cli.host.spot import SpotSettings, SpotWatcher, event_json
    from guardrails.spot import OnRebalance

    def spot_event(kind: str, message: str, detail: dict[str, object]) -> None:
        at = datetime.now(UTC)
        say(event_json(kind, message, detail, at), f"{at:%H:%M:%S} {kind}: {message}")

    watcher = SpotWatcher(SpotSettings(None, on_interrupt, OnRebalance(on_rebalance), poll), spot_event)
    # The first look before the GPU loop, so the log says at once whether spot notices are watched.
    watcher.start(first_poll_here=True)
    resources.callback(watcher.stop)
