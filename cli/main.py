"""Entry point of the ``parkbrake`` CLI: a click group that loads commands from the registry lazily."""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Any
from urllib.parse import urlsplit

import click

from cli.registry import COMMANDS, LazyCommand
from cli.usage_errors import OneLineUsageError, one_line, shows_help_instead
from guardrails.errors import ParkbrakeError

INTERRUPTED_EXIT = 130  # the shell's code for a process ended by Ctrl-C (SIGINT)


class LazyGroup(click.Group):
    """A group whose commands are imported on first use; its own ``--help`` imports none of them."""

    def __init__(self, *args: Any, lazy_commands: dict[str, LazyCommand], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy_commands:
            return super().get_command(ctx, cmd_name)
        target = self.lazy_commands[cmd_name].target
        module_name, attribute = target.split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from the registry's help lines: listing must not import the commands."""
        rows = []
        for name in self.list_commands(ctx):
            lazy = self.lazy_commands.get(name)
            if lazy is not None:
                rows.append((name, lazy.short_help))
                continue
            command = super().get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as error:  # `parkbrake --bogus`: the group's own flags
            if shows_help_instead(error):
                raise
            raise OneLineUsageError(one_line(error)) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            # Every command's and nested group's flags are parsed in here: one shape for all of them.
            if shows_help_instead(error):
                raise
            raise OneLineUsageError(one_line(error)) from None
        except ParkbrakeError as error:
            _fail(str(error), error.exit_code)
        except KeyboardInterrupt:
            _interrupted()
        except click.Abort as error:
            # click turns Ctrl-C at a prompt into Abort; a "no" to a confirmation is Abort too.
            if isinstance(error.__context__, KeyboardInterrupt):
                _interrupted()
            raise
        except Exception as error:
            message = describe_environment_error(error)
            if message is None:
                raise
            _fail(message, 1)


def _fail(message: str, exit_code: int) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(exit_code)


def _interrupted() -> None:
    click.echo("\nInterrupted.", err=True)
    sys.exit(INTERRUPTED_EXIT)


def describe_environment_error(error: Exception) -> str | None:
    """A one-line explanation for errors from AWS or the database that the user, not the code, must fix.

    The libraries are looked up in ``sys.modules`` rather than imported: if a command never loaded
    botocore, no botocore error can have happened.
    """
    botocore_exceptions = sys.modules.get("botocore.exceptions")
    if botocore_exceptions is not None:
        message = _describe_aws_error(error, botocore_exceptions)
        if message is not None:
            return message
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(error, psycopg.OperationalError):
        return f"cannot use the ledger database: {str(error).strip()}; check PARKBRAKE_DATABASE_URL"
    return None


def _describe_aws_error(error: Exception, exceptions: Any) -> str | None:
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or "AWS"
    if isinstance(error, exceptions.NoCredentialsError | exceptions.PartialCredentialsError):
        return "no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
    if isinstance(error, exceptions.NoRegionError):
        return "no AWS region configured; set AWS_REGION"
    if isinstance(error, exceptions.ConnectionError):
        return _region_hint() or _unreachable(error)
    parsers = sys.modules.get("botocore.parsers")
    if parsers is not None and isinstance(error, parsers.ResponseParserError):
        return _region_hint() or (
            f"{endpoint} answered with something that is not an AWS response; check AWS_ENDPOINT_URL and the region"
        )
    if isinstance(error, exceptions.ClientError):
        from lambdas.aws.errors import describe_error

        text = describe_error(error)
        hint = _region_hint() if "not an AWS response" in text else None
        return hint or f"AWS refused {error.operation_name}: {text}"
    if isinstance(error, exceptions.BotoCoreError):
        return f"AWS call failed: {error}"
    return None


def _unreachable(error: Exception) -> str:
    """The endpoint that was actually tried (scheme and host, not the call's path), why, and the fix."""
    details = getattr(error, "kwargs", {})  # botocore's exceptions keep their fields here
    if details.get("proxy_url"):
        return f"cannot reach the proxy {details['proxy_url']} — check HTTPS_PROXY (or unset it)"
    tried = urlsplit(str(details.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL") or ""))
    endpoint = f"{tried.scheme}://{tried.netloc}" if tried.netloc else "AWS"
    # "[Errno 111] Connection refused", "[Errno -2] Name or service not known": the socket's reason
    reason = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(details.get("error", "")))
    why = (
        f" ({reason.group(1).strip().lower()})"
        if reason
        else " (no answer)"
        if "timeout" in str(error)
        else ""
    )
    if os.environ.get("AWS_ENDPOINT_URL"):
        fix = "check AWS_ENDPOINT_URL (unset it to use AWS itself) and that the server there is up"
    else:
        fix = "check AWS_REGION, the network and any proxy (HTTPS_PROXY)"
    return f"cannot reach the AWS endpoint {endpoint}{why} — {fix}"


def _region_hint() -> str | None:
    """When the answer makes no sense, a mistyped AWS_REGION is the usual cause: say so if it is one."""
    from cli.oncall.regions import known_regions

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region and region not in known_regions():
        return f"unknown AWS region {region!r} (from AWS_REGION); set it to one AWS has, e.g. us-east-1"
    return None


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="parkbrake")
def parkbrake() -> None:
    """parkbrake: GPU infrastructure with cost guardrails.

    Declare GPU pools and services with one park switch, stop every GPU host at its deadline,
    and keep an exact ledger of every accelerator-second.
    """


def main() -> None:
    parkbrake(prog_name="parkbrake")
