"""``parkbrake reap --dry-run`` across the organisation: the sweep's own plan (``plan_sweep``, the
Lambda's listing and rules) in every account and region, with that account's clients; one table with
the account beside every host, what would be stopped or retired, and a line per account or region
without an answer. Judging only: acting in member accounts is the central sweep's or each spoke's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cli.oncall.organisation import OrganisationRun, account_failures, account_label
from cli.oncall.sweep_errors import describe_plan_error
from guardrails.settings import REGIONS, settings_from_environment
from lambdas.aws.assumed import ClientFactory, Place

if TYPE_CHECKING:
    from guardrails.sweep import Verdict
    from lambdas.engines.sweeping import SweepPlan


@dataclass
class OrganisationSweepPlan:
    accounts: int
    verdicts: list[Verdict] = field(default_factory=list)
    account_of: dict[str, str] = field(default_factory=dict)  # instance id → the account's name
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        def hosts(action: str) -> list[dict[str, str]]:
            return [
                {"account": self.account_of[v.host.instance_id], "region": v.host.region,
                 "instance_id": v.host.instance_id, "reason": v.reason}
                for v in self.verdicts
                if v.action == action
            ]  # fmt: skip

        return {
            "accounts": self.accounts,
            "checked": len(self.verdicts),
            "would_stop": hosts("stop"),
            "would_retire": hosts("terminate"),
            "dry_run": True,
            "errors": self.errors,
        }


def organisation_sweep_plan(
    run: OrganisationRun, *, environ: Mapping[str, str], now: datetime
) -> OrganisationSweepPlan:
    """Every account and region judged at once, as the reaper would judge it there."""
    from cli.oncall.in_process import lambda_quiet
    from lambdas.engines import sweeping

    def place_plan(place: Place, clients: ClientFactory) -> SweepPlan:
        settings = settings_from_environment({**environ, REGIONS: place.region})
        return sweeping.plan_sweep(settings, now=now, clients=clients)

    with lambda_quiet():  # every failure is in the plan's errors, printed once from there
        outcomes = run.across(place_plan)
    judged = OrganisationSweepPlan(run.accounts)
    for outcome in outcomes:
        if outcome.value is None:
            continue
        judged.verdicts += outcome.value.verdicts
        for verdict in outcome.value.verdicts:
            judged.account_of[verdict.host.instance_id] = outcome.place.account_name
        label = account_label(outcome.place)
        judged.errors += [f"{label}: {describe_plan_error(error)}" for error in outcome.value.errors]
    judged.errors = run.failures + account_failures(outcomes) + judged.errors
    return judged
