"""The error every layer raises for a problem the user can fix; the CLI prints it without a traceback."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from guardrails.plurals import counted


class ParkbrakeError(Exception):
    """A problem with input or environment, with a message that says what to do.

    ``exit_code`` follows the CLI's contract: 2 for bad input (config, flags), 1 otherwise.
    """

    exit_code = 1


class InputError(ParkbrakeError):
    """Bad input: a config value, flag or file the user has to correct."""

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a file, at its path there (``pools.training.max``, ``accounts[3].role``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ProblemsError(InputError):
    """A file with one or more problems, every one told at once with its path (a stack config, an
    account list)."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  {problem}" for problem in self.problems)
        super().__init__(f"{source} has {counted(len(self.problems), 'problem')}:\n{lines}")
