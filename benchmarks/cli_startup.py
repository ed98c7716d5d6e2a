"""CLI start-up: ``parkbrake --help`` against ``python -c "import click"``, the floor any click CLI pays.

    python -m benchmarks.cli_startup              # 21 rounds
    python -m benchmarks.cli_startup --rounds 51

Each round runs both commands once, alternating which goes first, as fresh processes; the figure is
the median wall time of each and their ratio (target: at most 2×). It also counts the modules each
process has imported when it is done, and lists any command module ``--help`` loaded (there should
be none: the registry holds each command's help line).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from cli.registry import COMMANDS

TARGET_RATIO = 2.0
CLICK_ONLY = [sys.executable, "-c", "import click"]
# The same work as the console script, then the modules it left loaded, on stderr.
COUNT_HELP = (
    "import sys\n"
    "from cli.main import main\n"
    "sys.argv = ['parkbrake', '--help']\n"
    "try:\n"
    "    main()\n"
    "except SystemExit:\n"
    "    pass\n"
    "print(len(sys.modules), ' '.join(sorted(sys.modules)), file=sys.stderr)\n"
)
COUNT_CLICK = "import sys, click\nprint(len(sys.modules), ' '.join(sorted(sys.modules)), file=sys.stderr)\n"


def parkbrake_help_command() -> list[str]:
    """The installed console script, as a user runs it."""
    script = Path(sys.executable).with_name("parkbrake")
    found = str(script) if script.exists() else shutil.which("parkbrake")
    if found is None:
        raise SystemExit("the parkbrake console script is not installed; run `make .venv/.installed`")
    return [found, "--help"]


def wall_seconds(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def alternating_medians(first: list[str], second: list[str], rounds: int) -> tuple[float, float]:
    """Median wall time of each command over ``rounds`` rounds, the order swapped every round."""
    times: dict[int, list[float]] = {0: [], 1: []}
    commands = {0: first, 1: second}
    wall_seconds(first)  # warm the file cache for both before timing anything
    wall_seconds(second)
    for round_number in range(rounds):
        order = (0, 1) if round_number % 2 == 0 else (1, 0)
        for which in order:
            times[which].append(wall_seconds(commands[which]))
    return statistics.median(times[0]), statistics.median(times[1])


def loaded_modules(program: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", program],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _count, _space, names = result.stderr.strip().partition(" ")
    return names.split()


def command_modules_loaded(modules: list[str]) -> list[str]:
    """Registered commands' modules (and the engines below ``cli``) among ``modules``."""
    command_modules = {entry.target.split(":")[0] for entry in COMMANDS.values()}
    engines = ("cli.oncall", "cli.host", "cli.preview")
    return sorted(name for name in modules if name in command_modules or name.startswith(engines))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    arguments, _others = parser.parse_known_args(argv)  # `python -m benchmarks` passes every flag on
    help_seconds, click_seconds = alternating_medians(parkbrake_help_command(), CLICK_ONLY, arguments.rounds)
    help_modules, click_modules = loaded_modules(COUNT_HELP), loaded_modules(COUNT_CLICK)
    ratio = help_seconds / click_seconds
    verdict = "within" if ratio <= TARGET_RATIO else "ABOVE"
    print(f"parkbrake --help        median {help_seconds * 1000:7.1f} ms   {len(help_modules):4d} modules")
    print(f'python -c "import click" median {click_seconds * 1000:6.1f} ms   {len(click_modules):4d} modules')
    print(
        f"ratio {ratio:.2f}× ({verdict} the {TARGET_RATIO:g}× target), {arguments.rounds} alternating rounds"
    )
    loaded = command_modules_loaded(help_modules)
    print(f"command modules imported by --help: {', '.join(loaded) if loaded else 'none'}")
    extra = sorted(set(help_modules) - set(click_modules))
    print(f"modules beyond click's ({len(extra)}): {' '.join(extra)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
