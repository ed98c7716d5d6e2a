"""The ``parkbrake:organisation:`` section of a hub stack: the organisation, where its spokes go and how.

A stack with this section is the organisation's hub (the ledger, the meter, the notifier and the
central bus, docs/organisation.md) and declares a spoke for every member account and region:

```yaml
parkbrake:organisation:
  hub_account: '111111111111'      # the account this stack deploys to
  org_id: o-a1b2c3d4e5             # admitted to the hub bus by aws:PrincipalOrgID
  regions: [us-east-1, us-west-2]  # the member regions
  spokes: stacks                   # or stackset
  sweep: central                   # or spoke
  accounts: accounts.yml           # c7n-org's account list (spokes: stacks)
  organizational_units: [ou-ab12-cdef3456]   # the StackSet's targets (spokes: stackset)
```

Every problem is reported with its path, as the rest of the stack file's (stacks/validation.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from components.org_spoke_parts import SpokeArgs, overlong_names
from guardrails.accounts import ALL_REGIONS, REGION_NAME, Account, load_accounts
from guardrails.errors import InputError, ProblemsError
from stacks.validation import Section

SpokeForm = Literal["stacks", "stackset"]
SweepMode = Literal["central", "spoke"]
SPOKE_FORMS: tuple[SpokeForm, ...] = ("stacks", "stackset")
# central first: the default, the sweep a member account cannot delete (cloud-custodian #7179).
SWEEP_MODES: tuple[SweepMode, ...] = ("central", "spoke")

ACCOUNT_ID = re.compile(r"\d{12}")
# Organizations' own patterns (botocore organizations/2016-11-28 service-2.json: OrganizationId,
# OrganizationalUnitId, RootId), which CloudFormation's DeploymentTargets.OrganizationalUnitIds take.
ORG_ID = re.compile(r"o-[a-z0-9]{10,32}")
OU_OR_ROOT_ID = re.compile(r"ou-[0-9a-z]{4,32}-[a-z0-9]{8,32}|r-[0-9a-z]{4,32}")
# S3's bucket names: 3-63 lowercase letters, digits, dots and hyphens; the region is appended.
BUCKET_PREFIX = re.compile(r"[a-z0-9][a-z0-9.-]{1,45}")

ORGANISATION_KEYS = {
    "hub_account", "org_id", "regions", "spokes", "sweep", "accounts", "organizational_units",
    "code_bucket_prefix",
}  # fmt: skip


@dataclass(frozen=True)
class SpokePlacement:
    """One spoke: a member account in one region, and how Pulumi reaches it (``spokes: stacks``)."""

    account_id: str
    account_name: str
    region: str
    role_chain: tuple[str, ...] = ()
    profile: str | None = None
    external_id: str | None = None


@dataclass(frozen=True)
class OrganisationConfig:
    hub_account: str
    org_id: str
    regions: tuple[str, ...]
    spokes: SpokeForm = "stacks"
    sweep: SweepMode = "central"
    accounts: tuple[Account, ...] = ()
    organizational_units: tuple[str, ...] = ()
    # The StackSet's Lambda code is read from ``<prefix>-<region>`` (Lambda reads code from a bucket
    # in the function's own region): the hub's buckets, components/org_code_buckets.py.
    code_bucket_prefix: str = ""

    def placements(self) -> list[SpokePlacement]:
        """Every account of the list in each of its regions (c7n-org's ``regions``, or ours)."""
        return [
            SpokePlacement(
                account.account_id,
                account.name,
                region,
                account.role_chain,
                account.profile,
                account.external_id,
            )
            for account in self.accounts
            for region in spoke_regions(account, self.regions)
        ]


def spoke_regions(account: Account, regions: tuple[str, ...]) -> tuple[str, ...]:
    """An account's own regions, or the organisation's when it names none or c7n-org's ``all``."""
    if not account.regions or ALL_REGIONS in account.regions:
        return regions
    return account.regions


def parse_organisation(root: Section, stack: str, project_dir: Path) -> OrganisationConfig | None:
    """The section, or None for a stack that is no hub; problems go to ``root.problems``."""
    if not root.has("organisation"):
        return None
    section = root.section("organisation", ORGANISATION_KEYS)
    hub_account = section.string("hub_account", pattern=ACCOUNT_ID, hint="a quoted 12-digit account id")
    regions = section.matching_list("regions", REGION_NAME, what="an AWS region such as us-east-1")
    if not regions and not section.problems.has(section.at("regions")):
        section.problems.add(section.at("regions"), "is required (the member regions, e.g. [us-east-1])")
    spokes = section.choice("spokes", SPOKE_FORMS, "stacks")
    units = section.matching_list(
        "organizational_units", OU_OR_ROOT_ID, what="an OU id (ou-…) or root id (r-…)"
    )
    if spokes == "stackset" and not units and not section.problems.has(section.at("organizational_units")):
        section.problems.add(
            section.at("organizational_units"),
            "is required with spokes: stackset (the OUs the StackSet deploys to automatically)",
        )
    accounts = _accounts(section, project_dir, required=spokes == "stacks")
    organisation = OrganisationConfig(
        hub_account=hub_account,
        org_id=section.string("org_id", pattern=ORG_ID, hint="an organisation id such as o-a1b2c3d4e5"),
        regions=tuple(regions),
        spokes=spokes,  # type: ignore[arg-type]
        sweep=section.choice("sweep", SWEEP_MODES, "central"),  # type: ignore[arg-type]
        accounts=accounts,
        organizational_units=tuple(units),
        code_bucket_prefix=section.string(
            "code_bucket_prefix",
            f"parkbrake-{stack}-code-{hub_account}",
            pattern=BUCKET_PREFIX,
            hint="an S3 bucket name prefix (lowercase, at most 46 characters)",
        ),
    )
    _spoke_names_fit(section, stack, organisation)
    return organisation


def _spoke_names_fit(section: Section, stack: str, organisation: OrganisationConfig) -> None:
    """Every spoke name holds the stack's and the region's names; AWS would refuse one over its limit
    only at deploy, in a member account, so it is reported here with the stack name that fits."""
    regions = sorted({*organisation.regions, *(place.region for place in organisation.placements())})
    for region in regions:
        overlong = overlong_names(SpokeArgs(stack, organisation.hub_account, region, region=region))
        if overlong:
            name, limit = max(overlong, key=lambda found: len(found[0]) - found[1])
            section.problems.add(
                section.path,
                f"the spoke's name {name} ({region}) is {len(name)} characters, over AWS's {limit}; "
                f"use a stack name of at most {len(stack) - (len(name) - limit)} characters",
            )
            return


def _accounts(section: Section, project_dir: Path, *, required: bool) -> tuple[Account, ...]:
    """The c7n-org account list the section names, its own problems reported under its path."""
    path = section.at("accounts")
    if not section.has("accounts"):
        if required:
            section.problems.add(path, "is required with spokes: stacks (a c7n-org account list file)")
        return ()
    name = section.string("accounts", hint="the path of a c7n-org account list file")
    if not name:
        return ()
    file = project_dir / name
    try:
        return load_accounts(file.read_text(encoding="utf-8"), name)
    except OSError as error:
        section.problems.add(path, f"cannot read {name} ({error.strerror}); give the account list's path")
    except ProblemsError as error:
        for problem in error.problems:
            section.problems.add(f"{path} ({name}) {problem.path}", problem.message)
    except InputError as error:
        section.problems.add(path, str(error))
    return ()
