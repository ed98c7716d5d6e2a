"""``parkbrake guard-policy``: the preventive policy that keeps accelerator hosts inside the guardrails."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cli.options import output_option, stack_option


@click.command("guard-policy")
@stack_option
@click.option(
    "--deployer-role",
    "deployer_roles",
    multiple=True,
    metavar="ARN",
    help="A role that may also edit parkbrake:* tags (the one that runs `pulumi up`); with --org, a "
    "role that deploys the spokes (required); * wildcards allowed; repeatable.",
)
@click.option(
    "--extender-role",
    "extender_roles",
    multiple=True,
    metavar="ARN",
    help="A role people run `parkbrake extend` as: it may set the extension's tags (parkbrake:exempt-until "
    "and parkbrake:extended-*) and no other parkbrake:* tag; * wildcards allowed; repeatable.",
)
@click.option(
    "--org",
    "organisation",
    is_flag=True,
    help="Print the service control policy for the member accounts' OU instead: no one but the stacks' "
    "roles and the deployers may disable the spokes or edit parkbrake:* tags (docs/organisation.md).",
)
@click.option(
    "--document",
    type=click.Choice(["both", "scp", "boundary"]),
    default="both",
    show_default=True,
    help="Print one policy document alone, ready for `aws organizations create-policy --content` "
    "or `aws iam create-policy --policy-document`.",
)
@click.option(
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Folder holding the stack files.",
)
@output_option
def guard_policy(
    *,
    stack: str,
    deployer_roles: tuple[str, ...],
    extender_roles: tuple[str, ...],
    organisation: bool,
    document: str,
    project_dir: Path,
    output: str,
) -> None:
    """Print the preventive policy that keeps accelerator hosts inside the guardrails.

    A service control policy, and the same statements as a permissions boundary, that deny launching
    accelerator hosts without parkbrake:managed=true and a parkbrake:max-runtime tag, and deny editing
    parkbrake:* tags except by the stack's own roles (and the extenders, for the extension's tags
    only). docs/guardrails.md says how to attach them; docs/owners.md, who may extend.

    With --org, one service control policy for the OU of the member accounts, for every stack: the
    spokes' functions, rules, sweep and deadline schedules, stacks and roles (parkbrake-*) may be
    changed only by the stacks' own roles and the deployers, and parkbrake:* tags edited as above.

    \b
    Example:
      parkbrake guard-policy --stack prod --document scp > parkbrake-scp.json
      parkbrake guard-policy --org \\
        --deployer-role 'arn:aws:iam::*:role/parkbrake-deployer' > org-scp.json
    """
    if organisation:
        _print_organisation_policy(deployer_roles, extender_roles, document, output)
        return
    _print_stack_policies(
        stack,
        project_dir,
        deployer_roles=deployer_roles,
        extender_roles=extender_roles,
        document=document,
        output=output,
    )


def _print_stack_policies(
    stack: str,
    project_dir: Path,
    *,
    deployer_roles: tuple[str, ...],
    extender_roles: tuple[str, ...],
    document: str,
    output: str,
) -> None:
    from guardrails.guard_policy import check_role_patterns, permissions_boundary, service_control_policy
    from stacks.config import load_stack_config

    config = load_stack_config(stack, project_dir)  # the stack must exist and be valid
    ceiling = config.guardrails.max_runtime_ceiling
    check_role_patterns("--deployer-role", deployer_roles)
    check_role_patterns("--extender-role", extender_roles)
    documents = {
        "scp": service_control_policy(stack, deployer_roles, extender_roles, ceiling),
        "boundary": permissions_boundary(stack, deployer_roles, extender_roles, ceiling),
    }
    if document != "both":
        click.echo(_policy_text(documents[document]))
        return
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "stack": stack,
                    "service_control_policy": documents["scp"],
                    "permissions_boundary": documents["boundary"],
                },
                indent=2,
            )
        )
        return
    click.echo(f"# Service control policy for stack {stack} (attach to the account or OU):")
    click.echo(_policy_text(documents["scp"]))
    click.echo(
        f"\n# Permissions boundary for stack {stack} (attach to the roles and users that launch hosts):"
    )
    click.echo(json.dumps(documents["boundary"], indent=2))


def _print_organisation_policy(
    deployer_roles: tuple[str, ...], extender_roles: tuple[str, ...], document: str, output: str
) -> None:
    from guardrails.errors import InputError
    from guardrails.guard_policy import SCP_SIZE_LIMIT
    from guardrails.org_policy import minified, organisation_policy

    if document == "boundary":
        raise InputError(
            "--document boundary: --org prints a service control policy only; leave --document out"
        )
    policy = organisation_policy(deployer_roles, extender_roles)
    if output == "json":
        characters = len(minified(policy))
        click.echo(
            json.dumps(
                {"service_control_policy": policy, "characters": characters, "limit": SCP_SIZE_LIMIT},
                indent=2,
            )
        )
        return
    click.echo(_policy_text(policy))


def _policy_text(policy: dict[str, object]) -> str:
    """Indented when that fits AWS Organizations' size limit, else compact: submitted through the API or
    the CLI, an SCP's whitespace counts against the 5,120 characters (the duration patterns of a
    long ceiling need the room)."""
    from guardrails.guard_policy import SCP_SIZE_LIMIT

    indented = json.dumps(policy, indent=2)
    return indented if len(indented) <= SCP_SIZE_LIMIT else json.dumps(policy, separators=(",", ":"))
