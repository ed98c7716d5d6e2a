"""Options shared by several commands, defined once."""

from __future__ import annotations

import select
import signal
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from cli.host.shutdown_command import DEFAULT_SHUTDOWN_COMMAND, SHUTDOWN_COMMAND_VARIABLE
from guardrails import settings_table
from guardrails.durations import DURATION_HINT, DurationError, parse_duration
from guardrails.spot import OnRebalance


class Duration(click.ParamType):
    """A duration flag (``90m``, ``2h``, ``1h30m``, ``5400s``) as a timedelta; a bad one is a usage error naming the flag."""

    name = "duration"
    forms = DURATION_HINT.removeprefix(
        "use "
    )  # what a usage error tells people to write (cli/usage_errors.py)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except DurationError as error:
            # The CLI's shape: what was wrong, then " — " and the forms (the parser's hint moved there).
            problem = str(error).removesuffix(f"; {DURATION_HINT}").removesuffix(f" ({DURATION_HINT})")
            self.fail(f"{problem} — use {self.forms}", param, ctx)


DURATION = Duration()


class OptionalDuration(Duration):
    """A duration, or ``off`` (None): for a guard that may be turned off."""

    name = "duration|off"
    forms = f"{Duration.forms}, or off"

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
    forms = WHEN_HINT

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_when(str(value), datetime.now(UTC))
        except ValueError:
            self.fail(f"{str(value)!r} is not a time — use {self.forms}", param, ctx)


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
    forms = "a name such as SIGTERM, SIGINT or SIGUSR1, or its number"

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
            self.fail(f"{value!r} is not a signal — use {self.forms}", param, ctx)


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


class TenantName(click.ParamType):
    """A tenant's name by the one rule of guardrails/tenants.py; any other is a usage error (exit 2)."""

    name = "tenant"
    forms = "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from guardrails.tenants import TENANT_HINT, tenant_problem

        problem = tenant_problem(value)
        if problem is not None:
            self.fail(problem.replace(f"; {TENANT_HINT}", f" — {TENANT_HINT}"), param, ctx)
        return str(value)


TENANT = TenantName()


class AccountId(click.ParamType):
    """An AWS account id, 12 digits (as the events carry it); any other is a usage error (exit 2)."""

    name = "account"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip()
        if not (len(text) == 12 and text.isascii() and text.isdigit()):
            self.fail(
                f"{value!r} is not an AWS account id; give its 12 digits, e.g. 123456789012", param, ctx
            )
        return text


ACCOUNT_ID = AccountId()


def confirm_or_abort(question: str, *, assume_yes: bool) -> None:
    """Ask before a destructive change; with no terminal to ask, refuse rather than guess."""
    if assume_yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(
            f"{question} Refusing without --yes when there is no terminal to ask — pass --yes"
        )
    if not ask_yes_no(question):
        raise click.Abort()


# How often a prompt's wait returns to Python, where a pending Ctrl-C is raised.
PROMPT_POLL_S = 0.1


def ask_yes_no(question: str, *, default: bool = False) -> bool:
    """A y/N question at the terminal that one Ctrl-C always interrupts (KeyboardInterrupt).

    Not click.confirm: it reads through input(), which writes the prompt and then blocks in read().
    A SIGINT that lands between the two (the person presses Ctrl-C as the prompt appears; a busy
    machine widens the gap) is taken by Python's signal handler before read() starts, so read() is
    never interrupted and the process waits at the prompt, Ctrl-C lost. Here the wait is a select()
    that returns every PROMPT_POLL_S, and Python runs the pending handler in between.
    """
    suffix = "[Y/n]" if default else "[y/N]"
    while True:
        click.echo(f"{question} {suffix}: ", nl=False)
        answer = _interruptible_line().strip().lower()
        if answer in ("y", "yes"):
            return True
        if answer in ("n", "no"):
            return False
        if answer == "":
            return default
        click.echo("Error: invalid input")


def _interruptible_line() -> str:
    """One line of standard input; EOF is click.Abort, as at click's own prompts."""
    stream = sys.stdin
    try:
        descriptor = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (CliRunner's input): nothing to wait on
        descriptor = None
    if descriptor is not None:
        while not select.select([descriptor], [], [], PROMPT_POLL_S)[0]:
            pass  # back in Python between waits: a Ctrl-C raises KeyboardInterrupt here
    line = stream.readline()
    if not line:
        click.echo()
        raise click.Abort()
    return line


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


def organisation_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--accounts FILE``/``--org``, c7n-org's selection flags and ``--concurrency``, handed to the
    command as one ``scope`` (cli/oncall/organisation.py); with neither, the command is as before."""
    import functools

    from cli.oncall.organisation import DEFAULT_ORG_ROLE, OrganisationScope

    @functools.wraps(command)  # inspect.unwrap finds the command's own function (tests/cli/table_printers.py)
    def scoped(**kwargs: Any) -> Any:
        from click.core import ParameterSource

        role = kwargs.pop("org_role")
        context = click.get_current_context(silent=True)
        given = (
            context.get_parameter_source("org_role") != ParameterSource.DEFAULT
            if context is not None
            else role != DEFAULT_ORG_ROLE
        )
        scope = OrganisationScope(
            accounts_file=kwargs.pop("accounts_file"),
            org=kwargs.pop("org"),
            org_role=role if given else None,  # one given without --org is refused (checked)
            names=kwargs.pop("account_names"),
            tags=kwargs.pop("account_tags"),
            excluded=kwargs.pop("not_accounts"),
            concurrency=kwargs.pop("concurrency"),
        )
        return command(scope=scope.checked(), **kwargs)

    for option in reversed(_organisation_option_list(DEFAULT_ORG_ROLE)):
        scoped = option(scoped)
    return scoped


# lambdas.aws.assumed's DEFAULT_CONCURRENCY, written out: importing it loads botocore into every
# command's --help (tests/cli/test_conventions.py holds the two equal).
CONCURRENCY_SHOWN = 16


def _organisation_option_list(default_role: str) -> list[Callable[..., Any]]:
    return [
        click.option(
            "--accounts",
            "accounts_file",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Every account of this c7n-org account list (accounts: account_id, name, regions, "
            "role, ...), each through its role.",
        ),
        click.option(
            "--org",
            is_flag=True,
            help="Every active account of the AWS Organization (ListAccounts as the management "
            "account or a delegated administrator), each through --org-role.",
        ),
        click.option(
            "--org-role",
            default=default_role,
            show_default=True,
            help="With --org: the role assumed in each member account (a name, or an ARN with {account_id}).",
        ),
        click.option(
            "--account",
            "-a",
            "account_names",
            multiple=True,
            help="Only this account (name or id; repeat or comma-separate), as c7n-org's -a.",
        ),
        click.option(
            "--tag",
            "-t",
            "account_tags",
            multiple=True,
            help="Only accounts of the list with every such tag (type:prod), as c7n-org's -t.",
        ),
        click.option(
            "--not-account",
            "not_accounts",
            multiple=True,
            help="Leave out this account (name or id), as c7n-org's --not-accounts.",
        ),
        click.option(
            "--concurrency",
            type=int,
            help="Accounts and regions read at once (one shared rate limit for all).  "
            f"[default: {CONCURRENCY_SHOWN}]",
        ),
    ]
