"""Options shared by several commands, defined once."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from cli.host.shutdown_command import DEFAULT_SHUTDOWN_COMMAND, SHUTDOWN_COMMAND_VARIABLE
from guardrails import settings_table
from guardrails.durations import DurationError, parse_duration
from guardrails.spot import OnRebalance


class Duration(click.ParamType):
    """A duration flag (``90m``, ``2h``, ``1h30m``, ``5400s``) as a timedelta; a bad one is a usage error naming the flag."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except DurationError as error:
            self.fail(str(error), param, ctx)


DURATION = Duration()


class OptionalDuration(Duration):
    """A duration, or ``off`` (None): for a guard that may be turned off."""

    name = "duration|off"

    def convert(  # type: ignore[override]  # None is this type's "off"
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta | None:
        if value is None or (isinstance(value, str) and value.strip().lower() == "off"):
            return None
        return super().convert(value, param, ctx)


OPTIONAL_DURATION = OptionalDuration()

WHEN_HINT = (
    "a duration back from now (90m, 12h, 7d), a date (2026-05-01: its UTC midnight) or an ISO-8601 "
    "instant (2026-05-01T12:00Z; UTC unless it has an offset)"
)


def parse_when(text: str, now: datetime) -> datetime:
    """One grammar for every ``--since`` and ``--until``: ``7d``/``12h`` ago, a date, or an instant; as UTC."""
    value = text.strip()
    try:
        return now - parse_duration(value, ceiling=None)
    except DurationError:
        pass
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is neither {WHEN_HINT}") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class When(click.ParamType):
    """A ``--since``/``--until`` flag as an aware UTC datetime; relative ones count back from now."""

    name = "when"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_when(str(value), datetime.now(UTC))
        except ValueError as error:
            self.fail(str(error), param, ctx)


WHEN = When()

output_option = click.option(
    "--output",
    "-o",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text for people, json for scripts and CI.",
)
stack_option = click.option(
    "--stack",
    "-s",
    default="dev",
    show_default=True,
    envvar=settings_table.STACK,
    help="Pulumi stack name; its config is Pulumi.<stack>.yaml.",
)
project_dir_option = click.option(
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Folder holding Pulumi.yaml and the stack files (Pulumi.<stack>.yaml).",
)
dry_run_option = click.option("--dry-run", is_flag=True, help="Report what would change and change nothing.")
# The host-side commands (run, agent) end by shutting the host down; tests point this at a recorder.
shutdown_command_option = click.option(
    "--shutdown-command",
    envvar=SHUTDOWN_COMMAND_VARIABLE,
    default=DEFAULT_SHUTDOWN_COMMAND,
    show_default=True,
    help=f"Command that shuts the host down (also ${SHUTDOWN_COMMAND_VARIABLE}).",
)
# A host in an Auto Scaling group that shuts down into terminate is replaced unless it leaves the group first.
release_from_group_option = click.option(
    "--release-from-group/--no-release-from-group",
    default=True,
    show_default=True,
    help="Before shutting down, leave this host's Auto Scaling group with its desired capacity lowered "
    "(read from IMDSv2), so the group launches no replacement; the shutdown runs even if this fails.",
)
# The host's last resort when the OS shutdown was accepted but the host is still up.
api_stop_after_option = click.option(
    "--api-stop-after",
    type=OPTIONAL_DURATION,
    envvar=settings_table.API_STOP_AFTER,
    default="120s",
    show_default=True,
    help="If the host is still running this long after the OS shutdown (at once if the shutdown "
    "failed), stop it through the EC2 API; its instance role may stop only itself. off: never. "
    "Also $PARKBRAKE_API_STOP_AFTER.",
)


class SignalName(click.ParamType):
    """A signal by name (``SIGTERM``, ``TERM``, ``usr1``) or number, as a :class:`signal.Signals`."""

    name = "signal"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> signal.Signals:
        if isinstance(value, signal.Signals):
            return value
        text = str(value).strip().upper()
        try:
            return (
                signal.Signals(int(text))
                if text.isdigit()
                else signal.Signals[text if text.startswith("SIG") else f"SIG{text}"]
            )
        except (KeyError, ValueError):
            self.fail(f"{value!r} is not a signal; use a name such as SIGTERM, SIGINT or SIGUSR1", param, ctx)


SIGNAL = SignalName()


def spot_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The spot watch's flags, shared by run and agent."""
    for option in reversed(
        [
            click.option(
                "--spot-watch/--no-spot-watch",
                default=True,
                show_default=True,
                help="Watch the instance metadata (IMDSv2) for a spot interruption notice and a rebalance "
                "recommendation; off EC2 the watch turns itself off with one line.",
            ),
            click.option(
                "--on-interrupt",
                metavar="CMD",
                help="Checkpoint hook run through /bin/sh on a spot interruption notice; killed if still running "
                "15 s before the interruption. $PARKBRAKE_SPOT_ACTION and $PARKBRAKE_SPOT_TIME say what and when.",
            ),
            click.option(
                "--on-rebalance",
                type=click.Choice([choice.value for choice in OnRebalance]),
                default=OnRebalance.HOOK.value,
                show_default=True,
                help="On a rebalance recommendation: log it; run the --on-interrupt hook (the job keeps running); "
                "or treat it as an interruption notice.",
            ),
            click.option(
                "--spot-poll",
                type=DURATION,
                default="5s",
                show_default=True,
                help="Time between two looks at the instance metadata (AWS suggests 5 s).",
            ),
        ]
    ):
        command = option(command)
    return command


yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")


def confirm_or_abort(question: str, *, assume_yes: bool) -> None:
    """Ask before a destructive change; with no terminal to ask, refuse rather than guess."""
    if assume_yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(f"{question} Refusing without --yes when there is no terminal to ask.")
    click.confirm(question, abort=True)


WIDE_KEY = "parkbrake.table.wide"  # where --wide leaves its answer, in the click context's meta


def _remember_wide(context: click.Context, _: click.Parameter, value: Any) -> None:
    context.meta[WIDE_KEY] = bool(value)


# For every command that prints a table (cli/table.py): it reads the flag from the context, so the
# flag need not be passed down through each printing function.
wide_option = click.option(
    "--wide",
    is_flag=True,
    expose_value=False,
    callback=_remember_wide,
    help="Show every column of the tables, however wide the lines get.",
)


def wide_requested() -> bool:
    """Whether the running command was given ``--wide``."""
    context = click.get_current_context(silent=True)
    return bool(context is not None and context.meta.get(WIDE_KEY))
