"""click's usage errors as the CLI's one line: ``Error: <what> — <the fix>``, exit 2.

click prints a usage error in three parts (the usage line, "Try '… --help' for help.", then the error);
parkbrake prints every mistake the same way, as one line that names what was wrong and how to put it
right: an unknown flag with its closest match, a bad value with the forms the option takes, a missing
argument with the command's usage line. ``cli/main.py``'s group turns every usage error raised while
parsing any command, nested groups' included, into :class:`OneLineUsageError` through :func:`one_line`.

A message that already carries its fix (``… — use 90m, 2h…``: the types of ``cli/options.py``, a
command's own ``click.UsageError``) is kept as it is, with only its first letter lowered.
"""

from __future__ import annotations

import difflib
import re

import click

SEPARATOR = " — "  # between what was wrong and the fix, in every usage error


class OneLineUsageError(click.ClickException):
    """A usage error already in the CLI's shape; click prints ClickException as ``Error: <message>``."""

    exit_code = 2


def shows_help_instead(error: click.UsageError) -> bool:
    """A group run with no command (click 8.2+: NoArgsIsHelpError) prints its help, as it should."""
    no_args_is_help = getattr(click.exceptions, "NoArgsIsHelpError", None)
    return no_args_is_help is not None and isinstance(error, no_args_is_help)


def one_line(error: click.UsageError) -> str:
    """``<what> — <the fix>`` for a click usage error, on one line."""
    context = error.ctx or _innermost_context(error)
    command_path = context.command_path if context is not None else "parkbrake"
    help_hint = f"{command_path} --help"
    message = _flatten(error.message)
    if isinstance(error, click.NoSuchOption):
        return _no_such_option(error, help_hint)
    if (
        context is not None
        and isinstance(context.command, click.Group)
        and message.startswith("No such command")
    ):
        return _no_such_command(error, context, help_hint)
    if isinstance(error, click.MissingParameter):
        return _missing(error, context, help_hint)
    if isinstance(error, click.BadParameter):
        return _bad_value(error, context, help_hint)
    if isinstance(error, click.BadOptionUsage):
        return _bad_option_usage(error, context, help_hint)
    if message.startswith("Got unexpected extra argument") and context is not None:
        return f"{_lowered(message)}{SEPARATOR}it takes: {_usage(context)}"
    return _with_fix(message.removesuffix("."), f"{help_hint} says what it takes")


def _innermost_context(error: click.UsageError) -> click.Context | None:
    """The context of the command being parsed, for the errors click's parser raises without one.

    The parser raises BadOptionUsage (``--by`` with no value after it) without a context, so the error
    would not know which command it was for; the innermost frame of the traceback that holds one does.
    """
    found = None
    trace = error.__traceback__
    while trace is not None:
        candidate = trace.tb_frame.f_locals.get("ctx")
        if isinstance(candidate, click.Context):
            found = candidate
        trace = trace.tb_next
    return found


def _usage(context: click.Context) -> str:
    return " ".join([context.command_path, *context.command.collect_usage_pieces(context)])


def _no_such_option(error: click.NoSuchOption, help_hint: str) -> str:
    what = f"no such option {error.option_name}"
    closest = error.possibilities[0] if error.possibilities else None
    if closest is None and error.ctx is not None:
        closest = _closest(error.option_name, _option_names(error.ctx.command))
    if closest is None:
        return f"{what}{SEPARATOR}{help_hint} lists the options"
    return f"{what}{SEPARATOR}did you mean {closest}? ({help_hint} lists them)"


def _no_such_command(error: click.UsageError, context: click.Context, help_hint: str) -> str:
    name = getattr(error, "command_name", None)  # click 8.4+ (NoSuchCommand); before it, the message
    if name is None:
        found = re.match(r"No such command '(.*)'", error.message)
        name = found.group(1) if found else ""
    group = context.command
    assert isinstance(group, click.Group)
    what = f"no such command {name!r}"
    closest = _closest(name, group.list_commands(context))
    if closest is None:
        return f"{what}{SEPARATOR}{help_hint} lists the commands"
    return f"{what}{SEPARATOR}did you mean {closest}? ({help_hint} lists them)"


def _missing(error: click.MissingParameter, context: click.Context | None, help_hint: str) -> str:
    param = error.param
    if isinstance(param, click.Argument) and context is not None:
        return f"missing argument {_param_name(param)}{SEPARATOR}give it: {_usage(context)}"
    if isinstance(param, click.Option):
        name = _param_name(param)
        value = "" if param.is_flag else f" {_metavar(param, context)}"
        forms = _forms(param)
        fix = f"pass {name}{value}" + (f" ({forms})" if forms else f"; {help_hint} says what it takes")
        return f"missing option {name}{SEPARATOR}{fix}"
    return _with_fix(_lowered(_flatten(error.format_message())), f"{help_hint} says what it takes")


