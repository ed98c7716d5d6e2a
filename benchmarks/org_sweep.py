"""One organisation-wide dry-run sweep, the hub's central sweep against c7n-org's: API calls and wall time.

    python -m benchmarks.org_sweep                         # 50 accounts x 200 hosts, 3 rounds
    python -m benchmarks.org_sweep --accounts 10 --rounds 3

The fleet: ``--accounts`` member accounts, each with ``--hosts`` running hosts in one region (every
fourth reservation of 50 GPU, every eighth past its 90m cap: fleet_sweep's ``mixed`` shape), seeded
through moto's backends, which are keyed by account id. Both tools reach every account through a
role in it and call moto's server through the counting proxy:

- parkbrake: the hub reaper's run (:func:`lambdas.engines.org_sweeping.sweep_organisation_and_record`,
  dry run) in this process, as a warm Lambda would: the spokes parameter read by its container (on
  the untimed first run; a warm container reads it again every 15 minutes, one ``GetParameter``), a
  fresh session per run that assumes each spoke role once, the accounts swept side by side (16 at a
  time) at one shared rate;
- c7n-org: ``c7n-org run --dryrun`` (c7n-org 0.6.52, in Cloud Custodian's own environment, see
  benchmarks/harness.py, which this installs c7n-org into on first use) with fleet_sweep's equivalent policy and an accounts file giving each account
  the same role, ``--cache-period 0`` so that no round reads the one before's resources; its workers
  are its default (``C7N_ORG_PARALLEL``, four per CPU). Its wall time is the command's, start to exit:
  that is what running c7n-org costs; parkbrake's import is not timed (a warm Lambda's is paid once).

Each round runs both tools over the same fleet (a dry run changes nothing), the order alternating,
after one untimed run of each. Every run is printed with the load average at its end, then the
medians with their spread and the load beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.fleet_sweep import PAGE_OF_RESERVATIONS, FleetShape, seed_fleet
from benchmarks.harness import ACCOUNT, CUSTODIAN_POLICY, REGION, STACK, Moto, custodian_python
from guardrails import names
from guardrails.settings import Settings
from lambdas.aws.assumed import AccountSessions
from lambdas.aws.decision_log import DecisionLog
from lambdas.engines.org_sweeping import SpokeList, sweep_organisation_and_record

PARKBRAKE, C7N_ORG = "parkbrake hub", "c7n-org"
SPOKES_PARAMETER = f"/parkbrake/{STACK}/spokes"
# The c7n-org release beside harness.CUSTODIAN_REQUIREMENT (c7n 0.9.53) that the figures were measured with.
C7N_ORG_REQUIREMENT = "c7n-org==0.6.52"
FIRST_MEMBER = 200000000000  # member account ids count up from here; the hub is harness.ACCOUNT


@dataclass
class Run:
    round: int
    tool: str
    calls: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    matched: int = 0
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


def member_accounts(count: int) -> list[str]:
    return [f"{FIRST_MEMBER + number:012d}" for number in range(count)]


def seed_organisation(accounts: list[str], hosts: int) -> int:
    """Every account's fleet through its own moto backend; returns how many hosts are past their cap."""
    from moto.backends import get_backend

    backends: Any = get_backend("ec2")
    shape = FleetShape("member", hosts, gpu_every=4, due_every=8)
    return sum(len(seed_fleet(backends[account][REGION], shape)) for account in accounts)


def publish_spokes(moto: Moto, accounts: list[str]) -> None:
    """The hub's spokes parameter, as components/org_hub.py writes it for ``spokes: stacks``."""
    roles = [names.spoke_role_arn(STACK, account, REGION) for account in accounts]
    document = {"form": "stacks", "sweep": "central", "regions": [REGION], "roles": roles}
    moto.clients(counted=False)("ssm", REGION).put_parameter(
        Name=SPOKES_PARAMETER, Value=json.dumps(document), Type="String", Overwrite=True
    )


def parkbrake_sweep(moto: Moto) -> Callable[[], tuple[int, float]]:
    settings = Settings(stack=STACK, regions=(REGION,), spokes_parameter=SPOKES_PARAMETER)
    hub = moto.clients(counted=True)
    hub("ssm", REGION)  # the hub's own clients exist in a warm Lambda; the spokes' sessions do not
    spokes = SpokeList()  # the container's: read by the untimed first run, then every 15 minutes

    def run() -> tuple[int, float]:
        started = time.perf_counter()
        result = sweep_organisation_and_record(
            settings,
            now=datetime.now(UTC),
            clients=hub,
            sessions=AccountSessions(region=REGION),  # a fresh one per invocation, as the Lambda's
            decisions=DecisionLog(guardrail="reaper", origin="bench"),
            dry_run=True,
            spokes=spokes,
        )
        seconds = time.perf_counter() - started
        if result["errors"]:  # a figure from a sweep that failed part-way would flatter it
            raise RuntimeError(f"parkbrake's sweep failed: {result['errors'][:3]}")
        return len(result["would_stop"]), seconds

    return run


