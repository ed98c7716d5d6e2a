"""The error every layer raises for a problem the user can fix; the CLI prints it without a traceback."""

from __future__ import annotations


class ParkbrakeError(Exception):
    """A problem with input or environment, with a message that says what to do.

    ``exit_code`` follows the CLI's contract: 2 for bad input (config, flags), 1 otherwise.
    """

    exit_code = 1


class InputError(ParkbrakeError):
    """Bad input: a config value, flag or file the user has to correct."""

    exit_code = 2