def _bad_value(error: click.BadParameter, context: click.Context | None, help_hint: str) -> str:
    param = error.param
    name = _param_name(param) if param is not None else (error.param_hint or "a value")
    problem = _lowered(_flatten(error.message))
    if param is not None and isinstance(param.type, click.Choice) and " is not " in problem:
        problem = problem.partition(" is not ")[0]  # click's "'x' is not one of 'a', 'b'": the fix lists them
    what = f"invalid value for {name}: {problem}"
    if SEPARATOR in what:
        return what
    forms = _forms(param) if param is not None else None
    return f"{what}{SEPARATOR}" + (f"use {forms}" if forms else f"{help_hint} says what {name} takes")


def _bad_option_usage(error: click.BadOptionUsage, context: click.Context | None, help_hint: str) -> str:
    name = error.option_name
    message = _flatten(error.message)
    param = _option_by_name(context, name) if context is not None else None
    if "requires" in message and param is not None:  # "Option '--by' requires an argument."
        forms = _forms(param)
        fix = f"use {forms}" if forms else f"give {name} {_metavar(param, context)}"
        return f"option {name} needs a value{SEPARATOR}{fix}"
    if "does not take a value" in message:
        return f"option {name} takes no value{SEPARATOR}write {name} alone"
    return _with_fix(_lowered(message), f"{help_hint} says what it takes")


def _forms(param: click.Parameter) -> str | None:
    """The values an option takes, said so a person can type one; None when its help must say it."""
    kind = param.type
    own = getattr(kind, "forms", None)  # the types of cli/options.py say their own
    if isinstance(own, str):
        return own
    if isinstance(kind, click.Choice):
        return "one of " + ", ".join(str(choice) for choice in kind.choices)
    if isinstance(kind, click.types._NumberRangeBase):
        number = "a whole number" if isinstance(kind, click.IntRange) else "a number"
        return f"{number} {_range(kind)}".rstrip()
    if isinstance(kind, click.types.IntParamType):
        return "a whole number"
    if isinstance(kind, click.types.FloatParamType):
        return "a number"
    if isinstance(kind, click.types.BoolParamType):
        return "true or false"
    if isinstance(kind, click.Path):
        wanted = "file" if not kind.dir_okay else "folder" if not kind.file_okay else "path"
        return f"a {wanted} that exists" if kind.exists else None
    return None


def _range(kind: click.types._NumberRangeBase) -> str:
    low = None if kind.min is None else f"{'above' if kind.min_open else 'from'} {kind.min}"
    high = None if kind.max is None else f"{'below' if kind.max_open else 'up to'} {kind.max}"
    return " ".join(part for part in (low, high) if part)


def _option_by_name(context: click.Context, name: str) -> click.Option | None:
    for param in context.command.params:
        if isinstance(param, click.Option) and name in (*param.opts, *param.secondary_opts):
            return param
    return None


def _option_names(command: click.Command) -> list[str]:
    return [
        name
        for param in command.params
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
    ]


def _closest(name: str, candidates: list[str]) -> str | None:
    matches = difflib.get_close_matches(name, candidates, n=1)
    return matches[0] if matches else None


def _param_name(param: click.Parameter) -> str:
    """An option by its long flag, an argument by its metavar (``INSTANCE_ID``), as --help shows them."""
    if isinstance(param, click.Option):
        long_flags = [name for name in param.opts if name.startswith("--")]
        return (long_flags or param.opts)[0]
    return (param.metavar or param.name or "ARGUMENT").upper()


def _metavar(param: click.Parameter, context: click.Context | None) -> str:
    if param.metavar:
        return param.metavar
    try:
        return param.type.get_metavar(param, context) or param.type.name.upper()  # type: ignore[arg-type]
    except TypeError:  # click before 8.2 takes no context
        return param.type.get_metavar(param) or param.type.name.upper()  # type: ignore[call-arg]


def _with_fix(what: str, fix: str) -> str:
    return what if SEPARATOR in what else f"{what}{SEPARATOR}{fix}"


def _lowered(message: str) -> str:
    """click's sentence as the middle of ours: first letter lowered (not an option's), no final stop."""
    message = message.strip().removesuffix(".")
    return message[:1].lower() + message[1:] if message[:1].isupper() and message[1:2].islower() else message


def _flatten(message: str) -> str:
    """One line, whatever the message held: a value with a newline must not break the shape."""
    return " ".join(message.split())
