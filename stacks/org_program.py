"""The organisation's hub and spokes, declared beside the hub stack's own platform (stacks/platform.py).

``spokes: stacks`` declares a spoke component per account and region through a provider that assumes
the account's role from the c7n-org list (its chain in order, its external id), or uses its profile;
``spokes: stackset`` declares one StackSet that CloudFormation deploys to the OUs, new accounts
included, and the hub's code buckets it reads the Lambda code from (components/org_code_buckets.py). Both render the same parts (components/org_spoke_parts.py).
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws

from components.common import base_tags
from components.guardrail_functions import Guardrails
from components.guardrail_lambdas import DEADLINE, LEARN_MEMBER_ACCOUNTS, METER, REAPER
from components.lambda_archive import CODE_ARCHIVE, DEPENDENCY_LAYER, package_dir
from components.org_code_buckets import OrgCodeBuckets, OrgCodeBucketsArgs
from components.org_hub import OrgHub, OrgHubArgs, spoke_roles
from components.org_spoke import OrgSpoke, OrgSpokeArgs
from components.org_spoke_parts import SpokeArgs
from components.org_spoke_stackset import OrgSpokeStackSet, OrgSpokeStackSetArgs, TemplateArgs
from guardrails import names
from stacks.config import StackConfig
from stacks.org_config import OrganisationConfig, SpokePlacement


def spoke_args(config: StackConfig, organisation: OrganisationConfig, **where: str) -> SpokeArgs:
    """A spoke of this hub; ``where`` is a literal ``account`` and ``region``, or nothing (the pseudo parameters)."""
    return SpokeArgs(
        stack=config.stack,
        hub_account=organisation.hub_account,
        hub_region=config.region,
        sweep=organisation.sweep,
        sweep_every=config.guardrails.sweep_every,
        parked=config.parked,
        **where,
    )


def spokes_document(organisation: OrganisationConfig, stack: str) -> dict[str, Any]:
    """What the central sweep reads from the hub: the spoke roles, or the OUs to list the accounts of."""
    placements = [(placement.account_id, placement.region) for placement in organisation.placements()]
    return {
        "form": organisation.spokes,
        "sweep": organisation.sweep,
        "regions": list(organisation.regions),
        "roles": spoke_roles(stack, placements) if organisation.spokes == "stacks" else [],
        "organizational_units": list(organisation.organizational_units),
    }


def build_organisation(config: StackConfig, guardrails: Guardrails) -> OrgHub:
    """The hub's bus and grants, then every spoke in the configured form."""
    organisation = config.organisation
    assert organisation is not None  # stacks/platform.py calls this for a hub stack only
    tags = base_tags(config.stack, config.revision)
    hub = OrgHub(
        "hub",
        OrgHubArgs(
            stack=config.stack,
            org_id=organisation.org_id,
            sweep=organisation.sweep,
            meter_function_name=(
                names.function_name(config.stack, METER.guardrail) if config.database is not None else None
            ),
            reaper_role_name=names.function_name(config.stack, REAPER.guardrail),
            deadline_function_name=names.function_name(config.stack, DEADLINE.guardrail),
            spokes=spokes_document(organisation, config.stack),
            tags=tags,
            member_account_roles=[
                names.function_name(config.stack, function.guardrail)
                for function in LEARN_MEMBER_ACCOUNTS
                if function is not METER and config.database is not None
            ],
        ),
        opts=pulumi.ResourceOptions(depends_on=[guardrails]),
    )
    if organisation.spokes == "stackset":
        build_stack_set(config, organisation, hub, tags)
    else:
        artifacts = package_dir(config.stack)
        for placement in organisation.placements():
            OrgSpoke(
                spoke_component_name(placement),
                OrgSpokeArgs(
                    spoke=spoke_args(
                        config, organisation, account=placement.account_id, region=placement.region
                    ),
                    account_name=placement.account_name,
                    code=pulumi.FileArchive(str(artifacts / CODE_ARCHIVE)),
                    dependencies=pulumi.FileArchive(str(artifacts / DEPENDENCY_LAYER)),
                    tags=tags,
                ),
                opts=pulumi.ResourceOptions(
                    providers=[spoke_provider(config.stack, placement)], depends_on=[hub]
                ),
            )
    pulumi.export("hubBusArn", hub.bus_arn)
    return hub


def build_stack_set(
    config: StackConfig, organisation: OrganisationConfig, hub: OrgHub, tags: dict[str, str]
) -> OrgSpokeStackSet:
    """With ``sweep: spoke``, the code buckets in every spoke region, filled with the hub's archives,
    then the StackSet reading them: its instances wait for the code (a function cannot be created
    without it). A central spoke runs no function, so it reads no code and no bucket is made."""
    code = (
        OrgCodeBuckets(
            "spoke-code",
            OrgCodeBucketsArgs(
                stack=config.stack,
                hub_account=organisation.hub_account,
                org_id=organisation.org_id,
                bucket_prefix=organisation.code_bucket_prefix,
                regions=organisation.regions,
                artifacts=package_dir(config.stack),
                tags=tags,
            ),
        )
        if organisation.sweep == "spoke"
        else None
    )
    return OrgSpokeStackSet(
        "spokes",
        OrgSpokeStackSetArgs(
            template=TemplateArgs(spoke_args(config, organisation), organisation.code_bucket_prefix, tags),
            organizational_units=organisation.organizational_units,
            regions=organisation.regions,
            tags=tags,
            code_versions=code.versions if code is not None else None,
            code_objects=code.objects if code is not None else (),
        ),
        opts=pulumi.ResourceOptions(depends_on=[hub] if code is None else [hub, code]),
    )


def spoke_component_name(placement: SpokePlacement) -> str:
    return f"spoke-{placement.account_id}-{placement.region}"


def spoke_provider(stack: str, placement: SpokePlacement) -> aws.Provider:
    """The account's provider: its c7n-org role chain assumed in order (or its profile), pinned to it."""
    session = f"{names.prefix(stack)}-deploy"
    last = len(placement.role_chain) - 1
    roles = [
        aws.ProviderAssumeRoleArgs(
            role_arn=role,
            session_name=session,
            # the external id guards the account's own role, the chain's last
            external_id=placement.external_id if index == last else None,
        )
        for index, role in enumerate(placement.role_chain)
    ]
    return aws.Provider(
        spoke_component_name(placement),
        region=placement.region,
        assume_roles=roles or None,
        profile=placement.profile,
        allowed_account_ids=[placement.account_id],
    )
