"""Run every benchmark in turn, each in its own process, and stop at the first that fails."""

from __future__ import annotations

import subprocess
import sys

# Explicit, in the order a reader wants the figures.
BENCHMARKS = (
    "benchmarks.cli_startup",
    "benchmarks.fleet_day",
    "benchmarks.fleet_sweep",
    "benchmarks.org_sweep",
    "benchmarks.group_removal",
    "benchmarks.ledger",
    "benchmarks.ledger_settle",
    "benchmarks.ledger_reports",
    "benchmarks.decision_log",
    "benchmarks.inference",
    "benchmarks.status",
    "benchmarks.org_status",
    "benchmarks.k8s_controller",
)


def main(argv: list[str]) -> int:
    for module in BENCHMARKS:
        print(f"\n=== {module} ===", flush=True)
        status = subprocess.run([sys.executable, "-m", module, *argv], check=False).returncode
        if status != 0:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
