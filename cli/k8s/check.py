"""``parkbrake k8s check``: decide one Workload against the ledger without a cluster (the controller's own
decision, for a person, CI or a test)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.options import project_dir_option, stack_option
from guardrails.errors import InputError

if TYPE_CHECKING:
    from cli.k8s.admission import BudgetCheck
    from guardrails.pricing import PriceTable
    from stacks.config import StackConfig


def kubernetes_stack(stack: str, project_dir: Path) -> tuple[StackConfig, PriceTable]:
    """The stack (refused, exit 2, unless it has a parkbrake:kubernetes section) and the price table."""
    from guardrails.pricing import load_price_table
    from stacks.config import load_stack_config
    from stacks.kubernetes_config import kubernetes_config

    config = load_stack_config(stack, project_dir)
    kubernetes_config(config)
    return config, load_price_table()


def budget_check(config: StackConfig, environ: Any = None) -> BudgetCheck:
    """A BudgetCheck on one (unpooled) connection to the ledger ``PARKBRAKE_DATABASE_URL`` names.

    An unreachable ledger is not an error here: the connection is made at the first query, and the
    check answers Retry (fail closed) when it cannot be."""
    from cli.k8s.admission import BudgetCheck
    from lambdas.ledger.connections import database_url
    from lambdas.ledger.store import LedgerStore

    url = database_url(os.environ if environ is None else environ)
    return BudgetCheck(
        LedgerStore.connect(url), default_cap=config.guardrails.default_max_runtime, region=config.region
    )


def read_workload(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise InputError(
            f"--workload: {path} is not JSON ({error}); give the Workload as `kubectl get -o json` prints it"
        ) from None


@click.command()
@stack_option
@project_dir_option
@click.option(
    "--workload",
    "workload_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A Kueue v1beta2 Workload as JSON, as the API server returns it (kubectl get workload X -o json).",
)
@click.option(
    "--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="text for people, json for scripts and CI.",
)  # fmt: skip
def check(*, stack: str, project_dir: Path, workload_file: Path, output: str) -> None:
    """Decide one Workload's budget admission check (Ready, Retry or Rejected) against the ledger.

    The same decision the controller makes, reserving in the ledger as it does (a Workload decided again
    finds its reservation by uid). Exit 0 for Ready, 1 for Retry or Rejected, 2 for bad input.

    \b
    Example:
      kubectl get workload job-train-1a2b3 -n research -o json > wl.json
      parkbrake k8s check --stack eks --workload wl.json --output json
    """
    from cli.k8s.workload import workload_request

    config, prices = kubernetes_stack(stack, project_dir)
    workload = read_workload(workload_file)
    request = workload_request(workload, config, prices)
    check = budget_check(config)
    try:
        version = str((workload.get("metadata") or {}).get("resourceVersion", ""))
        decision = check.decide(request, now=datetime.now(UTC), version=version)
    finally:
        check.store.close()
    if output == "json":
        click.echo(json.dumps(decision.as_dict()))
    else:
        click.echo(f"{decision.state}: {decision.message}")
    if decision.state != "Ready":
        click.get_current_context().exit(1)
