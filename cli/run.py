"""``parkbrake run``: a job with a cap, and the host shut down when it ends."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.options import (
    DURATION,
    OPTIONAL_DURATION,
    SIGNAL,
    TENANT,
    api_stop_after_option,
    output_option,
    release_from_group_option,
    shutdown_command_option,
    spot_options,
)
from guardrails import settings_table
from guardrails.errors import InputError, ParkbrakeError
from guardrails.idle import QUIET_PERCENT
from guardrails.job_policy import OnExit

if TYPE_CHECKING:
    from collections.abc import Callable

    from cli.host.job_wrapper import RunReport
    from cli.host.supervision import HangWatch
    from guardrails.clock import Clock


@click.command(context_settings={"allow_interspersed_args": False})
@click.option(
    "--max-runtime",
    type=DURATION,
    help="Cap on the job's runtime (90m, 2h, 1h30m): SIGTERM at the cap. Default: no cap.",
)
@click.option(
    "--on-exit",
    type=click.Choice([choice.value for choice in OnExit]),
    default=OnExit.STOP.value,
    show_default=True,
    help="What the host should do after the job; stop and terminate run the shutdown command "
    "(the launch template's shutdown behaviour decides which happens), none keeps the host.",
)
@click.option(
    "--grace",
    type=DURATION,
    default="60s",
    show_default=True,
    help="Time between SIGTERM and SIGKILL for a job asked to stop.",
)
@click.option(
    "--tenant",
    envvar=settings_table.TENANT,
    type=TENANT,
    help="Who pays; with a ledger configured (PARKBRAKE_DATABASE_URL) the job is refused when the "
    "tenant's budget cannot cover it. Also $PARKBRAKE_TENANT.",
)
@click.option(
    "--instance-type",
    envvar=settings_table.INSTANCE_TYPE,
    help="This host's instance type, to price the job for the budget check. Also $PARKBRAKE_INSTANCE_TYPE.",
)
@click.option(
    "--hang-after",
    type=OPTIONAL_DURATION,
    default="off",
    show_default=True,
    help="End the job (SIGTERM, then SIGKILL after --grace) once every GPU has been at or under "
    "--threshold for this long, whatever holds them: a hung job keeps its CUDA context at 0%. "
    "Reads the GPUs through NVML.",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0, 100),
    default=QUIET_PERCENT,
    show_default=True,
    help="A GPU at or under this utilisation (percent) is quiet, for --hang-after.",
)
@click.option(
    "--interval", type=DURATION, default="10s", show_default=True, help="Time between two GPU samples."
)
@click.option(
    "--replay",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="For tests and demos: judge --hang-after on a recorded sample sequence (the format "
    "`parkbrake agent --record` writes) instead of NVML; the cap, grace and hang window then run in "
    "the recording's own time.",
)
@click.option(
    "--interrupt-signal",
    type=SIGNAL,
    default="SIGTERM",
    show_default=True,
    help="The signal the job gets on a spot interruption notice (its process group, like every signal "
    "the wrapper sends); the job's cap and grace are unchanged.",
)
@spot_options
@shutdown_command_option
@release_from_group_option
@api_stop_after_option
@output_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    *,
    max_runtime: timedelta | None,
    on_exit: str,
    grace: timedelta,
    tenant: str | None,
    instance_type: str | None,
    hang_after: timedelta | None,
    threshold: float,
    interval: timedelta,
    replay: Path | None,
    interrupt_signal: signal.Signals,
    spot_watch: bool,
    on_interrupt: str | None,
    on_rebalance: str,
    spot_poll: timedelta,
    shutdown_command: str,
    release_from_group: bool,
    api_stop_after: timedelta | None,
    output: str,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND, stop it at its cap, exit with its status, then shut the host down.

    \b
    Write the command after --, for example:
      parkbrake run --max-runtime 2h -- python train.py

    SIGINT, SIGTERM and SIGHUP are passed on to the job. On a spot interruption notice the job gets
    --interrupt-signal and the --on-interrupt hook runs, bounded by the notice. A watchdog process outlives a wrapper that
    is killed (even with SIGKILL) and still ends the job at its cap and shuts the host down. If the
    host is still up --api-stop-after the shutdown, it stops itself through the EC2 API. The summary
    goes to stderr, so the job keeps stdout to itself. With --tenant and a ledger configured, a job the tenant's budget cannot
    cover up to its cap is refused before it starts (exit 1; the host's own deadline still applies).

    \b
    Example:
      parkbrake run --max-runtime 90m -- python train.py
    """
    from cli.host.api_stop import ApiFallback
    from cli.host.job_wrapper import run_and_shut_down
    from cli.host.supervision import ShutdownCommand
    from guardrails.job_policy import CapPolicy

    policy = CapPolicy(max_runtime=max_runtime, grace=grace)
    if tenant is not None:
        refuse_over_budget(tenant, instance_type, policy.max_runtime)
    # --on-exit none never reaches the shutdown, so the group is left alone too.
    parsed_shutdown = ShutdownCommand.parse(shutdown_command, release_from_group=release_from_group)

    log = _logger(output)
    if replay is not None and hang_after is None:
        raise InputError("--replay plays GPU samples for --hang-after; give --hang-after too")
    fallback = ApiFallback(after=api_stop_after, terminate=on_exit == OnExit.TERMINATE)
    from cli.host.spot import SpotSettings, SpotWatcher, check_hook_flags

    check_hook_flags(spot_watch, on_interrupt)
    spot = None
    if spot_watch:
        from guardrails.spot import OnRebalance

        settings = SpotSettings(interrupt_signal, on_interrupt, OnRebalance(on_rebalance), spot_poll)
        spot = SpotWatcher(settings, _spot_printer(output, log))
    with hang_watch(hang_after, threshold, interval, replay) as (hang, clock):
        report = run_and_shut_down(
            command,
            policy,
            on_exit=OnExit(on_exit),
            shutdown_command=parsed_shutdown,
            log=log,
            hang=hang,
            fallback=fallback,
            clock=clock,
            watchdog=True,
            spot=spot,
        )
    _summarise(report, output, log)
    click.get_current_context().exit(report.exit_status)


