"""``parkbrake status --org`` at 50 accounts × 3 regions against the listing alone, in the same run.

The organisation is made in moto (Organizations ``CreateAccount`` ×50, a couple of GPU hosts in each
account, entered through ``sts:AssumeRole`` as the command enters them). In alternating rounds
(``benchmarks/rounds.py``):

- **status**: what ``status --org`` does after Python started: the accounts from Organizations, each
  account's role assumed once, every account and region read (:func:`organisation_status`: hosts,
  stacks, stopped hosts, services) and the answer rendered at 80 columns;
- **listing**: the ceiling's floor: the same accounts from Organizations, the same assumptions, and
  the sweep's ``DescribeInstances`` pages in every account and region (``list_hosts``), through the
  same ``across_places`` at the same concurrency, nothing else.

The target is status ≤ 2× the listing (issue 37). Each round's one-minute load average is printed
beside its figures; moto runs in this process, so its time is in both figures.

    python -m benchmarks.org_status [--accounts 50] [--rounds 3] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import io
import os
import time
from datetime import UTC, datetime

from benchmarks.harness import Moto
from benchmarks.rounds import alternate, figure_line, per_round_loads, ratio

REGIONS = ("us-east-1", "us-west-2", "eu-west-1")
ROLE = "parkbrake-oncall"
TARGET_RATIO = 2.0


def make_organisation(accounts: int, hosts: int) -> None:
    """``accounts`` member accounts, ``hosts`` GPU hosts in each (in one of its regions, in turn)."""
    import boto3

    from lambdas.aws.assumed import AccountAccess, AccountSessions

    organizations = boto3.client("organizations")
    organizations.create_organization(FeatureSet="ALL")
    sessions = AccountSessions()
    for number in range(accounts):
        created = organizations.create_account(
            Email=f"team{number}@example.com", AccountName=f"team-{number:02d}"
        )
        account = created["CreateAccountStatus"]["AccountId"]
        access = AccountAccess(account, (f"arn:aws:iam::{account}:role/{ROLE}",))
        ec2 = sessions.clients(access)("ec2", REGIONS[number % len(REGIONS)])
        ec2.run_instances(ImageId="ami-12c6146b", MinCount=hosts, MaxCount=hosts, InstanceType="g5.xlarge")


def timed_status(concurrency: int) -> float:
    from rich.console import Console

    from cli.oncall.fleet.across import organisation_status
    from cli.oncall.fleet.status_view import print_status
    from cli.oncall.organisation import OrganisationScope, organisation_run
    from guardrails.settings import Settings
    from lambdas.clients import one_session_clients

    started = time.perf_counter()
    scope = OrganisationScope(org=True, org_role=ROLE, concurrency=concurrency)
    run = organisation_run(scope, REGIONS, one_session_clients())
    settings = Settings(stack=None, regions=REGIONS)
    report = organisation_status(run, stack=None, settings=settings, now=datetime.now(UTC))
    print_status(Console(file=io.StringIO(), width=80, force_terminal=False), report)
    assert not report.errors, report.errors
    return (time.perf_counter() - started) * 1000


def timed_listing(concurrency: int) -> float:
    from cli.oncall.organisation import OrganisationScope, organisation_run
    from lambdas.aws.ec2_hosts import list_hosts
    from lambdas.clients import one_session_clients

    started = time.perf_counter()
    scope = OrganisationScope(org=True, org_role=ROLE, concurrency=concurrency)
    run = organisation_run(scope, REGIONS, one_session_clients())
    outcomes = run.across(lambda place, clients: list_hosts(clients("ec2", place.region), place.region))
    assert all(outcome.failure is None for outcome in outcomes)
    return (time.perf_counter() - started) * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--hosts", type=int, default=2, help="GPU hosts per account")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    options = parser.parse_args(argv)
    moto = Moto()
    try:
        os.environ.update(
            AWS_ENDPOINT_URL=moto.url, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
            AWS_REGION=REGIONS[0], AWS_DEFAULT_REGION=REGIONS[0],
        )  # fmt: skip
        make_organisation(options.accounts, options.hosts)
        timed_listing(options.concurrency)  # warm: imports, botocore's models
        figures = alternate(
            {
                "listing": lambda _: timed_listing(options.concurrency),
                "status": lambda _: timed_status(options.concurrency),
            },
            options.rounds,
        )
    finally:
        moto.close()
    against = ratio(figures["status"], figures["listing"])
    places = (options.accounts + 1) * len(REGIONS)  # the management account is listed too
    print(f"status --org over {options.accounts + 1} accounts × {len(REGIONS)} regions ({places} places), "
          f"concurrency {options.concurrency}, {options.rounds} rounds")  # fmt: skip
    print(figure_line("listing alone ", figures["listing"], "ms"))
    print(figure_line("status --org  ", figures["status"], "ms"))
    verdict = "meets" if against.median <= TARGET_RATIO else "MISSES"
    # Not Ratio.text(): the listing is the floor status stands on, not a ceiling it must stay under.
    moves = "; moves with load" if against.moves_with_load else ""
    print(
        f"status / listing: {against.median:.2f} [{min(against.values):.2f}–{max(against.values):.2f}, "
        f"load {min(against.loads):.1f}–{max(against.loads):.1f}] (target ≤ {TARGET_RATIO:.0f}: {verdict}{moves})"
    )
    print(per_round_loads(figures))


if __name__ == "__main__":
    main()
