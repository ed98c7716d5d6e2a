"""``plan`` of an organisation's hub: what each account pays for parkbrake, parked and unparked.

The hub's resources are the hub account's; each spoke component's children are its member account's,
priced in the spoke's region by the same estimator as the rest of ``plan``
(:func:`guardrails.estimate.estimate_monthly_cost`). A StackSet's spokes are CloudFormation's: their
accounts are those of the OUs, known once deployed, so the StackSet is a line of its own priced per
account. What a spoke runs (Lambda requests, EventBridge rules, events sent to another account at
$1.00 a million, billed to the sender: botocore ``events`` ``PutTargets``) is billed per use and not
priced here, so a spoke's line is usually $0.00: its guardrails cost next to nothing until hosts run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from guardrails.estimate import estimate_monthly_cost
from guardrails.plurals import counted
from guardrails.pricing import load_price_table
from stacks.config import StackConfig
from stacks.offline import OfflineRun, RegisteredResource

SPOKE_TOKEN = "parkbrake:org:Spoke"
STACKSET_TOKEN = "parkbrake:org:SpokeStackSet"
SPOKE_NAME = re.compile(r"spoke-(?P<account>\d{12})-(?P<region>.+)")
NOT_PRICED = "not priced: Lambda requests, events forwarded at $1.00 a million"


@dataclass(frozen=True)
class AccountCost:
    """One account's line: the hub, a member account's spokes, or the StackSet's accounts."""

    account: str  # an account id, or the StackSet's OUs
    name: str
    what: str  # "hub and 1 spoke", "2 spokes", "StackSet, per account"
    unparked: Decimal
    parked: Decimal
    resources: int


@dataclass(frozen=True)
class OrganisationCosts:
    form: str
    sweep: str
    accounts: list[AccountCost]

    @property
    def unparked(self) -> Decimal:
        return sum((line.unparked for line in self.accounts), Decimal(0))

    @property
    def parked(self) -> Decimal:
        return sum((line.parked for line in self.accounts), Decimal(0))


def _groups(run: OfflineRun, hub_account: str) -> dict[tuple[str, str], list[RegisteredResource]]:
    """(account, region) → its resources; the StackSet's under ("stackset", "")."""
    owner: dict[str, tuple[str, str]] = {}
    for resource in run.resources:
        match = SPOKE_NAME.fullmatch(resource.name)
        if resource.type == SPOKE_TOKEN and match:
            owner[resource.urn] = (match["account"], match["region"])
        elif resource.type == STACKSET_TOKEN:
            owner[resource.urn] = ("stackset", "")
    groups: dict[tuple[str, str], list[RegisteredResource]] = {}
    for resource in run.resources:
        key = owner.get(resource.urn) or owner.get(resource.parent or "") or (hub_account, "")
        groups.setdefault(key, []).append(resource)
    return groups


def _priced(groups: dict[tuple[str, str], list[RegisteredResource]], hub_region: str) -> dict[str, Decimal]:
    prices = load_price_table()
    totals: dict[str, Decimal] = {}
    for (account, region), resources in groups.items():
        estimate = estimate_monthly_cost(resources, region=region or hub_region, prices=prices)
        totals[account] = totals.get(account, Decimal(0)) + estimate.total_usd
    return totals


def organisation_costs(config: StackConfig, runs: dict[bool, OfflineRun]) -> OrganisationCosts | None:
    """Per-account monthly figures of both runs (unparked, parked); None for a stack that is no hub."""
    organisation = config.organisation
    if organisation is None:
        return None
    groups = {parked: _groups(run, organisation.hub_account) for parked, run in runs.items()}
    totals = {parked: _priced(found, config.region) for parked, found in groups.items()}
    names = {account.account_id: account.name for account in organisation.accounts}
    names.setdefault(organisation.hub_account, "hub")
    shown = groups[config.parked]
    lines = []
    for account in sorted(
        {key[0] for key in shown}, key=lambda found: (found != organisation.hub_account, found)
    ):
        spokes = sum(1 for key in shown if key[0] == account and key[1])
        resources = sum(len(found) for key, found in shown.items() if key[0] == account)
        if account == "stackset":
            label, name, what = ",".join(organisation.organizational_units), "StackSet", "per account"
        else:
            label, name = account, names.get(account, account)
            what = counted(spokes, "spoke") if account != organisation.hub_account else _hub_what(spokes)
        lines.append(
            AccountCost(
                label,
                name,
                what,
                totals[False].get(account, Decimal(0)),
                totals[True].get(account, Decimal(0)),
                resources,
            )
        )
    return OrganisationCosts(organisation.spokes, organisation.sweep, lines)


def _hub_what(spokes: int) -> str:
    return f"hub and {counted(spokes, 'spoke')}" if spokes else "hub"


def organisation_lines(costs: OrganisationCosts, money: Any) -> list[str]:
    """The per-account table, fitted to 80 columns, the total last."""
    form = "a Pulumi spoke per account and region" if costs.form == "stacks" else "a StackSet to the OUs"
    lines = [
        f"[bold]Organisation[/]: spokes as {form}; sweep: {costs.sweep}",
        f"  {'account':<14} {'name':<16} {'what':<18} {'unparked':>11} {'parked':>11}",
    ]
    for line in costs.accounts:
        lines.append(
            f"  {_cut(line.account, 14):<14} {_cut(line.name, 16):<16} {_cut(line.what, 18):<18} "
            f"{money(line.unparked):>11} {money(line.parked):>11}"
        )
    lines.append(f"  {'total':<50} {money(costs.unparked):>11} {money(costs.parked):>11}")
    lines.append(f"  ({NOT_PRICED})")
    return lines


def _cut(value: str, width: int) -> str:
    return value if len(value) <= width else value[: width - 1] + "…"


def organisation_json(costs: OrganisationCosts) -> dict[str, Any]:
    def usd(value: Decimal) -> float:
        return float(value.quantize(Decimal("0.01")))

    return {
        "spokes": costs.form,
        "sweep": costs.sweep,
        "accounts": [
            {
                "account": line.account,
                "name": line.name,
                "what": line.what,
                "resources": line.resources,
                "monthly_usd": {"unparked": usd(line.unparked), "parked": usd(line.parked)},
            }
            for line in costs.accounts
        ],
        "monthly_usd": {"unparked": usd(costs.unparked), "parked": usd(costs.parked)},
    }