def _logger(output: str) -> Callable[[str], None]:
    """The wrapper's own lines, on stderr (the job keeps stdout), in text output only."""

    def log(message: str) -> None:
        if output == "text":
            click.echo(f"parkbrake run: {message}", err=True)

    return log


def _spot_printer(output: str, log: Callable[[str], None]) -> Callable[[str, str, dict[str, object]], None]:
    """A spot notice as a JSON event on stderr, or as a line of the wrapper's log."""
    from cli.host.spot import event_json

    def spot_event(kind: str, message: str, detail: dict[str, object]) -> None:
        if output == "json":
            click.echo(json.dumps(event_json(kind, message, detail, datetime.now(UTC))), err=True)
        else:
            log(message)

    return spot_event


def _summarise(report: RunReport, output: str, log: Callable[[str], None]) -> None:
    """How the job ended, on stderr: the report as JSON, or one line."""
    if output == "json":
        click.echo(json.dumps(report.as_json()), err=True)
    else:
        log(
            f"{report.job.describe()} after {report.job.runtime.total_seconds():.1f}s; "
            f"exit status {report.exit_status}"
        )


@contextmanager
def hang_watch(
    after: timedelta | None, threshold: float, interval: timedelta, replay: Path | None
) -> Iterator[tuple[HangWatch | None, Clock | None]]:
    """The GPUs --hang-after reads (NVML, or a replay in virtual time), and the clock that goes with them."""
    from cli.host.nvml_agent import NvmlSampler, TimedReplay, load_recording, observation_from
    from cli.host.supervision import HangWatch
    from guardrails.clock import ManualClock

    if after is None:
        yield None, None
        return
    if replay is not None:
        start = datetime.now(UTC)
        clock = ManualClock(start)
        recorded = TimedReplay(load_recording(replay), clock, start)
        yield HangWatch(lambda: observation_from(recorded), after, threshold, interval), clock
        return
    nvml = NvmlSampler()
    try:
        yield HangWatch(lambda: observation_from(nvml), after, threshold, interval), None
    finally:
        nvml.close()


def refuse_over_budget(tenant: str, instance_type: str | None, cap: timedelta | None) -> None:
    """Deny new work the way the nightly launcher does: through the ledger's admission.

    The job runs on this host. Once the ledger has the host running, its cost up to its cap is
    already committed in the tenant's runway, so the admission (told the host's id by the instance
    metadata service) counts it only while the ledger has not yet metered it: never twice.
    """
    from lambdas.aws.environment import ledger_configured

    if not ledger_configured():
        return
    if instance_type is None:
        raise InputError(
            f"--instance-type (or PARKBRAKE_INSTANCE_TYPE) is needed to check tenant {tenant}'s budget"
        )
    from guardrails.launch import AdmissionRequest
    from guardrails.pricing import priced_region
    from guardrails.settings import setting_from_environment
    from guardrails.settings_table import SETTINGS_BY_NAME
    from lambdas.aws.environment import utc_now
    from lambdas.engines.budgeting import LedgerBudgetGate
    from lambdas.ledger.store import store_from_environment

    # The stack's default cap as the Lambdas read it: the table's row, from this host's environment.
    default_cap = setting_from_environment(SETTINGS_BY_NAME["default_max_runtime"], os.environ)
    store = store_from_environment()
    try:
        admission = LedgerBudgetGate(store, default_cap=default_cap).admit(
            AdmissionRequest(
                tenant,
                instance_type,
                1,
                cap or default_cap,
                this_instance_id(),
                region=priced_region(os.environ),
            ),
            utc_now(),
        )
    finally:
        store.close()
    if not admission.granted:
        raise ParkbrakeError(f"not starting the job: {admission.reason}")


def this_instance_id() -> str | None:
    """This host's instance id from the instance metadata service; None when not on EC2."""
    from cli.host.group_release import InstanceMetadata, MetadataError, MetadataUnreachable

    try:
        return InstanceMetadata.from_environment().identity().instance_id
    except (MetadataUnreachable, MetadataError):
        return None