def c7n_org_python() -> Path:
    """Cloud Custodian's interpreter (benchmarks/harness.py), c7n-org installed into it if it is not."""
    python = custodian_python()
    found = subprocess.run([str(python), "-c", "import c7n_org.cli"], capture_output=True, check=False)
    if found.returncode != 0:
        print(f"installing {C7N_ORG_REQUIREMENT} beside Cloud Custodian", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", C7N_ORG_REQUIREMENT], check=True)
    return python


def c7n_org_sweep(proxy_url: str, accounts: list[str], workdir: Path) -> Callable[[], tuple[int, float]]:
    """``c7n-org run --dryrun`` over ``accounts``, each through its spoke role (the same ARN parkbrake
    assumes; c7n-org's ``role`` key, cloud-custodian tools/c7n_org/c7n_org/cli.py ``run_account``)."""
    listing = {
        "accounts": [
            {
                "account_id": account,
                "name": f"member-{account}",
                "regions": [REGION],
                "role": names.spoke_role_arn(STACK, account, REGION),
            }
            for account in accounts
        ]
    }
    paged = [  # fleet_sweep's query: running hosts, pages of 1,000 hosts on moto
        {"Filters": [{"Name": "instance-state-name", "Values": ["running"]}]},
        {"MaxResults": PAGE_OF_RESERVATIONS},
    ]
    (workdir / "accounts.yml").write_text(json.dumps(listing))  # JSON is YAML
    (workdir / "policy.yml").write_text(json.dumps({"policies": [{**CUSTODIAN_POLICY, "query": paged}]}))
    # Run as a module, so that the interpreter PARKBRAKE_C7N_PYTHON names needs no script beside it.
    command = [str(c7n_org_python()), "-m", "c7n_org.cli", "run", "-c", str(workdir / "accounts.yml")]
    command += ["-u", str(workdir / "policy.yml"), "-r", REGION, "--dryrun", "--cache-period", "0"]
    environment = {
        **os.environ,
        "AWS_ENDPOINT_URL": proxy_url,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": REGION,
    }
    log = workdir / "c7n-org.log"

    def run() -> tuple[int, float]:
        output = workdir / "out"
        shutil.rmtree(output, ignore_errors=True)
        started = time.perf_counter()
        with log.open("w") as errors:
            finished = subprocess.run(
                [*command, "-s", str(output)], env=environment, stderr=errors, check=False
            )
        seconds = time.perf_counter() - started
        if finished.returncode != 0:  # a failed account would flatter c7n-org's figures
            raise RuntimeError(f"c7n-org exited {finished.returncode}: {log.read_text()[-2000:]}")
        matched = sum(len(json.loads(path.read_text())) for path in output.rglob("resources.json"))
        return matched, seconds

    return run


def compare(moto: Moto, tools: dict[str, Callable[[], tuple[int, float]]], rounds: int) -> list[Run]:
    runs: list[Run] = []
    for warm_up in tools.values():  # untimed: moto's caches and the page cache warmed for both
        warm_up()
    for number in range(rounds):
        order = [PARKBRAKE, C7N_ORG] if number % 2 == 0 else [C7N_ORG, PARKBRAKE]
        for tool in order:
            moto.proxy.clear()
            matched, seconds = tools[tool]()
            runs.append(Run(number, tool, dict(moto.proxy.calls), seconds, matched, os.getloadavg()))
            print(
                f"  round {number} {tool}: {runs[-1].total_calls} calls {dict(sorted(runs[-1].calls.items()))}, "
                f"{seconds:.2f} s, would stop {matched}, load "
                f"{' '.join(f'{value:.2f}' for value in runs[-1].load)}",
                flush=True,
            )
    return runs


def summary(runs: list[Run], *, accounts: int, hosts: int, due: int) -> list[str]:
    lines = [f"{accounts} accounts x {hosts} hosts, {due} past their cap; medians (min-max) over rounds:"]
    medians: dict[str, tuple[float, float]] = {}
    for tool in (PARKBRAKE, C7N_ORG):
        of = [run for run in runs if run.tool == tool]
        seconds, calls, loads = [r.seconds for r in of], [r.total_calls for r in of], [r.load[0] for r in of]
        medians[tool] = (statistics.median(seconds), statistics.median(calls))
        lines.append(
            f"  {tool:14} wall {statistics.median(seconds):7.2f} s ({min(seconds):.2f}-{max(seconds):.2f})"
            f"  calls {statistics.median(calls):6.0f} ({min(calls)}-{max(calls)})"
            f"  would stop {of[0].matched}  load 1m {statistics.median(loads):.2f}"
        )
    (ours_s, ours_calls), (theirs_s, theirs_calls) = medians[PARKBRAKE], medians[C7N_ORG]
    lines.append(f"  parkbrake/c7n-org: wall {ours_s / theirs_s:.2f}, calls {ours_calls / theirs_calls:.2f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accounts", type=int, default=50, help="member accounts (default 50)")
    parser.add_argument("--hosts", type=int, default=200, help="running hosts per account (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    args = parser.parse_args(argv)
    if args.accounts < 1 or args.hosts < 1 or args.rounds < 1:
        parser.error("--accounts, --hosts and --rounds must each be at least 1")

    import logging

    logging.disable(logging.WARNING)  # moto's and the sweep's logs would drown the figures
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
    total = time.perf_counter()
    moto = Moto()
    # The spokes' sessions are made as the Lambda's are, from the environment: moto through the proxy.
    os.environ.update(
        AWS_ENDPOINT_URL=moto.proxy.url, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench"
    )
    os.environ.update(AWS_DEFAULT_REGION=REGION, AWS_REGION=REGION)
    workdir = Path(tempfile.mkdtemp(prefix="parkbrake-org-bench-"))
    try:
        accounts = member_accounts(args.accounts)
        assert ACCOUNT not in accounts
        due = seed_organisation(accounts, args.hosts)
        publish_spokes(moto, accounts)
        print(f"seeded {args.accounts} accounts x {args.hosts} hosts in {time.perf_counter() - total:.0f}s")
        tools = {PARKBRAKE: parkbrake_sweep(moto), C7N_ORG: c7n_org_sweep(moto.proxy.url, accounts, workdir)}
        runs = compare(moto, tools, args.rounds)
        print("\n".join(summary(runs, accounts=args.accounts, hosts=args.hosts, due=due)))
    finally:
        moto.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"benchmark wall time {time.perf_counter() - total:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
